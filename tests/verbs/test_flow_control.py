"""Back-pressure, large messages, timeouts: the core suite's checks over verbs."""
import threading
import time

import pytest

import rdmaq
from conftest import start
from vhelpers import sleepy_reader


def test_writer_blocks_on_full_ring_then_times_out(procs, results):
    with rdmaq.Writer(2, transport="verbs", slot_bytes=256, slots=4) as w:
        r0 = rdmaq.Reader(w.handle, 0)
        procs.append(start(sleepy_reader, w.handle, 1, results))
        w.wait_ready(timeout=120)
        assert results.get(timeout=120) == (1, "attached")
        for i in range(4):
            w.put(bytes([i]) * 100, timeout=30)
        with pytest.raises(TimeoutError):
            w.put(b"no room", timeout=0.3)
        # the fast reader got everything that was sent, nothing more
        assert [r0.get(timeout=30)[0] for _ in range(4)] == [0, 1, 2, 3]
        with pytest.raises(TimeoutError):
            r0.get(timeout=0.2)
        r0.close()


def test_slow_reader_paces_the_writer():
    """A reader that takes its time holds the writer back; nothing is lost."""
    with rdmaq.Writer(1, transport="verbs", slot_bytes=256, slots=4) as w:
        r = rdmaq.Reader(w.handle, 0)
        got = []

        def slow():
            for _ in range(40):
                time.sleep(0.005)
                got.append(bytes(r.get(timeout=60)))

        t = threading.Thread(target=slow)
        t.start()
        for i in range(40):
            w.put(i.to_bytes(2, "little") * 50, timeout=60)
        t.join(120)
        assert got == [i.to_bytes(2, "little") * 50 for i in range(40)]
        # the writer had to wait for credit (RDMA-written by the reader)
        assert w.stats["credits"] > 0
        assert w.stats["sleeps"] + w.stats["spins"] > 0
        r.close()


@pytest.mark.parametrize("size", [1 << 20, 4 << 20 | 12345])
def test_message_larger_than_ring_streams_through(size):
    payload = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    with rdmaq.Writer(1, transport="verbs", slot_bytes=4096, slots=8) as w:
        r = rdmaq.Reader(w.handle, 0)
        out = []
        t = threading.Thread(target=lambda: out.append(r.get(timeout=120)))
        t.start()
        w.put(payload, timeout=120)
        w.put(b"next", timeout=120)
        t.join(180)
        assert out[0] == payload
        assert r.get(timeout=30) == b"next"
        r.close()


def test_message_above_max_is_refused_clearly():
    with rdmaq.Writer(1, transport="verbs", max_message_bytes=1000) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.put(b"x" * 1000)
        with pytest.raises(rdmaq.MessageTooLarge, match="1001 bytes exceeds max_message_bytes=1000"):
            w.put(b"x" * 1001)
        assert len(r.get(timeout=30)) == 1000
        r.close()


def test_get_times_out_then_receives():
    with rdmaq.Writer(1, transport="verbs") as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=30)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            r.get(timeout=0.3)
        assert time.monotonic() - t0 >= 0.3
        w.put(b"late")
        assert r.get(timeout=30) == b"late"
        r.close()


def test_streamed_message_cut_by_timeout_is_discarded_not_half_delivered():
    with rdmaq.Writer(1, transport="verbs", slot_bytes=256, slots=4) as w:
        r = rdmaq.Reader(w.handle, 0)
        with pytest.raises(TimeoutError):
            w.put(b"A" * 10_000, timeout=0.3)  # > ring, nobody reading
        got = []
        t = threading.Thread(target=lambda: got.extend(r.get(timeout=60) for _ in range(2)))
        t.start()
        w.put(b"B" * 5000, timeout=60)
        w.put(b"C", timeout=60)
        t.join(120)
        assert got == [b"B" * 5000, b"C"]
        r.close()


def test_objects_with_out_of_band_buffers():
    with rdmaq.Writer(1, transport="verbs") as w:
        r = rdmaq.Reader(w.handle, 0)
        obj = {"step": 7, "blob": bytearray(b"z" * 100_000), "ids": list(range(50))}
        w.send(obj)
        assert r.recv(timeout=30) == obj
        r.close()
