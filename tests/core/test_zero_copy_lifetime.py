"""What a receive returns stays valid after the next receive: a reader lands small
messages in one scratch buffer, and out-of-band buffers (arrays, tensors) are
zero-copy views of the message they came in, so a view of the scratch buffer
must never escape to the caller."""
import numpy as np
import pytest

import rdmaq
from children import TIMEOUT
from rdmaq import serialize

SCRATCH = 256 * 1024  # rdmaq/queue.py: messages up to this size land in scratch


@pytest.fixture
def pair(transport):
    w = rdmaq.Writer(1, transport=transport)
    r = rdmaq.Reader(w.handle, 0)
    w.wait_ready(timeout=TIMEOUT)
    yield w, r
    r.close()
    w.close()


@pytest.mark.parametrize("nbytes", [serialize.OOB_MIN_BYTES, 100 * 1024, 2 * SCRATCH])
def test_arrays_received_earlier_keep_their_values(pair, nbytes):
    """Arrays that travel out of band, in messages smaller and larger than scratch."""
    w, r = pair
    n = nbytes // 8
    got = []
    for k in range(4):
        w.send({"k": k, "a": np.full(n, k + 1, dtype=np.int64)}, timeout=TIMEOUT)
        got.append(r.recv(timeout=TIMEOUT))
    for k, m in enumerate(got):
        assert m["k"] == k and m["a"].shape == (n,) and (m["a"] == k + 1).all(), k
        assert m["a"].flags.writeable
    got[0]["a"][:] = 9  # each array its own memory
    assert (got[1]["a"] == 2).all()


def test_tensors_received_earlier_keep_their_values(pair):
    torch = pytest.importorskip("torch")
    w, r = pair
    got = []
    for k in range(3):
        w.send(torch.full((32, 1024), float(k), dtype=torch.float32), timeout=TIMEOUT)  # 128 KiB
        got.append(r.recv(timeout=TIMEOUT))
    for k, t in enumerate(got):
        assert torch.equal(t, torch.full((32, 1024), float(k))), k


def test_messages_from_get_are_the_caller_s_own(pair):
    w, r = pair
    sizes = [10, 1000, SCRATCH, SCRATCH + 1, 5]
    got = []
    for k, size in enumerate(sizes):
        w.put(bytes([k]) * size, timeout=TIMEOUT)
        got.append(r.get(timeout=TIMEOUT))
    for k, (size, m) in enumerate(zip(sizes, got)):
        assert type(m) is bytearray and m == bytes([k]) * size, k
    got[0][:] = b"x" * 10  # writable, and nobody else's
    w.put(b"after", timeout=TIMEOUT)
    assert r.get(timeout=TIMEOUT) == b"after" and got[4] == bytes([4]) * 5


def test_objects_in_band_are_copies(pair):
    w, r = pair
    first = None
    for k in range(3):
        w.send({"k": k, "b": bytes([k]) * 100, "s": "x" * k}, timeout=TIMEOUT)
        m = r.recv(timeout=TIMEOUT)
        first = first or m
    assert first == {"k": 0, "b": bytes(100), "s": ""}
