"""The GIL-held fast path (rdmaq/_hold_gil.py: try_put and try_recv without letting go of
the GIL) at its edges: a message of exactly the reader's scratch buffer and one byte
either side, a put of exactly HOLD_GIL_BYTES and one byte more, and a get or a put left
mid-message followed by a short message.  ``stats["immediate"]`` counts the calls the
fast path served; the messages themselves must arrive whole and in order either way."""
import pytest

import rdmaq
from children import TIMEOUT
from rdmaq.queue import HOLD_GIL_BYTES, SCRATCH_BYTES

SHORT = 0.05  # a timeout that must run out


def _pair(transport, **kw):
    w = rdmaq.Writer(1, transport=transport, **kw)
    r = rdmaq.Reader(w.handle, 0)
    w.wait_ready(timeout=TIMEOUT)
    r.wait_ready(timeout=TIMEOUT)
    return w, r


def _payload(n, seed=0):
    return bytes((i * 7 + seed) % 251 for i in range(n))


@pytest.mark.parametrize(("size", "fast"), [(SCRATCH_BYTES - 1, True), (SCRATCH_BYTES, True),
                                            (SCRATCH_BYTES + 1, False)])
def test_a_get_of_up_to_exactly_the_scratch_size_takes_the_fast_path(transport, size, fast):
    """One record (the slot holds it), already there: a get takes it without waiting
    up to exactly SCRATCH_BYTES; one byte more is read into a buffer of its own."""
    w, r = _pair(transport, slot_bytes=1 << 20, slots=4)
    try:
        msg = _payload(size)
        w.put(msg, timeout=TIMEOUT)
        assert r.get(timeout=TIMEOUT) == msg
        assert r.stats["immediate"] == int(fast)
        w.put(b"next", timeout=TIMEOUT)  # and the one after it, from the scratch buffer
        assert r.get(timeout=TIMEOUT) == b"next"
        assert r.stats["immediate"] == int(fast) + 1
    finally:
        r.close()
        w.close()


@pytest.mark.parametrize("kind", [bytes, bytearray])  # straight to C, or through an iovec
@pytest.mark.parametrize(("size", "fast"), [(HOLD_GIL_BYTES - 1, True), (HOLD_GIL_BYTES, True),
                                            (HOLD_GIL_BYTES + 1, False)])
def test_a_put_of_up_to_exactly_hold_gil_bytes_takes_the_fast_path(transport, size, fast, kind):
    w, r = _pair(transport, slot_bytes=1 << 20, slots=4)
    try:
        msg = _payload(size, 3)
        w.put(kind(msg), timeout=TIMEOUT)
        assert w.stats["immediate"] == int(fast)
        assert r.get(timeout=TIMEOUT) == msg
    finally:
        r.close()
        w.close()


# (slot_bytes, slots, message length): a message that fits the scratch buffer, and one
# that does not (read into a buffer of its own); each longer than the ring, so it streams.
MID_MESSAGE = {"scratch": (4096, 8, 12 * 4096), "own buffer": (64 * 1024, 4, 2 * SCRATCH_BYTES)}


@pytest.mark.parametrize("case", MID_MESSAGE, ids=list(MID_MESSAGE))
def test_a_get_left_mid_message_then_a_short_message(transport, case):
    """The writer gives up on a message longer than the ring (its put times out); the
    reader's get times out having read part of it; the writer's next message is short.
    The next get returns that short message: not an error, not the part it had."""
    slot_bytes, slots, size = MID_MESSAGE[case]
    w, r = _pair(transport, slot_bytes=slot_bytes, slots=slots)
    try:
        with pytest.raises(TimeoutError):
            w.put(_payload(size), timeout=SHORT)
        with pytest.raises(TimeoutError):
            r.get(timeout=SHORT)  # reads what was sent, then waits for the rest
        w.put(b"short", timeout=TIMEOUT)
        assert r.get(timeout=TIMEOUT) == b"short"
        w.put(b"after", timeout=TIMEOUT)
        assert r.get(timeout=TIMEOUT) == b"after"
    finally:
        r.close()
        w.close()

