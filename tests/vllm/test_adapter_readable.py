"""The adapter's readable() and spin_until_readable() promises beyond the happy path (vLLM
0.34's EngineCore polls its response queues with them): readable() never waits, on the ring
and over ZMQ, with or without a message; a message it took stays first, however many
readable() and spin_until_readable() calls follow, and the messages come out in the order
sent; spin_until_readable() looks at nothing when the caller already has input, returns at
the first message without waiting to its deadline, and at its deadline without one.
Needs vLLM importable (the vllm tier's venv-mq)."""

from __future__ import annotations

import time
import types

import pytest

pytest.importorskip("torch")
pytest.importorskip("vllm")

from adapter_pair import Clock as _Clock  # noqa: E402
from adapter_pair import pair as _pair  # noqa: E402

from rdmaq.vllm import queue as rq  # noqa: E402
from rdmaq.vllm.queue import RdmaqMessageQueue as MQ  # noqa: E402

LOCAL = [1, 0]  # one local reader (the ring), none (ZMQ)
IDS = ["ring", "zmq"]


@pytest.fixture(autouse=True)
def _loopback(monkeypatch):
    monkeypatch.setenv("VLLM_HOST_IP", "127.0.0.1")
    for var in ("RDMAQ_VLLM_REMOTE", "RDMAQ_VLLM_STATS_DIR", "RDMAQ_VLLM_RING_BYTES"):
        monkeypatch.delenv(var, raising=False)


def _record_waits(r):
    """The timeouts r's ring reader or ZMQ reader is asked to wait (None: for ever)."""
    waits: list = []
    if r._reader is not None:
        get = r._reader.get
        r._reader.get = lambda timeout=None: waits.append(timeout) or get(timeout)
    else:
        recv = r._remote.recv
        r._remote.recv = lambda timeout=None: waits.append(timeout) or recv(timeout=timeout)
    return waits


def _until_readable(r, limit=30.0):
    """readable() called until it says True (a ZMQ message takes a moment to arrive)."""
    end = time.monotonic() + limit
    while not r.readable():
        assert time.monotonic() < end, "the message never became readable"
        time.sleep(0.001)


@pytest.mark.parametrize("n_local", LOCAL, ids=IDS)
def test_readable_never_waits_with_or_without_a_message(n_local):
    w, r = _pair(n_local)
    try:
        waits = _record_waits(r)
        assert r.readable() is False
        assert waits and all(t == 0 for t in waits), waits
        w.enqueue("a")
        _until_readable(r)
        assert all(t == 0 for t in waits), waits
        n = len(waits)
        assert r.readable() is True  # kept: no second look at the ring
        assert len(waits) == n
        assert r.dequeue(timeout=10) == "a"
        assert r.readable() is False
    finally:
        r.shutdown()
        w.shutdown()


@pytest.mark.parametrize("n_local", LOCAL, ids=IDS)
def test_a_message_readable_took_stays_first_and_order_is_kept(n_local):
    """readable() takes the first message; more arrive; readable() and
    spin_until_readable() again take nothing past it; dequeue() returns all in order."""
    w, r = _pair(n_local)
    try:
        w.enqueue(0)
        _until_readable(r)
        for i in range(1, 5):
            w.enqueue(i)
        time.sleep(0.05)  # the later ones arrive (ZMQ)
        for _ in range(3):
            assert r.readable() is True
            r.spin_until_readable([], time.monotonic() + 1.0)
        got = [r.dequeue(timeout=10) for _ in range(5)]
        assert got == [0, 1, 2, 3, 4]
        assert r.readable() is False
    finally:
        r.shutdown()
        w.shutdown()


@pytest.mark.parametrize("n_local", LOCAL, ids=IDS)
def test_spin_until_readable_takes_the_messages_one_at_a_time_in_order(n_local):
    w, r = _pair(n_local)
    try:
        for i in range(5):
            w.enqueue(i)
        got = []
        for _ in range(5):
            r.spin_until_readable([], time.monotonic() + 30.0)
            assert r.readable() is True
            got.append(r.dequeue(timeout=0))
        assert got == [0, 1, 2, 3, 4]
    finally:
        r.shutdown()
        w.shutdown()


def test_spin_until_readable_with_input_pending_looks_at_nothing(monkeypatch):
    """The caller's input queue is not empty: it returns at once, without a look at the
    ring (a look could take a message, or wait)."""
    asked = []
    me = types.SimpleNamespace(_rdmaq=True, _take=lambda timeout: asked.append(timeout) or True)
    MQ.spin_until_readable(me, ["request"], 3600.0)
    assert asked == []


def test_spin_until_readable_returns_at_the_first_message_not_at_its_deadline(monkeypatch):
    """A message on the third wait: it returns then, an hour before its deadline."""
    clock = _Clock()
    monkeypatch.setattr(rq, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    asked = []

    def take(timeout):
        asked.append(timeout)
        clock.now += timeout
        return len(asked) == 3

    me = types.SimpleNamespace(_rdmaq=True, _take=take)
    MQ.spin_until_readable(me, [], 3600.0)
    assert asked == [rq.READABLE_WAIT_S] * 3


def test_spin_until_readable_at_its_deadline_waits_no_longer(monkeypatch):
    """Exactly at its deadline (left == 0): one look without waiting, then it returns;
    never a wait that ends past the deadline."""
    clock = _Clock()
    clock.now = 5.0
    monkeypatch.setattr(rq, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    asked = []

    def take(timeout):
        asked.append(timeout)
        assert len(asked) < 10, "spin_until_readable did not stop at its deadline"
        clock.now += timeout
        return False

    me = types.SimpleNamespace(_rdmaq=True, _take=take)
    MQ.spin_until_readable(me, [], 5.0)
    assert asked == [0.0]
    asked.clear()
    MQ.spin_until_readable(me, [], clock.now + 0.0015)
    assert asked == pytest.approx([rq.READABLE_WAIT_S, 0.0005, 0.0])
    assert clock.now == pytest.approx(5.0015)
