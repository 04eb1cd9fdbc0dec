"""send/recv: pickle protocol 5 with out-of-band buffers."""
import threading

import numpy as np
import pytest

import rdmaq
from rdmaq import serialize


def _roundtrip(obj, transport="shm"):
    with rdmaq.Writer(1, transport=transport) as w:
        r = rdmaq.Reader(w.handle, 0)
        got = []
        t = threading.Thread(target=lambda: got.append(r.recv(timeout=30)))
        t.start()  # large objects stream through the ring: read while writing
        w.send(obj, timeout=30)
        t.join(30)
        r.close()
        return got[0]


def test_plain_objects(transport):
    obj = {"step": 7, "ids": list(range(100)), "name": "execute_model", "none": None}
    assert _roundtrip(obj, transport) == obj


@pytest.mark.parametrize("shape", [(3,), (1024, 1024), (0,)])
def test_numpy_arrays_survive_and_are_writable(shape):
    a = np.arange(np.prod(shape), dtype=np.int64).reshape(shape)
    got = _roundtrip(("arr", a))[1]
    assert np.array_equal(got, a) and got.flags.writeable
    if got.size:
        got.flat[0] = -1  # the reader owns its copy: the sender's is untouched
        assert got.flat[0] == -1 and a.flat[0] == 0


def test_read_only_array_stays_read_only(transport):
    a = np.ones(1 << 18, dtype=np.float32)  # 1 MiB: out of band
    a.flags.writeable = False
    got = _roundtrip(a, transport)
    assert np.array_equal(got, a) and not got.flags.writeable


def test_large_buffers_go_out_of_band_and_are_aligned():
    a = np.zeros(1 << 20, dtype=np.uint8)
    parts = serialize.dumps([a, b"small"])
    # the header declares one out-of-band buffer, and the array itself (not
    # a copy) is one of the parts handed to put()
    assert serialize._HDR.unpack_from(parts[0]) == (serialize.MAGIC, 1)
    aliases = [p for p in parts if np.shares_memory(np.frombuffer(p, np.uint8), a)]
    assert len(aliases) == 1 and memoryview(aliases[0]).nbytes == a.nbytes
    msg = bytearray(b"".join(bytes(p) for p in parts))
    assert len(msg) < a.nbytes + 4096  # not also pickled in-band
    got = serialize.loads(msg)
    assert got[1] == b"small" and np.array_equal(got[0], a)
    # the array aliases the message buffer, 64-byte aligned within it
    base = np.frombuffer(msg, dtype=np.uint8).ctypes.data
    assert (got[0].ctypes.data - base) % 64 == 0


def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    for t in (torch.arange(10, dtype=torch.int32), torch.randn(512, 1024).to(torch.bfloat16),
              torch.empty(0, 3)):
        got = _roundtrip({"t": t})["t"]
        assert got.dtype == t.dtype and got.shape == t.shape and torch.equal(got, t)
    got = _roundtrip(torch.ones(4))
    got += 1  # writable
    assert got.tolist() == [2.0] * 4
