"""Every way a call on an endpoint ends, returning or raising, ends it: a lock that a
signal handler's exception then leaves taken as it was taken (simulated here by
taking it) is let go by this thread's next call, not refused as a call from within
a call (RuntimeError), and another thread's call goes on after it.  The same holds
for an endpoint no call has used yet, and for close()."""
import threading

import pytest

import rdmaq
from children import TIMEOUT
from observe import in_thread

SHORT_S = 5  # never reached when things work


def _interrupt_as_it_starts(monkeypatch, endpoint, method):
    """A signal handler's KeyboardInterrupt lands as ``endpoint``'s ``method`` starts
    (where one can run: tests/inject.py), once."""
    original = getattr(endpoint, method)

    def interrupted(*args, **kwargs):
        monkeypatch.setattr(endpoint, method, original)
        raise KeyboardInterrupt

    monkeypatch.setattr(endpoint, method, interrupted)


def _a_lock_left_taken_is_let_go(endpoint):
    assert endpoint._call_lock.acquire(timeout=TIMEOUT)  # left taken, as by a handler's exception
    endpoint.wait_ready(timeout=SHORT_S)  # this thread's next call
    t, box = in_thread(lambda: endpoint.wait_ready(timeout=SHORT_S))
    t.join(TIMEOUT)
    assert not t.is_alive() and "error" not in box, box


def _fill(w):
    """Puts until the ring is full (the reader reads nothing): the last one times out."""
    for _ in range(64):
        try:
            w.put(b"f" * 100, timeout=0)
        except TimeoutError:
            return
    pytest.fail("the ring never filled")


def _writer_ends(how, w, r, monkeypatch):
    if how == "put returned":
        w.put(b"m", timeout=SHORT_S)
    elif how == "put timed out":
        _fill(w)
    elif how == "put interrupted":
        _interrupt_as_it_starts(monkeypatch, w, "_wait_ready_locked")
        with pytest.raises(KeyboardInterrupt):
            w.put(b"not delivered", timeout=SHORT_S)
    elif how == "wait_ready returned":
        w.wait_ready(timeout=SHORT_S)


def _reader_ends(how, w, r, monkeypatch):
    if how == "get returned":
        w.put(b"m", timeout=SHORT_S)
        assert r.get(timeout=SHORT_S) == b"m"
    elif how == "get timed out":
        with pytest.raises(TimeoutError):
            r.get(timeout=0)
    elif how == "get interrupted":
        _interrupt_as_it_starts(monkeypatch, r, "_get_locked")
        with pytest.raises(KeyboardInterrupt):
            r.get(timeout=SHORT_S)
    elif how == "recv of a message send did not make":
        w.put(b"not a pickle", timeout=SHORT_S)
        with pytest.raises(ValueError):
            r.recv(timeout=SHORT_S)
    elif how == "wait_ready returned":
        r.wait_ready(timeout=SHORT_S)


@pytest.mark.parametrize("how", ["no call yet", "put returned", "put timed out", "put interrupted",
                                 "wait_ready returned"])
def test_after_a_writer_s_call_ends_a_lock_left_taken_is_let_go(monkeypatch, how):
    with rdmaq.Writer(1, transport="shm", slot_bytes=128, slots=4) as w, rdmaq.Reader(w.handle, 0) as r:
        _writer_ends(how, w, r, monkeypatch)
        _a_lock_left_taken_is_let_go(w)
        while r.stats["messages"] < w.stats["messages"]:  # what was put before: read
            r.get(timeout=SHORT_S)
        w.put(b"after", timeout=SHORT_S)
        assert r.get(timeout=SHORT_S) == b"after"


@pytest.mark.parametrize("how", ["no call yet", "get returned", "get timed out", "get interrupted",
                                 "recv of a message send did not make", "wait_ready returned"])
def test_after_a_reader_s_call_ends_a_lock_left_taken_is_let_go(monkeypatch, how):
    with rdmaq.Writer(1, transport="shm") as w, rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=TIMEOUT)  # a reader's wait_ready waits for it
        _reader_ends(how, w, r, monkeypatch)
        _a_lock_left_taken_is_let_go(r)
        if how == "recv of a message send did not make":  # a recv that raises took nothing
            assert r.get(timeout=SHORT_S) == b"not a pickle"
        w.put(b"after", timeout=SHORT_S)
        assert r.get(timeout=SHORT_S) == b"after"


@pytest.mark.parametrize("kind", ["writer", "reader"])
def test_close_with_a_lock_left_taken_before_any_call_closes(kind):
    """close() on this thread, the lock left taken as a handler's exception leaves it
    before any call: it closes (the endpoint is in no call), and the lock is let go."""
    w = rdmaq.Writer(1, transport="shm")
    r = rdmaq.Reader(w.handle, 0)
    endpoint = w if kind == "writer" else r
    assert endpoint._call_lock.acquire(timeout=TIMEOUT)
    endpoint.close()
    endpoint._call_lock.release()  # the test's own acquire
    with pytest.raises(rdmaq.ClosedError):
        endpoint.wait_ready(timeout=SHORT_S)
    t = threading.Thread(target=lambda: endpoint.close())
    t.start()
    t.join(TIMEOUT)
    assert not t.is_alive()
    r.close()
    w.close()
