"""A KeyboardInterrupt at every point of a put or a get where a signal handler can run.

A Python signal handler runs where the interpreter checks for pending calls: as
a C function returns, and as a Python function starts.  A profile function
(sys.setprofile) sees exactly those points inside rdmaq's code; raising from it
at the n-th, for every n, is the handler's exception landing there.  Whatever
the point, a put that raised delivered nothing and one that returned delivered
its message once (a held exception comes out of the next call); a get that
raised took nothing and the next get returns the message, whole.
"""
import os
import sys

import pytest

import rdmaq

RDMAQ_DIR = os.path.dirname(os.path.abspath(rdmaq.__file__)) + os.sep
SMALL = bytes(range(200))
LARGE = bytes(i % 253 for i in range(300 * 1024))  # longer than the reader's scratch buffer
SHORT_S = 10  # never reached when things work
MAX_STEPS = 500  # far more points than a call has: the loop ends when a call sees none


class Injector:
    """Raise KeyboardInterrupt at the n-th point (a C function's return, a Python
    function's start) in rdmaq's code after ``arm(n)``; ``fired`` says whether it did."""

    def __init__(self):
        self.n = 0
        self.fired = False

    def arm(self, n):
        self.n, self.fired = n, False
        sys.setprofile(self._profile)

    def disarm(self):
        sys.setprofile(None)

    def _profile(self, frame, event, arg):
        if event not in ("call", "c_return") or not frame.f_code.co_filename.startswith(RDMAQ_DIR):
            return
        self.n -= 1
        if self.n == 0:
            self.fired = True
            sys.setprofile(None)
            raise KeyboardInterrupt


def _call(injector, n, fn):
    """fn() with the n-th point raising: ("raised", None) or ("returned", value)."""
    injector.arm(n)
    try:
        return "returned", fn()
    except KeyboardInterrupt:
        return "raised", None
    finally:
        injector.disarm()


def _next_call(fn):
    """fn() as the caller goes on: a KeyboardInterrupt held from the last call comes first.
    (The calls' timeouts are short: an endpoint left held would fail the test, not hang it.)"""
    try:
        return fn()
    except KeyboardInterrupt:
        return fn()


@pytest.mark.parametrize("message", [SMALL, LARGE], ids=["small", "large"])
def test_put_raising_at_every_step_delivers_nothing_and_returning_delivers_once(message):
    injector = Injector()
    with rdmaq.Writer(1, transport="shm", slot_bytes=4096, slots=128) as w, \
            rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=SHORT_S)
        r.wait_ready(timeout=SHORT_S)
        for n in range(1, MAX_STEPS):
            outcome, _ = _call(injector, n, lambda: w.put(message, timeout=SHORT_S))
            if outcome == "raised":
                _next_call(lambda: w.put(message, timeout=SHORT_S))  # put it again, as documented
            _next_call(lambda: w.put(b"marker", timeout=SHORT_S))
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
            outcome, got = _call(injector, n, lambda: take(timeout=SHORT_S))
            if outcome == "raised":
                got = _next_call(lambda: take(timeout=SHORT_S))
            assert got == message, (n, outcome)
            assert _next_call(lambda: take(timeout=SHORT_S)) == b"marker", (n, outcome)
            if not injector.fired:
                break
        else:
            pytest.fail(f"{method} still met a point to raise at after {MAX_STEPS}")
