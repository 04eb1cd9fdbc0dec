"""Edges of rdmaq/queue.py that the broader suites do not reach: how the endpoint's
lock is let go after a held exception or a writer's reader query, and when a
reader's warm-up runs."""
import threading

import pytest

import rdmaq
from children import TIMEOUT
from inject import Injector

SHORT_S = 5  # never reached when things work


def _hold_an_exception(w, r):
    """A put that returns holding a signal handler's exception (its message was
    delivered first, and is read here): the next call raises it."""
    injector = Injector()
    for n in range(1, 500):
        outcome, _ = injector.call(n, lambda: w.put(b"delivered", timeout=SHORT_S))
        if outcome == "raised":
            continue
        assert r.get(timeout=SHORT_S) == b"delivered"
        if injector.fired:
            return
    pytest.fail("no point after which put returns holding the exception")


def test_a_held_exception_once_raised_leaves_the_writer_free_for_another_thread():
    """The call that raises a held exception must let go of the endpoint: a put from
    another thread goes on (not a TimeoutError about a lock this thread kept)."""
    with rdmaq.Writer(1, transport="shm") as w, rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=TIMEOUT)
        _hold_an_exception(w, r)
        with pytest.raises(KeyboardInterrupt):
            w.put(b"raised: not delivered", timeout=SHORT_S)
        failures = []

        def other_thread():
            try:
                w.put(b"from another thread", timeout=SHORT_S)
            except BaseException as e:  # noqa: BLE001 - reported by the test
                failures.append(e)

        t = threading.Thread(target=other_thread)
        t.start()
        t.join(TIMEOUT)
        assert not t.is_alive()
        assert failures == []
        assert r.get(timeout=SHORT_S) == b"from another thread"


@pytest.mark.parametrize("query", ["dead_readers", "drop_reader"])
def test_after_a_reader_query_a_lock_left_taken_is_let_go_by_the_next_call(query):
    """dead_readers()/drop_reader() end their call (not in a call any more): so when a
    signal handler's exception leaves the lock taken as it was taken (simulated here
    by taking it), this thread's next call lets it go instead of refusing as if
    called from within a call."""
    with rdmaq.Writer(2, transport="shm") as w, rdmaq.Reader(w.handle, 0) as r:
        gone = rdmaq.Reader(w.handle, 1)
        w.wait_ready(timeout=TIMEOUT)
        gone.close()  # closed: drop_reader accepts it
        if query == "dead_readers":
            assert w.dead_readers() == []
        else:
            w.drop_reader(1)
        assert w._call_lock.acquire(timeout=TIMEOUT)  # left taken, as by a handler's exception
        w.put(b"next", timeout=SHORT_S)
        assert r.get(timeout=SHORT_S) == b"next"
        # and the lock is free for another thread again
        t = threading.Thread(target=lambda: w.put(b"after", timeout=SHORT_S))
        t.start()
        t.join(TIMEOUT)
        assert r.get(timeout=SHORT_S) == b"after"


def test_a_wait_without_a_window_runs_no_warm_up():
    """README: warm runs before a cadence window; a get that napped to no window
    (anticipate=False: none is ever planned) must not call it."""
    calls = []
    with rdmaq.Writer(1, transport="shm") as w, \
            rdmaq.Reader(w.handle, 0, anticipate=False, warm=lambda: calls.append(1)) as r:
        w.wait_ready(timeout=TIMEOUT)
        for _ in range(3):
            with pytest.raises(TimeoutError):
                r.get(timeout=0)
        w.put(b"one", timeout=TIMEOUT)
        assert r.get(timeout=TIMEOUT) == b"one"
        assert calls == []


def _handler_runs_as_it_starts(monkeypatch, endpoint, method, handler):
    """``handler`` runs as ``endpoint``'s ``method`` starts inside a call, where a signal
    handler can run (as a Python function starts: tests/inject.py), once; what it
    raises comes out of the interrupted call, as a signal handler's exception does."""
    original = getattr(endpoint, method)

    def interrupted(*args, **kwargs):
        monkeypatch.setattr(endpoint, method, original)
        handler()
        return original(*args, **kwargs)

    monkeypatch.setattr(endpoint, method, interrupted)


@pytest.mark.parametrize("kind", ["reader", "writer"])
def test_a_call_from_a_handler_inside_a_call_on_the_same_endpoint_is_refused(monkeypatch, kind):
    """The endpoint is not reentrant: a handler's call on the endpoint whose call it
    interrupted raises RuntimeError (no deadlock, no second call inside the first);
    the interrupted call then raises it, having done nothing, and the endpoint works."""
    with rdmaq.Writer(1, transport="shm") as w, rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=TIMEOUT)
        w.put(b"first", timeout=TIMEOUT)
        if kind == "reader":
            _handler_runs_as_it_starts(monkeypatch, r, "_get_locked", lambda: r.get(timeout=0))
            outer = lambda: r.get(timeout=SHORT_S)  # noqa: E731
        else:
            _handler_runs_as_it_starts(monkeypatch, w, "_wait_ready_locked", lambda: w.put(b"inner", timeout=0))
            outer = lambda: w.put(b"outer", timeout=SHORT_S)  # noqa: E731
        with pytest.raises(RuntimeError, match=f"called while this thread's call on this {kind} is under way"):
            outer()
        w.put(b"second", timeout=SHORT_S)
        assert r.get(timeout=SHORT_S) == b"first"
        assert r.get(timeout=SHORT_S) == b"second"


def test_a_long_message_the_writer_gave_up_while_a_reader_read_it_is_dropped():
    """A message longer than the reader's scratch buffer (read into a buffer of its
    own) that the writer abandoned part way (its put timed out: another reader read
    nothing) is dropped by the readers that had started it: their get returns the
    next message, whole."""
    large = bytes(i % 251 for i in range(300 * 1024))  # > the 256 KiB scratch, > the ring
    with rdmaq.Writer(2, transport="shm", slot_bytes=4096, slots=16) as w, \
            rdmaq.Reader(w.handle, 0) as a, rdmaq.Reader(w.handle, 1) as b:
        w.wait_ready(timeout=TIMEOUT)
        with pytest.raises(TimeoutError):
            w.put(large, timeout=0.2)  # the ring fills with its start: nobody reads yet
        got = {}
        threads = [threading.Thread(target=lambda r=r: got.__setitem__(r.index, r.get(timeout=SHORT_S)))
                   for r in (a, b)]
        for t in threads:
            t.start()
        w.put(b"next", timeout=SHORT_S)  # its ABORT record first, once the readers make room
        for t in threads:
            t.join(TIMEOUT)
        assert got == {0: b"next", 1: b"next"}
        w.put(b"after", timeout=SHORT_S)
        assert a.get(timeout=SHORT_S) == b"after"
        assert b.get(timeout=SHORT_S) == b"after"
