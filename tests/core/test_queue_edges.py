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
