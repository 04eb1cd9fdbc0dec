"""Bad input gets a clear error naming what was wrong."""
import dataclasses
import pickle

import pytest

import rdmaq
from rdmaq.handle import ShmInfo, VerbsInfo

# What a reader on another process (verbs: another host) needs to find the queue.
INFO = {"shm": (ShmInfo, {"name", "boot_id"}),
        "verbs": (VerbsInfo, {"endpoint", "live", "writer", "queue", "slot_bytes", "slots"})}


def test_handle_is_small_and_picklable(transport):
    with rdmaq.Writer(8, transport=transport) as w:
        data = pickle.dumps(w.handle)
        assert len(data) < 768
        h = pickle.loads(data)
        assert h == w.handle and h.n_readers == 8 and h.transport == transport
        info_type, needed = INFO[transport]
        assert type(h.info) is info_type
        assert all(getattr(h.info, k) for k in needed), h.info


@pytest.mark.parametrize("index", [-1, 2, 100])
def test_out_of_range_index(transport, index):
    with rdmaq.Writer(2, transport=transport) as w:
        with pytest.raises(ValueError, match=f"reader index {index} out of range: queue has 2 readers"):
            rdmaq.Reader(w.handle, index)


def test_not_a_handle():
    with pytest.raises(TypeError, match="not an rdmaq.Handle"):
        rdmaq.Reader({"name": "x"}, 0)


def test_corrupt_handle():
    with rdmaq.Writer(1, transport="shm") as w:
        h = w.handle
        bad = rdmaq.Handle(h.transport, h.n_readers, dataclasses.replace(h.info, name=""))
        with pytest.raises(ValueError, match="corrupt shm handle: field 'info.name'"):
            rdmaq.Reader(bad, 0)
        with pytest.raises(TypeError, match="handle info must be a ShmInfo for transport 'shm', got dict"):
            rdmaq.Reader(rdmaq.Handle("shm", 1, {"name": h.info.name}), 0)
        gone = rdmaq.Handle("shm", 1, ShmInfo("rdmaq-no-such-queue", ""))
        with pytest.raises(rdmaq.QueueNotFoundError, match="no rdmaq queue rdmaq-no-such-queue here"):
            rdmaq.Reader(gone, 0)


def test_handle_for_unknown_transport_or_version():
    with pytest.raises(ValueError, match="unknown transport 'carrier-pigeon'"):
        rdmaq.Reader(rdmaq.Handle("carrier-pigeon", 1, ShmInfo("x", "")), 0)
    with pytest.raises(ValueError, match="different rdmaq releases"):
        rdmaq.Reader(rdmaq.Handle("shm", 1, ShmInfo("x", ""), version=99), 0)


def test_handle_from_another_host():
    with rdmaq.Writer(1, transport="shm") as w:
        h = rdmaq.Handle("shm", 1, dataclasses.replace(w.handle.info, boot_id="another-machine"))
        with pytest.raises(rdmaq.QueueNotFoundError, match="made on another host"):
            rdmaq.Reader(h, 0)


def test_same_index_twice(transport):
    with rdmaq.Writer(1, transport=transport) as w:
        r = rdmaq.Reader(w.handle, 0)
        with pytest.raises(rdmaq.IndexInUseError, match="reader index 0 is already attached"):
            rdmaq.Reader(w.handle, 0)
        r.close()


@pytest.mark.parametrize("kwargs, match", [
    ({"slot_bytes": 100}, "slot_bytes must be in 128"),
    ({"slot_bytes": 1000}, "multiple of 64"),
    ({"slots": 1}, "slots must be in 2"),
    ({"max_message_bytes": 0}, "max_message_bytes must be in 1"),
    ({"transport": "udp"}, "unknown transport 'udp'"),
])
def test_bad_writer_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rdmaq.Writer(1, **kwargs)


def test_bad_reader_count_and_types():
    with pytest.raises(ValueError, match="n_readers must be in 1..256, got 0"):
        rdmaq.Writer(0)
    with pytest.raises(TypeError, match="n_readers must be an int"):
        rdmaq.Writer("4")
    with rdmaq.Writer(1, transport="shm") as w:
        with pytest.raises(TypeError, match="needs bytes-like"):
            w.put("a str is not bytes")
        with pytest.raises(ValueError, match="timeout must be >= 0"):
            w.put(b"x", timeout=-1)


def test_get_on_raw_bytes_then_recv_mismatch_is_clear():
    with rdmaq.Writer(1, transport="shm") as w:
        r = rdmaq.Reader(w.handle, 0)
        w.put(b"raw bytes, not an object")
        with pytest.raises(ValueError, match="not an rdmaq object message"):
            r.recv(timeout=5)
        r.close()


# A pattern anchored with $ also matches before a trailing newline: every text
# field of a handle must refuse one with a ValueError naming it (not reach the
# transport and come back as a queue not found).
@pytest.mark.parametrize("field", ["name", "boot_id"])
def test_shm_handle_field_with_a_trailing_newline_is_refused(field):
    with rdmaq.Writer(1, transport="shm") as w:
        info = dataclasses.replace(w.handle.info, **{field: getattr(w.handle.info, field) + "\n"})
        with pytest.raises(ValueError, match=f"corrupt shm handle: field 'info.{field}'"):
            rdmaq.Reader(rdmaq.Handle("shm", 1, info), 0)


VERBS_INFO = VerbsInfo(proto=1, endpoint="tcp://127.0.0.1:5555", live=("127.0.0.1", 5556),
                       queue="ab" * 8, writer=bytes(16), pid=1234, host="node1", device="mlx5_0",
                       gid="00" * 16, slot_bytes=4096, slots=64, max_message=1 << 20)


@pytest.mark.parametrize("field", ["endpoint", "live", "queue", "host", "device", "gid"])
def test_verbs_handle_field_with_a_trailing_newline_is_refused(field):
    from rdmaq.transport.verbs import wire

    wire.handle_info(VERBS_INFO, 1)  # the untouched info is good
    value = getattr(VERBS_INFO, field)
    value = (value[0] + "\n", value[1]) if field == "live" else value + "\n"
    with pytest.raises(wire.Bad) as e:
        wire.handle_info(dataclasses.replace(VERBS_INFO, **{field: value}), 1)
    assert e.value.field.startswith(f"info.{field}"), e.value
