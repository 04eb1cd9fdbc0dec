"""Object messages: which values take the out-of-band path, and what comes back.

"Out of band" is observable without timing: the buffer object itself (or a
view of its memory, never a copy) is one of the parts ``dumps`` hands to
``put``, so the writer copies it once, straight into the ring.
"""
import pickle
import threading

import numpy as np
import pytest

import rdmaq
from rdmaq import serialize

BIG = serialize.OOB_MIN_BYTES


def _message(parts):
    return bytearray(b"".join(bytes(p) for p in parts))


def _aliases(parts, buf):
    """The parts that share memory with ``buf`` (a copy never does)."""
    view = np.frombuffer(buf, np.uint8)
    return [p for p in parts if np.shares_memory(np.frombuffer(p, np.uint8), view)]


def _n_oob(parts):
    magic, n = serialize._HDR.unpack_from(parts[0])
    assert magic == serialize.MAGIC
    return n


def _through_ring(obj, transport="shm"):
    with rdmaq.Writer(1, transport=transport, slot_bytes=4096, slots=16) as w, \
            rdmaq.Reader(w.handle, 0) as r:
        got = []
        t = threading.Thread(target=lambda: got.append(r.recv(timeout=60)), daemon=True)
        t.start()
        w.send(obj, timeout=60)
        t.join(60)
        return got[0]


@pytest.mark.parametrize("kind", [bytes, bytearray])
# ids that do not follow the constants: a mutant of them must not rename the test it runs
@pytest.mark.parametrize("size", [BIG, 1 << 20, (3 << 20) + 7], ids=["big", "1MiB", "3MiB+7"])
def test_large_bytes_are_not_copied_into_the_pickle(kind, size):
    payload = kind(np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes())
    parts = serialize.dumps({"data": payload, "step": 3})
    assert sum(p is payload for p in parts) == 1  # the object itself, by reference
    got = serialize.loads(_message(parts))
    assert type(got["data"]) is kind and got["data"] == payload and got["step"] == 3


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_small_bytes_stay_in_the_pickle_stream(kind):
    payload = kind(b"s" * (BIG - 1))
    parts = serialize.dumps([payload])
    assert not any(p is payload for p in parts)
    assert len(parts) == 2  # header + one pickle chunk
    got = serialize.loads(_message(parts))
    assert type(got[0]) is kind and got[0] == payload


def test_repeated_large_bytes_travel_once():
    payload = b"r" * (1 << 20)
    parts = serialize.dumps([payload, payload, payload])
    assert sum(p is payload for p in parts) == 1
    assert len(_message(parts)) < len(payload) + 4096
    got = serialize.loads(_message(parts))
    assert got == [payload] * 3 and got[0] is got[1] is got[2]


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_large_bytes_round_trip_through_the_ring(transport, kind):
    payload = kind(bytes(range(256)) * (5 << 12))  # 5 MiB: longer than the ring
    got = _through_ring(("b", payload, b"tail"), transport)
    assert type(got[1]) is kind and got[1] == payload and got[2] == b"tail"


def test_several_out_of_band_buffers_keep_their_order():
    arrays = [np.full(BIG // 8 + i * 1000, i + 1, dtype=np.int64) for i in range(4)]
    parts = serialize.dumps(arrays)
    assert _n_oob(parts) == 4
    for a in arrays:
        assert len(_aliases(parts, a)) == 1
    got = serialize.loads(_message(parts))
    assert [g.shape for g in got] == [a.shape for a in arrays]
    for g, a in zip(got, arrays):
        assert np.array_equal(g, a)
    got[0][0] = -5  # one buffer each: no aliasing between them
    assert got[1][0] == 2


def test_oob_buffers_and_large_bytes_in_one_message():
    arr = np.arange(1 << 17, dtype=np.float64)  # 1 MiB
    blob = b"z" * (1 << 20)
    parts = serialize.dumps({"a": arr, "b": blob, "c": arr[::2].copy()})
    assert _n_oob(parts) == 2
    got = serialize.loads(_message(parts))
    assert np.array_equal(got["a"], arr) and got["b"] == blob
    assert np.array_equal(got["c"], arr[::2])


def test_small_arrays_stay_in_band():
    a = np.arange(10, dtype=np.int32)
    parts = serialize.dumps(a)
    assert _n_oob(parts) == 0 and not _aliases(parts, a)
    assert np.array_equal(serialize.loads(_message(parts)), a)


def test_torch_cpu_tensor_takes_the_out_of_band_path():
    torch = pytest.importorskip("torch")
    t = torch.arange(1 << 18, dtype=torch.float32)  # 1 MiB
    parts = serialize.dumps({"t": t})
    assert _n_oob(parts) == 1
    assert len(_aliases(parts, t.numpy())) == 1
    msg = _message(parts)
    got = serialize.loads(msg)["t"]
    assert torch.equal(got, t)
    # the received tensor is a view of the reader's message, not a copy
    base = np.frombuffer(msg, np.uint8)
    assert np.shares_memory(got.numpy(), base)


def test_non_contiguous_tensor_takes_torch_s_own_path():
    torch = pytest.importorskip("torch")
    t = torch.arange(1 << 18, dtype=torch.float32).reshape(512, 512).t()
    got = serialize.loads(_message(serialize.dumps(t)))
    assert torch.equal(got, t)


def test_tensor_that_requires_grad_takes_torch_s_own_path():
    """A CPU tensor that requires grad is not sent as raw bytes (they would come back
    as a plain tensor): torch's own reducer sends it, and it comes back requiring grad."""
    torch = pytest.importorskip("torch")
    t = torch.arange(1 << 18, dtype=torch.float32).requires_grad_()  # contiguous, 1 MiB
    parts = serialize.dumps({"t": t})
    assert _n_oob(parts) == 0
    got = serialize.loads(_message(parts))["t"]
    assert got.requires_grad and torch.equal(got.detach(), t.detach())


def test_message_is_pickle_protocol_5_behind_a_header():
    parts = serialize.dumps({"k": 1})
    msg = _message(parts)
    (n,) = np.frombuffer(msg, "<u8", 1, serialize._HDR.size)
    body = bytes(msg[serialize._HDR.size + 8:])
    assert len(body) == n and pickle.loads(body) == {"k": 1}


def test_truncated_message_is_refused_clearly():
    msg = _message(serialize.dumps(np.zeros(1 << 17)))
    with pytest.raises(rdmaq.ProtocolError, match="truncated object message"):
        serialize.loads(msg[:-100])


def test_another_release_s_framing_is_named_not_misread():
    """The magic is the framing's version: a message framed by another release is a
    ProtocolError naming both; bytes that were never an object message stay a ValueError."""
    msg = _message(serialize.dumps({"k": 1}))
    msg[:4] = b"RQP6"
    with pytest.raises(rdmaq.ProtocolError, match="another release's framing .'RQP6', this rdmaq reads 'RQP5'"):
        serialize.loads(msg)
    msg[:4] = b"\x80\x05\x95\x00"  # a bare pickle
    with pytest.raises(ValueError, match="not an rdmaq object message"):
        serialize.loads(msg)


def test_a_sent_bytearray_is_not_kept_by_the_serializer():
    """Once dumps' message is gone, the caller's buffers are theirs again: a bytearray that
    went by reference (large) or out of band can be resized, and is freed with its last name."""
    import gc
    import weakref

    big = bytearray(BIG)
    arr = np.zeros(BIG, np.uint8)
    parts = serialize.dumps({"b": big, "a": arr})
    assert _aliases(parts, big) and _aliases(parts, arr)
    del parts
    big.extend(b"x")  # BufferError while anything still exports it
    ref = weakref.ref(arr)
    del arr
    gc.collect()
    assert ref() is None


class _SendsWhilePickled:
    """An object whose pickling pickles another message on the same thread (a signal handler
    that sends while this thread is in the middle of a put does the same)."""

    inner: list = []

    def __reduce__(self):
        _SendsWhilePickled.inner.append(_message(serialize.dumps({"inner": list(range(50))})))
        return (dict, ({"outer": "x" * 100},))


def test_a_message_pickled_while_another_is_being_pickled_leaves_both_whole():
    """The thread's pickler is in use: the nested message gets a pickler of its own, and
    neither stream takes the other's bytes."""
    _SendsWhilePickled.inner.clear()
    outer = _message(serialize.dumps([_SendsWhilePickled(), "after"]))
    assert serialize.loads(outer) == [{"outer": "x" * 100}, "after"]
    assert [serialize.loads(m) for m in _SendsWhilePickled.inner] == [{"inner": list(range(50))}]
    # and the thread's pickler works on afterwards
    assert serialize.loads(_message(serialize.dumps({"next": 1}))) == {"next": 1}
