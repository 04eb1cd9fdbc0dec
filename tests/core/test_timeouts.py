"""Timeouts that are over before the call starts or while it waits, on an empty and
on a full queue: the call returns (TimeoutError) and loses nothing; what was there
to take is taken, even with a timeout of 0.  How far a timeout overshoots is seen
through the counters, never the clock: a wait that has to block sleeps at most one
liveness slice (100 ms) at a time, so a 0.25 s timeout blocks a few times."""
import signal
import time

import pytest

import rdmaq
from children import TIMEOUT
from observe import in_thread, wait_blocked

SLOTS = 8


@pytest.fixture
def pair(transport):
    w = rdmaq.Writer(1, transport=transport, slot_bytes=1024, slots=SLOTS)
    r = rdmaq.Reader(w.handle, 0)
    w.wait_ready(timeout=TIMEOUT)
    r.wait_ready(timeout=TIMEOUT)
    yield w, r
    r.close()
    w.close()


def _fill(w):
    for i in range(SLOTS):
        w.put(b"%d" % i, timeout=0)  # room for each: a timeout of 0 is enough


def test_get_with_timeout_0_on_an_empty_queue_times_out(pair):
    w, r = pair
    with pytest.raises(TimeoutError, match="reader get: timed out"):
        r.get(timeout=0)
    w.put(b"after", timeout=TIMEOUT)
    assert r.get(timeout=TIMEOUT) == b"after"


def test_get_with_timeout_0_takes_a_waiting_message(pair):
    w, r = pair
    w.put(b"here", timeout=TIMEOUT)
    assert r.get(timeout=0) == b"here"
    w.send({"step": 1}, timeout=0)
    assert r.recv(timeout=0) == {"step": 1}


def test_put_with_timeout_0_on_a_full_ring_times_out_and_sends_nothing(pair):
    w, r = pair
    _fill(w)
    with pytest.raises(TimeoutError, match="writer put: timed out"):
        w.put(b"too many", timeout=0)
    assert [bytes(r.get(timeout=TIMEOUT)) for _ in range(SLOTS)] == [b"%d" % i for i in range(SLOTS)]
    with pytest.raises(TimeoutError):
        r.get(timeout=0)  # the refused message never went out
    w.put(b"room again", timeout=0)
    assert r.get(timeout=TIMEOUT) == b"room again"


def test_a_streamed_message_with_timeout_0_is_refused_whole(pair):
    w, r = pair
    _fill(w)
    with pytest.raises(TimeoutError):
        w.put(bytes(10 * 1024), timeout=0)  # longer than the ring: it streams
    assert [bytes(r.get(timeout=TIMEOUT)) for _ in range(SLOTS)] == [b"%d" % i for i in range(SLOTS)]
    w.put(b"next", timeout=TIMEOUT)
    assert r.get(timeout=TIMEOUT) == b"next"  # no half of the refused message before it


def test_wait_ready_with_timeout_0(transport):
    with rdmaq.Writer(2, transport=transport) as w:
        r0 = rdmaq.Reader(w.handle, 0)
        with pytest.raises(TimeoutError, match=r"1 of 2 readers attached \(missing: \[1\]\)"):
            w.wait_ready(timeout=0)
        r1 = rdmaq.Reader(w.handle, 1)
        w.wait_ready(timeout=TIMEOUT)
        w.wait_ready(timeout=0)  # ready: returns at once
        r0.wait_ready(timeout=TIMEOUT)
        r0.close()
        r1.close()


def test_a_reader_s_wait_ready_with_timeout_0_before_the_writer_is_ready(transport):
    with rdmaq.Writer(1, transport=transport) as w:
        r = rdmaq.Reader(w.handle, 0)
        if transport == "shm":
            with pytest.raises(TimeoutError):
                r.wait_ready(timeout=0)
        w.wait_ready(timeout=TIMEOUT)
        r.wait_ready(timeout=TIMEOUT)
        r.close()


def test_a_timed_out_get_blocked_in_slices_no_longer_than_the_liveness_check(pair):
    w, r = pair
    before = r.stats["sleeps"]
    with pytest.raises(TimeoutError):
        r.get(timeout=0.25)
    slept = r.stats["sleeps"] - before
    # 100 ms slices (on the main thread the call also returns to run signal
    # handlers every 100 ms): a 250 ms wait blocks 3 times, more if woken early
    assert 2 <= slept <= 50, slept


def test_a_timed_out_put_blocked_in_slices_too(pair):
    w, r = pair
    _fill(w)
    before = w.stats["sleeps"]
    with pytest.raises(TimeoutError):
        w.put(b"x", timeout=0.25)
    assert 2 <= w.stats["sleeps"] - before <= 50


def _with_slow_handler(call, handler_s=0.3, after_s=0.05):
    """Run ``call`` on the main thread while a SIGALRM handler that takes
    ``handler_s`` fires ``after_s`` into it: by the time the call continues its
    deadline has passed."""
    ran = []

    def handler(signum, frame):
        ran.append(True)
        time.sleep(handler_s)

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, after_s)
    try:
        return call(), ran
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_a_deadline_that_passes_in_a_signal_handler_ends_a_blocked_get(pair):
    w, r = pair

    def get():
        with pytest.raises(TimeoutError):
            r.get(timeout=0.2)

    _, ran = _with_slow_handler(get)
    assert ran
    w.put(b"still here", timeout=TIMEOUT)
    assert r.get(timeout=TIMEOUT) == b"still here"


def test_a_deadline_that_passes_in_a_signal_handler_ends_a_blocked_put(pair):
    w, r = pair
    _fill(w)

    def put():
        with pytest.raises(TimeoutError):
            w.put(b"late", timeout=0.2)

    _, ran = _with_slow_handler(put)
    assert ran
    assert [bytes(r.get(timeout=TIMEOUT)) for _ in range(SLOTS)] == [b"%d" % i for i in range(SLOTS)]
    with pytest.raises(TimeoutError):
        r.get(timeout=0)


def test_timeout_none_and_inf_wait_until_the_message_comes(pair):
    w, r = pair
    t, box = in_thread(lambda: bytes(r.get(timeout=None)))
    wait_blocked(r, 0, t, "get(timeout=None)")
    w.put(b"eventually", timeout=TIMEOUT)
    t.join(TIMEOUT)
    assert box == {"value": b"eventually"}


def test_a_timeout_past_146_years_waits_for_ever(pair):
    """Seconds beyond what the core's nanoseconds hold (2**62 ns) mean no timeout."""
    w, r = pair
    w.put(b"there", timeout=1e10)
    assert r.get(timeout=1e10) == b"there"
    w.put(b"again", timeout=2.0**62 / 1e9)
    assert r.get(timeout=2.0**62 / 1e9) == b"again"


def test_a_timeout_within_the_clock_s_range_is_a_deadline():
    """README: only a timeout beyond the clock's range (2**62 ns, ~146 years) waits for
    ever; one within it, a century say, reaches the core as that many nanoseconds."""
    from rdmaq.queue import _timeout_ns
    range_s = 2**62 // 10**9
    century_s = 100 * 365 * 86400
    assert _timeout_ns(century_s) == century_s * 10**9
    assert 0 < _timeout_ns(range_s - 1) < 2**62
    assert _timeout_ns(range_s) == -1
    assert _timeout_ns(range_s + 1) == -1
