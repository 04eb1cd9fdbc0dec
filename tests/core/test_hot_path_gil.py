"""A get that finds its message, and a put that finds room and wakes no one,
keep the GIL (docs/architecture.md, "How it works"): another thread of the process runs only
where a call lets go of it, as a blocking one must.  Seen without timing: with
the switch interval set for ever, a second thread that wants the GIL gets it
only when this one releases it, so its count of turns says how often that
happened."""
import sys
import threading
import time

import pytest

import rdmaq
from children import TIMEOUT
from rdmaq._rdmaq import lib

N = 10_000
PAYLOAD = lib.rdmaq_slot_payload(1024)  # of each slot of the small rings below


class GilTurns:
    """A thread that counts the turns it gets at the GIL."""

    def __init__(self):
        self.turns = 0
        self._stop = False
        self._started = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        self._started.set()
        while not self._stop:
            self.turns += 1
            time.sleep(0.0001)  # lets go of the GIL, then wants it back

    def __enter__(self):
        self._old = sys.getswitchinterval()
        sys.setswitchinterval(1e6)  # the GIL changes hands only when its holder lets it go
        self._t.start()
        self._started.wait()
        return self

    def __exit__(self, *exc):
        self._stop = True
        sys.setswitchinterval(self._old)
        self._t.join(TIMEOUT)


@pytest.fixture
def pair(transport):
    with rdmaq.Writer(1, transport=transport) as w:
        with rdmaq.Reader(w.handle, 0) as r:
            w.wait_ready(timeout=TIMEOUT)
            r.wait_ready(timeout=TIMEOUT)
            yield w, r


def test_queued_gets_and_puts_that_wake_no_one_keep_the_gil(pair):
    w, r = pair
    w.put(b"warm", timeout=TIMEOUT)  # the reader's first get makes its buffer
    assert r.get(timeout=TIMEOUT) == b"warm"
    before = (w.stats["immediate"], r.stats["immediate"])
    with GilTurns() as other:
        time.sleep(0.01)  # the other thread now waits for the GIL
        turns = other.turns
        for i in range(N):
            w.put(i.to_bytes(4, "little"), timeout=TIMEOUT)
            assert r.get(timeout=TIMEOUT) == i.to_bytes(4, "little")
        assert other.turns == turns, f"the GIL was let go {other.turns - turns} times in {N} gets and puts"
    assert (w.stats["immediate"], r.stats["immediate"]) == (before[0] + N, before[1] + N)


def test_a_get_that_waits_lets_the_gil_go(pair):
    w, r = pair
    with GilTurns() as other:
        time.sleep(0.01)
        turns = other.turns
        with pytest.raises(TimeoutError):
            r.get(timeout=0.05)
        assert other.turns > turns


def test_a_long_put_that_fits_the_ring_lets_the_gil_go(transport):
    """Room for it or not, a put of more than HOLD_GIL_BYTES copies with the GIL let go:
    the process's other threads run during the copy."""
    from rdmaq.queue import HOLD_GIL_BYTES

    size = 32 << 20  # a copy long enough (ms) for the waiting thread to wake and take the GIL
    assert size > HOLD_GIL_BYTES
    with rdmaq.Writer(1, transport=transport, slot_bytes=1 << 20, slots=64) as w, \
            rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=TIMEOUT)
        r.wait_ready(timeout=TIMEOUT)
        msg = bytes(range(256)) * (size // 256)
        with GilTurns() as other:
            time.sleep(0.01)
            turns = other.turns
            w.put(msg, timeout=TIMEOUT)  # the ring has room for it: nothing to wait for
            assert other.turns > turns, "the GIL was kept through the copy"
        assert r.get(timeout=TIMEOUT) == msg


def test_a_message_longer_than_a_slot_takes_the_waiting_path(transport):
    """Only a message of one record is taken without waiting; a longer one
    arrives whole all the same, by recv."""
    with rdmaq.Writer(1, transport=transport, slot_bytes=4096) as w, rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=TIMEOUT)
        msg = bytes(range(256)) * 64
        w.put(msg, timeout=TIMEOUT)
        assert r.get(timeout=TIMEOUT) == msg
        assert r.stats["immediate"] == 0 and w.stats["immediate"] == 1


def _small_ring_pair(transport, slots, **kw):
    w = rdmaq.Writer(1, transport=transport, slot_bytes=1024, slots=slots, **kw)
    r = rdmaq.Reader(w.handle, 0)
    w.wait_ready(timeout=TIMEOUT)
    r.wait_ready(timeout=TIMEOUT)
    return w, r


def test_a_put_that_fills_exactly_the_room_left_takes_the_hot_path(transport):
    """The room a put needs is counted to the record: a message of as many records
    as the ring has free slots, an empty message into the last free slot."""
    w, r = _small_ring_pair(transport, slots=4)
    try:
        w.put(bytes(4 * PAYLOAD), timeout=TIMEOUT)  # every slot of the empty ring
        assert w.stats["immediate"] == 1
        assert r.get(timeout=TIMEOUT) == bytes(4 * PAYLOAD)
        for i in range(3):
            w.put(bytes([i]), timeout=TIMEOUT)
        w.put(b"", timeout=TIMEOUT)  # the fourth slot, the last one free
        assert w.stats["immediate"] == 5
        assert [r.get(timeout=TIMEOUT) for _ in range(4)] == [b"\0", b"\1", b"\2", b""]
    finally:
        r.close()
        w.close()


def test_a_put_one_record_longer_than_the_room_left_waits_for_it(transport):
    """Two free slots and a message of three records: it waits (and lets the GIL go),
    and with no reader reading it times out having delivered nothing."""
    w, r = _small_ring_pair(transport, slots=4)
    try:
        w.put(b"a", timeout=TIMEOUT)
        w.put(b"b", timeout=TIMEOUT)
        with pytest.raises(TimeoutError):
            w.put(bytes(2 * PAYLOAD + 1), timeout=0.05)
        assert w.stats["immediate"] == 2
        assert [r.get(timeout=TIMEOUT) for _ in range(2)] == [b"a", b"b"]
        with pytest.raises(TimeoutError):
            r.get(timeout=0.05)
    finally:
        r.close()
        w.close()


def test_a_put_of_exactly_the_largest_message_allowed_takes_the_hot_path(transport):
    w, r = _small_ring_pair(transport, slots=4, max_message_bytes=2 * PAYLOAD)
    try:
        w.put(bytes(2 * PAYLOAD), timeout=TIMEOUT)
        assert w.stats["immediate"] == 1
        assert r.get(timeout=TIMEOUT) == bytes(2 * PAYLOAD)
    finally:
        r.close()
        w.close()
