"""A KeyboardInterrupt at every point of a put or a get where a signal handler can
run (tests/inject.py).  Whatever the point, a put that raised delivered nothing and
one that returned delivered its message once (a held exception comes out of the
next call); a get that raised took nothing and the next get returns the message,
whole.  The endpoints' calls have short timeouts: an endpoint left held by an
exception fails the test rather than hanging it.
"""
import contextlib

import pytest

import rdmaq
from inject import Injector, next_call

SMALL = bytes(range(200))
LARGE = bytes(i % 253 for i in range(300 * 1024))  # longer than the reader's scratch buffer
SHORT_S = 10  # never reached when things work
MAX_STEPS = 500  # far more points than a call has: the loop ends when a call meets none


@contextlib.contextmanager
def ready_pair(slots=128):
    """A shm writer of 4 KiB slots and its one reader, both ready."""
    with rdmaq.Writer(1, transport="shm", slot_bytes=4096, slots=slots) as w, \
            rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=SHORT_S)
        r.wait_ready(timeout=SHORT_S)
        yield w, r


@pytest.mark.parametrize("message", [SMALL, LARGE], ids=["small", "large"])
def test_put_raising_at_every_step_delivers_nothing_and_returning_delivers_once(message):
    injector = Injector()
    with ready_pair() as (w, r):
        for n in range(1, MAX_STEPS):
            outcome, _ = injector.call(n, lambda: w.put(message, timeout=SHORT_S))
            if outcome == "raised":
                next_call(lambda: w.put(message, timeout=SHORT_S))  # put it again, as documented
            next_call(lambda: w.put(b"marker", timeout=SHORT_S))
            # exactly one copy of the message, then the marker
            assert r.get(timeout=SHORT_S) == message, (n, outcome)
            assert r.get(timeout=SHORT_S) == b"marker", (n, outcome)
            if not injector.fired:
                break
        else:
            pytest.fail(f"put still met a point to raise at after {MAX_STEPS}")


@pytest.mark.parametrize("message", [SMALL, LARGE], ids=["small", "large"])
@pytest.mark.parametrize("method", ["get", "recv"])
def test_get_raising_at_every_step_takes_nothing(message, method):
    injector = Injector()
    with ready_pair() as (w, r):
        put = w.send if method == "recv" else w.put
        take = getattr(r, method)
        for n in range(1, MAX_STEPS):
            put(message, timeout=SHORT_S)
            put(b"marker", timeout=SHORT_S)
            outcome, got = injector.call(n, lambda: take(timeout=SHORT_S))
            if outcome == "raised":
                got = next_call(lambda: take(timeout=SHORT_S))
            assert got == message, (n, outcome)
            assert next_call(lambda: take(timeout=SHORT_S)) == b"marker", (n, outcome)
            if not injector.fired:
                break
        else:
            pytest.fail(f"{method} still met a point to raise at after {MAX_STEPS}")


class _HandlerError(Exception):
    """What a signal handler may raise besides KeyboardInterrupt (an Exception)."""


def _next_get(r):
    """r.get() as a caller goes on: a _HandlerError held from the last call comes first."""
    try:
        return r.get(timeout=SHORT_S)
    except _HandlerError:
        return r.get(timeout=SHORT_S)


@pytest.mark.parametrize("message", [SMALL, LARGE], ids=["small", "large"])
def test_get_raising_an_exception_at_every_step_takes_nothing(message):
    """get() has no loading of its own to fail: a handler's Exception (not only a
    KeyboardInterrupt) anywhere in it leaves the message for the next get."""
    injector = Injector(_HandlerError)
    with ready_pair() as (w, r):
        for n in range(1, MAX_STEPS):
            w.put(message, timeout=SHORT_S)
            w.put(b"marker", timeout=SHORT_S)
            outcome, got = injector.call(n, lambda: r.get(timeout=SHORT_S))
            if outcome == "raised":
                got = _next_get(r)
            assert got == message, (n, outcome)
            assert _next_get(r) == b"marker", (n, outcome)
            if not injector.fired:
                break
        else:
            pytest.fail(f"get still met a point to raise at after {MAX_STEPS}")


def test_after_a_raising_get_of_a_long_message_the_next_one_there_is_taken_at_once():
    """Wherever a handler's exception lands in a get of a long message (read into a
    buffer of its own), once a get has returned it, a message already there is taken
    by the hot path again (one C call, the GIL kept: stats["immediate"])."""
    injector = Injector()
    with ready_pair() as (w, r):
        for n in range(1, MAX_STEPS):
            w.put(LARGE, timeout=SHORT_S)
            outcome, got = injector.call(n, lambda: r.get(timeout=SHORT_S))
            if outcome == "raised":
                got = next_call(lambda: r.get(timeout=SHORT_S))
            assert got == LARGE, (n, outcome)
            w.put(b"marker", timeout=SHORT_S)
            immediate = r.stats["immediate"]
            assert next_call(lambda: r.get(timeout=SHORT_S)) == b"marker", (n, outcome)
            assert r.stats["immediate"] == immediate + 1, (n, outcome)
            if not injector.fired:
                break
        else:
            pytest.fail(f"get still met a point to raise at after {MAX_STEPS}")


def test_a_get_raising_after_it_dropped_a_long_message_the_writer_gave_up_takes_nothing():
    """A long message the writer gave up part way (its put timed out), which a get had
    started to read, is dropped by the next get; wherever a handler's exception lands
    in that get, the get after it returns the message that followed, whole."""
    injector = Injector()
    with ready_pair(slots=16) as (w, r):
        for n in range(1, MAX_STEPS):
            with pytest.raises(TimeoutError):
                w.put(LARGE, timeout=0.05)  # the ring fills with its start: nobody reads yet
            with pytest.raises(TimeoutError):
                next_call(lambda: r.get(timeout=0.05))  # reads that start, then waits for the rest
            w.put(b"next", timeout=SHORT_S)  # its ABORT record first, in the room the get made
            outcome, got = injector.call(n, lambda: r.get(timeout=SHORT_S))
            if outcome == "raised":
                got = next_call(lambda: r.get(timeout=SHORT_S))
            assert got == b"next", (n, outcome)
            if not injector.fired:
                break
        else:
            pytest.fail(f"get still met a point to raise at after {MAX_STEPS}")


def _held_put(injector, w, r):
    """Find a point after which put returns and holds the exception: put's
    message delivered before it (then read)."""
    for n in range(1, MAX_STEPS):
        outcome, _ = injector.call(n, lambda: w.put(b"delivered", timeout=SHORT_S))
        if outcome == "returned" and injector.fired:
            assert r.get(timeout=SHORT_S) == b"delivered"
            return
        if outcome == "raised":
            continue
        r.get(timeout=SHORT_S)
    pytest.fail("no point after which put returns holding the exception")


@pytest.mark.parametrize("then", ["put", "close"])
def test_an_exception_after_the_work_comes_out_of_the_next_call(then):
    injector = Injector()
    w = rdmaq.Writer(1, transport="shm")
    with rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=SHORT_S)
        _held_put(injector, w, r)
        if then == "close":
            with pytest.raises(KeyboardInterrupt):
                w.close()
            with pytest.raises(rdmaq.ClosedError):
                w.put(b"closed", timeout=SHORT_S)
            return
        with pytest.raises(KeyboardInterrupt):
            w.put(b"raised: not delivered", timeout=SHORT_S)
        w.put(b"next", timeout=SHORT_S)
        assert r.get(timeout=SHORT_S) == b"next"
        w.close()  # nothing held any more
