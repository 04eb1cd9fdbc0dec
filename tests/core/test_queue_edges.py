"""Edges of rdmaq/queue.py that the broader suites do not reach: how the endpoint's
lock is let go after a held exception or a writer's reader query, and when a
reader's warm-up runs."""
import dataclasses
import sys
import threading

import pytest

import rdmaq
from children import TIMEOUT
from inject import Injector
from rdmaq import queue

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


class _NapPlansAWindow:
    """A reader's C library whose nap says it planned a cadence window, as it does for a
    steady writer on an idle machine (which a test cannot count on)."""

    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, name):
        return getattr(self._lib, name)

    def rdmaq_reader_nap(self, ptr, timeout_ns):
        rc = self._lib.rdmaq_reader_nap(ptr, timeout_ns)
        return rc if rc < 0 else 1


@pytest.mark.parametrize("warm", ["own", "default", "off", "off by variable"])
def test_a_get_that_napped_to_a_window_warms_up_as_asked(monkeypatch, warm):
    """README: a reader warms up before a cadence window: its own callable (warm=f),
    rdmaq's warm-up (warm=True, the default), or not at all (warm=False, RDMAQ_WARM=0)."""
    calls = []
    rdmaq_warm_up = queue._warm_up
    monkeypatch.setattr(queue, "_warm_up", lambda: (calls.append("rdmaq"), rdmaq_warm_up()))
    monkeypatch.delenv("RDMAQ_WARM", raising=False)
    kw = {"own": {"warm": lambda: calls.append("own")}, "off": {"warm": False}}.get(warm, {})
    if warm == "off by variable":
        monkeypatch.setenv("RDMAQ_WARM", "0")
    with rdmaq.Writer(1, transport="shm") as w, rdmaq.Reader(w.handle, 0, **kw) as r:
        w.wait_ready(timeout=TIMEOUT)
        monkeypatch.setattr(r, "_lib", _NapPlansAWindow(r._lib))
        with pytest.raises(TimeoutError):
            r.get(timeout=0)  # nothing there: it naps, then warms up, then times out
        w.put(b"one", timeout=TIMEOUT)
        assert r.get(timeout=TIMEOUT) == b"one"  # there already: no nap
        assert calls == {"own": ["own"], "default": ["rdmaq"]}.get(warm, [])


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
            _handler_runs_as_it_starts(monkeypatch, w, "_try_put2", lambda: w.put(b"inner", timeout=0))
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
        immediate = a.stats["immediate"], b.stats["immediate"]
        assert a.get(timeout=SHORT_S) == b"after"
        assert b.get(timeout=SHORT_S) == b"after"
        # nothing of the dropped message left behind: a message there is taken at once
        assert (a.stats["immediate"], b.stats["immediate"]) == (immediate[0] + 1, immediate[1] + 1)


def test_drop_reader_takes_only_an_index_below_n_readers():
    """Index n_readers names no reader: refused as bad input (ValueError naming the
    range) before the C writer sees it; n_readers - 1 is the last one."""
    with rdmaq.Writer(2, transport="shm") as w, rdmaq.Reader(w.handle, 0):
        gone = rdmaq.Reader(w.handle, 1)
        w.wait_ready(timeout=TIMEOUT)
        gone.close()
        with pytest.raises(ValueError, match=r"index must be in 0\.\.1, got 2"):
            w.drop_reader(2)
        w.drop_reader(1)


def test_after_a_held_exception_is_raised_a_lock_left_taken_is_let_go_by_the_next_call():
    """The call that raises a held exception ends its call (not in a call any more):
    a lock then left taken by a handler's exception (simulated by taking it) is let
    go by this thread's next call, not refused as a call from within a call."""
    with rdmaq.Writer(1, transport="shm") as w, rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=TIMEOUT)
        _hold_an_exception(w, r)
        with pytest.raises(KeyboardInterrupt):
            w.put(b"raised: not delivered", timeout=SHORT_S)
        assert w._call_lock.acquire(timeout=TIMEOUT)  # left taken, as by a handler's exception
        w.put(b"next", timeout=SHORT_S)
        assert r.get(timeout=SHORT_S) == b"next"


def test_a_put_that_raised_at_any_point_leaves_the_writer_free_for_another_thread():
    """Wherever a signal handler's exception lands in a put (tests/inject.py), the
    writer is let go: another thread's put then goes on (after the exception the put
    held, if it held one), never timing out on a lock the first thread kept."""
    injector = Injector()
    with rdmaq.Writer(1, transport="shm", slot_bytes=4096, slots=128) as w, \
            rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=TIMEOUT)
        for n in range(1, 500):
            outcome, _ = injector.call(n, lambda: w.put(b"m", timeout=SHORT_S))
            failures = []
            t = threading.Thread(target=_probe, args=(w, failures))
            t.start()
            t.join(TIMEOUT)
            assert failures == [], (n, outcome)
            got = [bytes(r.get(timeout=SHORT_S))]
            if got[0] == b"m":
                got.append(bytes(r.get(timeout=SHORT_S)))
            assert got[-1] == b"probe", (n, outcome, got)
            if not injector.fired:
                break
        else:
            pytest.fail("put still met a point to raise at after 500")


def _probe(w, failures):
    """A put from another thread; a KeyboardInterrupt held from the last put comes
    first (that put returned: its message was delivered), then it is put again."""
    try:
        try:
            w.put(b"probe", timeout=SHORT_S)
        except KeyboardInterrupt:
            w.put(b"probe", timeout=SHORT_S)
    except BaseException as e:  # noqa: BLE001 - reported by the test
        failures.append(e)


def test_a_get_timing_out_inside_a_long_message_raises_and_the_next_get_returns_it_whole():
    """A long message (read into a buffer of its own) whose writer stalls part way
    (another reader reads nothing yet): the get times out (TimeoutError, not the part
    it has), and once the writer goes on the next get returns the message whole."""
    large = bytes(i % 251 for i in range(300 * 1024))  # > the 256 KiB scratch, > the ring
    with rdmaq.Writer(2, transport="shm", slot_bytes=4096, slots=16) as w, \
            rdmaq.Reader(w.handle, 0) as a, rdmaq.Reader(w.handle, 1) as b:
        w.wait_ready(timeout=TIMEOUT)
        putting = threading.Event()

        def put():
            putting.set()
            w.put(large, timeout=TIMEOUT)

        writer = threading.Thread(target=put)
        writer.start()
        assert putting.wait(TIMEOUT)
        with pytest.raises(TimeoutError):
            a.get(timeout=1.0)  # reads what the ring holds of it, then waits for b's credit
        got_b = []
        reader_b = threading.Thread(target=lambda: got_b.append(b.get(timeout=TIMEOUT)))
        reader_b.start()
        assert a.get(timeout=TIMEOUT) == large
        reader_b.join(TIMEOUT)
        writer.join(TIMEOUT)
        assert got_b == [large]


class _InterruptsOnce:
    """Its unpickling raises KeyboardInterrupt the first time (a Ctrl-C while the
    message's objects load), and succeeds after."""
    interrupted = False

    def __reduce__(self):
        return (_rebuild, ())


def _rebuild():
    if not _InterruptsOnce.interrupted:
        _InterruptsOnce.interrupted = True
        raise KeyboardInterrupt
    return "loaded"


def test_a_recv_interrupted_while_loading_lets_go_of_the_reader_and_keeps_the_message():
    """A KeyboardInterrupt while the message's objects load must release the reader's
    lock: a recv from another thread returns the kept message, not a TimeoutError
    about the lock the interrupted call kept."""
    _InterruptsOnce.interrupted = False
    with rdmaq.Writer(1, transport="shm") as w, rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=TIMEOUT)
        w.send(_InterruptsOnce(), timeout=SHORT_S)
        with pytest.raises(KeyboardInterrupt):
            r.recv(timeout=SHORT_S)
        got = []
        other = threading.Thread(target=lambda: got.append(r.recv(timeout=SHORT_S)))
        other.start()
        other.join(TIMEOUT)
        assert got == ["loaded"]


def test_a_handle_whose_version_is_not_an_int_is_a_type_error():
    """A version of the wrong type (a str "1") is a TypeError naming it, not the
    ValueError of a version from another release."""
    with rdmaq.Writer(1, transport="shm") as w:
        h = w.handle
        bad = dataclasses.replace(h, version=str(h.version))
        with pytest.raises(TypeError, match="handle version must be an int, got str"):
            rdmaq.Reader(bad, 0)


def _raise_at(event, where, exc):
    """A profile function raising ``exc`` once, as a signal handler's exception lands, at
    the first ``event`` for which ``where(frame, arg)`` holds."""
    def profile(frame, ev, arg):
        if ev == event and where(frame, arg):
            sys.setprofile(None)
            raise exc
    return profile


def test_an_exception_landing_before_the_kept_message_loads_keeps_it_for_recv():
    """A signal handler's exception (not the message's own unpickling failing) raised as the
    receive starts fetching the kept message must not consume it: the next recv gets it."""
    _InterruptsOnce.interrupted = False
    with rdmaq.Writer(1, transport="shm") as w, rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=TIMEOUT)
        w.send(_InterruptsOnce(), timeout=SHORT_S)
        with pytest.raises(KeyboardInterrupt):
            r.recv(timeout=SHORT_S)  # the message is kept
        sys.setprofile(_raise_at("call", lambda f, a: f.f_code.co_name == "_get_locked",
                                 RuntimeError("from a signal handler")))
        try:
            with pytest.raises(RuntimeError, match="from a signal handler"):
                r.recv(timeout=SHORT_S)
        finally:
            sys.setprofile(None)
        assert r.recv(timeout=SHORT_S) == "loaded"


def test_an_exception_landing_as_a_recv_lets_go_of_the_reader_is_raised_by_the_next_call():
    """The message was handed over; a signal handler's exception arriving as the lock is
    released is held, and the next call raises it before doing anything."""
    with rdmaq.Writer(1, transport="shm") as w, rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=TIMEOUT)
        w.put(b"first", timeout=SHORT_S)
        w.put(b"second", timeout=SHORT_S)
        sys.setprofile(_raise_at("c_return", lambda f, a: f.f_code.co_name == "_recv"
                                 and getattr(a, "__name__", "") == "release", KeyboardInterrupt))
        try:
            assert r.get(timeout=SHORT_S) == b"first"
        finally:
            sys.setprofile(None)
        with pytest.raises(KeyboardInterrupt):
            r.get(timeout=SHORT_S)
        assert r.get(timeout=SHORT_S) == b"second"
