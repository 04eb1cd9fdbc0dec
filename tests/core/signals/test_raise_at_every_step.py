"""A KeyboardInterrupt at every point of a put or a get where a signal handler can
run (tests/inject.py).  Whatever the point, a put that raised delivered nothing and
one that returned delivered its message once (a held exception comes out of the
next call); a get that raised took nothing and the next get returns the message,
whole.  The endpoints' calls have short timeouts: an endpoint left held by an
exception fails the test rather than hanging it.
"""
import pytest

import rdmaq
from inject import Injector, next_call

SMALL = bytes(range(200))
LARGE = bytes(i % 253 for i in range(300 * 1024))  # longer than the reader's scratch buffer
SHORT_S = 10  # never reached when things work
MAX_STEPS = 500  # far more points than a call has: the loop ends when a call meets none


@pytest.mark.parametrize("message", [SMALL, LARGE], ids=["small", "large"])
def test_put_raising_at_every_step_delivers_nothing_and_returning_delivers_once(message):
    injector = Injector()
    with rdmaq.Writer(1, transport="shm", slot_bytes=4096, slots=128) as w, \
            rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=SHORT_S)
        r.wait_ready(timeout=SHORT_S)
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
    with rdmaq.Writer(1, transport="shm", slot_bytes=4096, slots=128) as w, \
            rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=SHORT_S)
        r.wait_ready(timeout=SHORT_S)
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
