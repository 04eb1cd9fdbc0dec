"""One endpoint, two threads: a call's timeout holds whatever the other thread
does.  The second call waits its turn for the endpoint within its own
timeout, then raises TimeoutError; the first is not disturbed.  A close() that
comes while it waits ends it with ClosedError, and the close still finishes."""
import sys

import pytest

import rdmaq
from children import TIMEOUT
from observe import blocked_call, in_thread, wait_until

BACKSTOP_S = 30  # a timed call that has not returned by then waits for the other thread


def _times_out_in_a_thread(call):
    t, box = in_thread(call)
    wait_until(lambda: not t.is_alive(), "the timed call to return", limit=BACKSTOP_S)
    assert isinstance(box.get("error"), TimeoutError), box
    assert "another thread" in str(box["error"])


@pytest.mark.parametrize("method", ["get", "recv"])
def test_get_timeout_holds_while_another_thread_waits_in_get(transport, method):
    with rdmaq.Writer(1, transport=transport) as w, rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=TIMEOUT)
        r.wait_ready(timeout=TIMEOUT)
        waiting, box = blocked_call(r, lambda: getattr(r, method)(), f"{method}(None)")
        _times_out_in_a_thread(lambda: getattr(r, method)(timeout=0.2))
        assert waiting.is_alive()
        w.send("for the first") if method == "recv" else w.put(b"for the first")
        waiting.join(TIMEOUT)
        assert box["value"] in ("for the first", b"for the first")


def test_put_timeout_holds_while_another_thread_waits_in_put(transport):
    with rdmaq.Writer(1, transport=transport, slot_bytes=128, slots=2) as w, \
            rdmaq.Reader(w.handle, 0) as r:
        w.put(b"1", timeout=TIMEOUT)
        w.put(b"2", timeout=TIMEOUT)
        waiting, box = blocked_call(w, lambda: w.put(b"3"), "put(None) on a full ring")
        _times_out_in_a_thread(lambda: w.put(b"timed out", timeout=0.2))
        _times_out_in_a_thread(lambda: w.wait_ready(timeout=0.2))
        assert waiting.is_alive()
        assert [r.get(timeout=TIMEOUT) for _ in range(3)] == [b"1", b"2", b"3"]
        waiting.join(TIMEOUT)
        assert box == {"value": None}
        # the put that timed out sent nothing
        w.put(b"4", timeout=TIMEOUT)
        assert r.get(timeout=TIMEOUT) == b"4"


def _waiting_for_the_endpoint(thread):
    """Whether ``thread`` is inside the endpoint's entry (then waiting for its lock)."""
    frame = sys._current_frames().get(thread.ident)
    return frame is not None and frame.f_code.co_name == "_enter"


def test_a_call_waiting_its_turn_when_the_endpoint_closes_raises_closed_and_lets_it_go(transport):
    """Whoever takes the endpoint after a close must let it go, or a close() that
    comes for it later (to free the C object) waits for ever.  Ordered by hand:
    this thread holds the endpoint as a call does (``_call_lock``), closes it (its own
    hold is reentrant), then lets the waiting call have it."""
    with rdmaq.Writer(1, transport=transport) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=TIMEOUT)
        r.wait_ready(timeout=TIMEOUT)
        assert r._call_lock.acquire(timeout=TIMEOUT)
        waiter, waited = in_thread(lambda: r.get(timeout=TIMEOUT))
        wait_until(lambda: _waiting_for_the_endpoint(waiter), "the get to wait for the reader")
        r.close()
        r._call_lock.release()
        waiter.join(TIMEOUT)
        assert isinstance(waited.get("error"), rdmaq.ClosedError), waited
        assert r._call_lock.acquire(timeout=TIMEOUT), "the get that raised ClosedError kept the reader"
        r._call_lock.release()
