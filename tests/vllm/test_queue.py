"""Contract tests of rdmaq.vllm.MessageQueue (vLLM 0.26, 0.32, 0.33 and 0.34 shm_broadcast).

Complements vLLM's own tests (tests/vllm/upstream) where those assert vLLM
internals: shutdown from another thread, messages larger than max_chunk_bytes,
back-pressure, remote readers, handle dispatch, process-group factories.
Needs vLLM importable (tests/vllm/ci.sh runs this in both of its venvs).
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import pickle
import signal
import stat
import threading
import time

import numpy as np
import pytest

# A missing torch or vLLM skips this file with the reason; in CI
# (RDMAQ_REQUIRE_ALL=1, tests/conftest.py) that skip is a failure.
torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

import vllm.envs  # noqa: E402
from vllm.distributed.device_communicators import shm_broadcast as sb  # noqa: E402

import rdmaq  # noqa: E402
from observe import in_thread, wait_blocked, wait_until  # noqa: E402
from rdmaq.vllm import queue as rq  # noqa: E402
from rdmaq.vllm._geometry import ring_geometry  # noqa: E402
from rdmaq.vllm.queue import RdmaqHandle, RdmaqMessageQueue  # noqa: E402

MQ = RdmaqMessageQueue
FORK = multiprocessing.get_context("fork")


@pytest.fixture(autouse=True)
def _loopback(monkeypatch):
    monkeypatch.setenv("VLLM_HOST_IP", "127.0.0.1")
    monkeypatch.delenv("RDMAQ_VLLM_REMOTE", raising=False)
    monkeypatch.delenv("RDMAQ_VLLM_STATS_DIR", raising=False)


@pytest.fixture
def _vllm_queue_sockets():
    """vLLM's own MessageQueue binds ZMQ ipc sockets in VLLM_RPC_BASE_PATH (by default the
    temporary folder) and leaves them when it is only shut down (its queues have no close):
    removed after the test, those sockets that appeared there while it ran."""
    tmp = vllm.envs.VLLM_RPC_BASE_PATH
    before = set(os.listdir(tmp))
    yield
    for name in set(os.listdir(tmp)) - before:
        path = os.path.join(tmp, name)
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)


def _ready(writer, *readers):
    """wait_until_ready is collective: run the writer's in a thread."""
    t = threading.Thread(target=writer.wait_until_ready)
    t.start()
    for r in readers:
        r.wait_until_ready()
    t.join(timeout=30)
    assert not t.is_alive()


def _pair(**kw):
    kw.setdefault("max_chunk_bytes", 1 << 20)
    kw.setdefault("max_chunks", 4)
    w = MQ(1, 1, connect_ip="127.0.0.1", **kw)
    r = MQ.create_from_handle(w.export_handle(), 0)
    _ready(w, r)
    return w, r


def _collect(out, procs, timeout=120.0):
    """One result per child process; fail fast if a child died without one."""
    import queue as _queue

    results, deadline = [], time.monotonic() + timeout
    while len(results) < len(procs):
        try:
            results.append(out.get(timeout=0.5))
            continue
        except _queue.Empty:
            pass
        dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
        if dead:
            pytest.fail(f"child process failed with exit code(s) {dead}")
        if time.monotonic() > deadline:
            pytest.fail(f"children gave {len(results)}/{len(procs)} results in {timeout}s")
    return dict(results)


def _close(*mqs):
    for mq in mqs:
        mq.shutdown()


# ----------------------------------------------------------------- basics
def test_roundtrip_types_and_fifo():
    w, r = _pair()
    try:
        objs = ["s", 1, None, {"k": [1, 2]}, b"x" * 1000, np.arange(7), torch.ones(3)]
        t = threading.Thread(target=lambda: [w.enqueue(o) for o in objs])
        t.start()
        got = [r.dequeue(timeout=10) for _ in objs]
        t.join()
        for a, b in zip(objs, got):
            if isinstance(a, (np.ndarray, torch.Tensor)):
                assert type(a) is type(b) and (a == b).all()
            else:
                assert a == b
    finally:
        _close(r, w)


def test_roles_are_enforced():
    w, r = _pair()
    try:
        with pytest.raises(RuntimeError, match="Only readers can dequeue"):
            w.dequeue(timeout=0)
        with pytest.raises(RuntimeError, match="Only writers can enqueue"):
            r.enqueue("x")
        with pytest.raises(NotImplementedError):
            w.acquire_write()
        with pytest.raises(NotImplementedError):
            r.acquire_read()
        assert w._is_writer and not w._is_local_reader
        assert r._is_local_reader and not r._is_remote_reader and r.local_reader_rank == 0
    finally:
        _close(r, w)


def test_broadcast_object():
    w, r = _pair()
    try:
        assert w.broadcast_object({"a": 1}) == {"a": 1}
        assert r.broadcast_object() == {"a": 1}
    finally:
        _close(r, w)


def test_bad_arguments_name_the_problem():
    with pytest.raises(ValueError, match="local_reader_ranks has 1 entries"):
        MQ(2, 2, local_reader_ranks=[0])
    with pytest.raises(ValueError, match="n_local_reader <= n_reader"):
        MQ(1, 2)
    with pytest.raises(ValueError, match="remote_reader_ranks has 1 entries"):
        MQ(3, 1, remote_reader_ranks=[4])
    w = MQ(2, 2)
    try:
        with pytest.raises(ValueError, match="neither a local reader|not a local reader"):
            MQ.create_from_handle(w.export_handle(), 5)
    finally:
        w.shutdown()


# --------------------------------------------------------- timeouts, shutdown
def test_dequeue_timeout():
    w, r = _pair()
    try:
        before = r._reader.stats["sleeps"]
        with pytest.raises(TimeoutError):
            r.dequeue(timeout=0.05)
        assert r._reader.stats["sleeps"] > before  # it waited, it did not give up at once
        w.enqueue("after")
        assert r.dequeue(timeout=10) == "after"
    finally:
        _close(r, w)


def test_a_negative_dequeue_timeout_is_no_wait_as_in_vllm():
    """vLLM's dequeue treats a negative timeout as 0: TimeoutError, not rdmaq's ValueError."""
    w, r = _pair()
    try:
        with pytest.raises(TimeoutError):
            r.dequeue(timeout=-1)
        w.enqueue("after")
        assert r.dequeue(timeout=-1 if r.readable() else 10) == "after"
    finally:
        _close(r, w)


def test_a_remote_reader_over_ipv6_gets_the_messages():
    """The handle says the writer's remote address is IPv6, and a remote reader connects to it
    as one (vLLM's remote_addr_ipv6)."""
    w = MQ(1, 0, connect_ip="::1", max_chunk_bytes=1 << 20, max_chunks=4)
    r = None
    try:
        handle = w.export_handle()
        assert handle.remote_addr_ipv6 is True and "[::1]" in handle.remote_subscribe_addr
        r = MQ.create_from_handle(handle, 0)
        _ready(w, r)
        w.enqueue("over IPv6")
        assert r.dequeue(timeout=10) == "over IPv6"
    finally:
        _close(*([r] if r is not None else []), w)


def test_timeouts_beyond_the_clock_wait_for_ever():
    w, r = _pair()
    try:
        w.enqueue("late", timeout=10**400)
        assert r.dequeue(timeout=10**400) == "late"
    finally:
        _close(r, w)


def test_enqueue_timeout_when_reader_lags():
    # 8 slots of 4 KiB: the ring fills, the writer feels back-pressure.
    w, r = _pair(max_chunk_bytes=4096, max_chunks=2)
    try:
        accepted = 0
        with pytest.raises(TimeoutError):
            for i in range(100):
                w.enqueue(i.to_bytes(2, "little") * 1500, timeout=0.05)
                accepted += 1
        assert 1 <= accepted < 100
        # the reader gets every message that was accepted, in order, and no more
        for i in range(accepted):
            assert r.dequeue(timeout=5) == i.to_bytes(2, "little") * 1500
        with pytest.raises(TimeoutError):
            r.dequeue(timeout=0.05)
        w.enqueue("next", timeout=5)
        assert r.dequeue(timeout=5) == "next"
    finally:
        _close(r, w)


# vLLM 0.34's EngineCore polls its response queues: readable(), then spin_until_readable()
@pytest.mark.parametrize("where", ["local", "remote"])
def test_readable_tells_without_taking_the_message_from_dequeue(where):
    w = MQ(2, 1, connect_ip="127.0.0.1")
    local = MQ.create_from_handle(w.export_handle(), 0)
    remote = MQ.create_from_handle(w.export_handle(), -1)
    r = local if where == "local" else remote
    try:
        _ready(w, local, remote)
        assert not r.readable()
        r.spin_until_readable([], time.monotonic())  # deadline passed: returns
        assert not r.readable()
        th, _ = in_thread(lambda: r.spin_until_readable([], time.monotonic() + 3600))
        w.enqueue({"step": 1})
        w.enqueue({"step": 2})
        th.join(timeout=60)  # returns once the message is readable, long before its deadline
        assert not th.is_alive()
        assert r.readable()
        assert r.readable()  # asking again takes nothing more
        assert r.dequeue(timeout=10) == {"step": 1}
        assert r.dequeue(timeout=10) == {"step": 2}
        assert not r.readable()
        with pytest.raises(RuntimeError, match="Only readers"):
            w.readable()
        r.shutdown()
        with pytest.raises(RuntimeError, match="cancelled"):
            r.readable()
    finally:
        _close(local, remote, w)


def test_spin_until_readable_returns_at_once_when_input_is_pending():
    w, r = _pair()
    try:
        endpoint = r._reader
        before = endpoint.stats["sleeps"]
        r.spin_until_readable(["a request"], time.monotonic() + 3600)
        assert endpoint.stats["sleeps"] == before and not r.readable()
    finally:
        _close(r, w)


def _assert_shutdown_cancels(queue, blocking_call):
    """blocking_call, in a thread, blocks until queue.shutdown() ends it with
    vLLM's RuntimeError("cancelled").  Blocked means asleep in the kernel: the
    ring endpoint's stats["sleeps"] grew while the call was running."""
    endpoint = queue._reader or queue._writer
    before = endpoint.stats["sleeps"]
    t, box = in_thread(blocking_call)
    wait_blocked(endpoint, before, t, "the blocking call")
    queue.shutdown()
    t.join(timeout=10)
    assert not t.is_alive()
    assert isinstance(box.get("error"), RuntimeError), box
    assert str(box["error"]) == "cancelled"


@pytest.mark.parametrize("mode", ["busy", "idle"])
def test_shutdown_from_another_thread_cancels_dequeue(mode):
    w, r = _pair()
    try:
        if mode == "busy":  # a reader that just read (vLLM: spinning)
            w.enqueue("warm")
            assert r.dequeue(timeout=5) == "warm"
        else:  # a reader that has waited a while (vLLM: parked)
            with pytest.raises(TimeoutError):
                r.dequeue(timeout=0.3)
        with pytest.raises(TimeoutError):
            r.dequeue(timeout=0.01)
        _assert_shutdown_cancels(r, r.dequeue)  # no timeout: only shutdown() can end it
        assert r.shutting_down
        with pytest.raises(RuntimeError, match="cancelled"):
            r.dequeue(timeout=1)
        r.shutdown()  # twice is fine
    finally:
        _close(w)


def test_shutdown_cancels_blocked_enqueue():
    w, r = _pair(max_chunk_bytes=4096, max_chunks=2)

    def fill():
        while True:
            w.enqueue(b"y" * 3000)

    _assert_shutdown_cancels(w, fill)
    r.shutdown()


def test_long_wait_logs_unless_indefinite(monkeypatch, caplog):
    monkeypatch.setattr(sb, "VLLM_RINGBUFFER_WARNING_INTERVAL", 0.001)
    monkeypatch.setattr(logging.getLogger("vllm"), "propagate", True)
    w, r = _pair()
    try:
        with caplog.at_level(logging.INFO):
            with pytest.raises(TimeoutError):
                r.dequeue(timeout=0.02, indefinite=False)
            assert "No available shared memory broadcast block" in caplog.text
            caplog.clear()
            with pytest.raises(TimeoutError):
                r.dequeue(timeout=0.02, indefinite=True)
            assert "No available shared memory broadcast block" not in caplog.text
    finally:
        _close(r, w)


def test_long_wait_is_logged_once_an_interval_has_passed_and_not_before(monkeypatch, caplog):
    """vLLM's reading: the first line after one interval, none before it."""
    monkeypatch.setattr(logging.getLogger("vllm"), "propagate", True)
    w, r = _pair()
    try:
        with caplog.at_level(logging.INFO):
            monkeypatch.setattr(sb, "VLLM_RINGBUFFER_WARNING_INTERVAL", 60)
            with pytest.raises(TimeoutError):
                r.dequeue(timeout=0.02)
            assert "No available shared memory broadcast block" not in caplog.text
            monkeypatch.setattr(sb, "VLLM_RINGBUFFER_WARNING_INTERVAL", 0.2)
            with pytest.raises(TimeoutError):
                r.dequeue(timeout=0.3)
            assert "No available shared memory broadcast block" in caplog.text
    finally:
        _close(r, w)


# ------------------------------------------------- signal handlers that raise
def _same(a, b):
    if isinstance(a, np.ndarray):
        return type(b) is np.ndarray and np.array_equal(a, b)
    return a == b


@pytest.mark.parametrize("obj", [{"k": [1, 2], "s": "x" * 100}, np.arange(100_000)],
                         ids=["small", "out-of-band"])
def test_enqueue_and_dequeue_raising_at_every_step(obj):
    """A KeyboardInterrupt at every point of enqueue and dequeue where a signal handler
    can run (tests/inject.py): an enqueue that raised delivered nothing (it is enqueued
    again), one that returned delivered once; a dequeue that raised took nothing."""
    from inject import Injector, next_call

    w, r = _pair()
    injector = Injector()
    try:
        for n in range(1, 1000):
            outcome, _ = injector.call(n, lambda: w.enqueue(obj, timeout=10))
            if outcome == "raised":
                next_call(lambda: w.enqueue(obj, timeout=10))
            next_call(lambda: w.enqueue("marker", timeout=10))
            writer_fired = injector.fired
            outcome, got = injector.call(n, lambda: r.dequeue(timeout=10))
            if outcome == "raised":
                got = next_call(lambda: r.dequeue(timeout=10))
            assert _same(obj, got), (n, outcome)
            assert next_call(lambda: r.dequeue(timeout=10)) == "marker", n
            if not writer_fired and not injector.fired:
                break
        else:
            pytest.fail("enqueue/dequeue still met a point to raise at after 1000")
    finally:
        _close(r, w)


# ------------------------------------------------------- payload ownership
@pytest.mark.parametrize("kind", ["tensor", "numpy", "numpy_readonly"])
@pytest.mark.parametrize("nbytes", [1000, (1 << 20) - 2, 1 << 20, 5 << 20])
def test_values_survive_ring_reuse_and_keep_writeability(kind, nbytes):
    """Like vLLM's test_broadcast_retains_values_after_ring_reuse, including
    messages well above max_chunk_bytes (vLLM's overflow case)."""
    if kind == "tensor" and not hasattr(sb, "_reduce_tensor"):
        pytest.skip("this vLLM (0.26) has no _reduce_tensor: CPU tensors take torch's own "
                    "pickling, which rejects uint16 storages (vLLM's own queue fails alike)")
    w, r = _pair(max_chunk_bytes=2 << 20, max_chunks=1)
    try:
        array = np.full(nbytes // 2, 17, dtype=np.uint16)
        array.flags.writeable = kind != "numpy_readonly"
        payload = torch.from_numpy(array) if kind == "tensor" else array
        t = threading.Thread(target=w.enqueue, args=(payload,))
        t.start()
        received = r.dequeue(timeout=30)
        t.join()
        assert type(received) is type(payload) and received.dtype == payload.dtype
        if isinstance(received, np.ndarray):
            assert received.flags.writeable == array.flags.writeable
        np.testing.assert_array_equal(received, array)
        for value in range(4):  # reuse every slot of the ring several times
            t = threading.Thread(
                target=w.enqueue, args=(np.full(512 * 1024, value, dtype=np.uint16),)
            )
            t.start()
            np.testing.assert_array_equal(r.dequeue(timeout=30), value)
            t.join()
            np.testing.assert_array_equal(received, array)
        if array.flags.writeable:
            received[0] = 42
            assert array[0] == 17
    finally:
        _close(r, w)


def test_big_tensors_like_vllm_tensor_broadcast():
    """vLLM's test_tensor_broadcast payload: 2 MiB tensor out of band, 16 MiB
    bf16 tensor above max_chunk_bytes (8 MiB), nested small tensor."""
    w, r = _pair(max_chunk_bytes=8 << 20, max_chunks=4)
    try:
        torch.manual_seed(42)
        payload = {
            "mid": torch.randn(1024, 512),
            "nested": ["plain", 123, {"inner": torch.arange(5)}],
        }
        big = torch.randn(4096, 2048, dtype=torch.bfloat16)
        t = threading.Thread(target=lambda: (w.enqueue(payload), w.enqueue(big)))
        t.start()
        received = r.dequeue(timeout=30)
        received_big = r.dequeue(timeout=30)
        t.join()
        assert torch.equal(received["mid"], payload["mid"])
        assert torch.equal(received_big, big) and received_big.dtype == big.dtype
        assert torch.equal(received["nested"][2]["inner"], torch.arange(5))
        received["mid"] += 1.0  # writable, like regular tensors
        received_big[0, 0] = 1.0
        assert not torch.equal(received["mid"], payload["mid"])
    finally:
        _close(r, w)


def test_several_oob_buffers_in_one_message():
    w, r = _pair()
    try:
        arrays = [np.full((1 << 20) // 8 + i, i, dtype=np.int64) for i in range(3)]
        t = threading.Thread(target=w.enqueue, args=(arrays,))
        t.start()
        got = r.dequeue(timeout=30)
        t.join()
        for a, b in zip(arrays, got):
            np.testing.assert_array_equal(a, b)
            assert b.flags.writeable
        got[0][0] = -1  # each buffer is its own: no aliasing between them
        assert got[1][0] == 1
    finally:
        _close(r, w)


# ------------------------------------------------------- multi-process
def _reader_proc(handle, rank, n, out):
    mq = MQ.create_from_handle(handle, rank)
    mq.wait_until_ready()
    got = [mq.dequeue(timeout=60) for _ in range(n)]
    out.put((rank, [g if isinstance(g, int) else int(g.sum()) for g in got]))
    mq.shutdown()


def test_every_reader_gets_every_message_in_order_across_processes():
    n = 300
    w = MQ(3, 3, max_chunk_bytes=64 << 10, max_chunks=4)
    out = FORK.Queue()
    procs = [
        FORK.Process(target=_reader_proc, args=(w.export_handle(), rank, n, out))
        for rank in range(3)
    ]
    for p in procs:
        p.start()
    try:
        w.wait_until_ready()
        expected = []
        for i in range(n):
            msg = i if i % 3 else np.full(i * 50 + 1, 1, dtype=np.int8)  # up to 15 KB
            w.enqueue(msg)
            expected.append(i if i % 3 else i * 50 + 1)
        results = _collect(out, procs)
        for rank in range(3):
            assert results[rank] == expected
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
        w.shutdown()
    assert all(p.exitcode == 0 for p in procs)


def test_dead_writer_is_an_error_not_a_hang():
    """A response queue's writer (a worker) dies: the reader's dequeue ends
    with an error instead of blocking forever."""
    parent_side = {}

    def writer_proc(conn):
        w = MQ(1, 1)
        conn.send(w.export_handle())
        w.wait_until_ready()
        time.sleep(60)

    a, b = FORK.Pipe()
    p = FORK.Process(target=writer_proc, args=(b,))
    p.start()
    try:
        handle = a.recv()
        r = MQ.create_from_handle(handle, 0)
        r.wait_until_ready()
        parent_side["r"] = r
        os.kill(p.pid, signal.SIGKILL)
        p.join(timeout=10)
        # a SIGKILLed writer is dead, not closed; no timeout: only the
        # writer's liveness can end this dequeue (else the test's limit)
        with pytest.raises(rdmaq.PeerDeadError, match="writer"):
            r.dequeue()
    finally:
        if p.is_alive():
            p.kill()
        p.join()
        if "r" in parent_side:
            parent_side["r"].shutdown()


def _sleeping_reader(handle, rank):
    mq = MQ.create_from_handle(handle, rank)
    mq.wait_until_ready()
    time.sleep(60)


def test_dead_reader_is_an_error_for_the_writer():
    """A worker dies: EngineCore's broadcast enqueue fails naming the reader
    (vLLM's writer would wait for its slot forever)."""
    w = MQ(2, 2, max_chunk_bytes=4096, max_chunks=2)
    procs = [
        FORK.Process(target=_sleeping_reader, args=(w.export_handle(), rank))
        for rank in range(2)
    ]
    for p in procs:
        p.start()
    try:
        w.wait_until_ready()
        os.kill(procs[1].pid, signal.SIGKILL)
        procs[1].join(timeout=10)
        with pytest.raises(rdmaq.PeerDeadError, match="reader 1"):
            for _ in range(1000):  # more than the ring holds
                w.enqueue(b"x" * 3000, timeout=30)
    finally:
        for p in procs:
            p.kill()
            p.join()
        w.shutdown()


# ------------------------------------------------------------ handles
def test_handle_pickles_and_keeps_vllm_meanings():
    w = MQ(3, 2, local_reader_ranks=[4, 7], connect_ip="127.0.0.1")
    try:
        h = pickle.loads(pickle.dumps(w.export_handle()))
        assert isinstance(h, RdmaqHandle) and isinstance(h, sb.Handle)
        assert h.local_reader_ranks == [4, 7]
        assert h.remote_subscribe_addr.startswith("tcp://127.0.0.1:")
        assert isinstance(h.ring, rdmaq.Handle) and h.ring.n_readers == 2
        r = MQ.create_from_handle(h, 7)
        assert r._is_local_reader and r.local_reader_rank == 1
        r.shutdown()
    finally:
        w.shutdown()
    w = MQ(1, 1)
    try:
        assert w.export_handle().remote_subscribe_addr is None
        assert len(w.export_handle().local_reader_ranks) > 0
    finally:
        w.shutdown()


@pytest.mark.parametrize("patched", [False, True])
def test_vllm_handle_goes_to_vllm_implementation(patched, monkeypatch, _vllm_queue_sockets):
    if patched:  # as after the plugin's swap: vLLM's code builds our class
        monkeypatch.setattr(sb, "MessageQueue", MQ)
    w = rq.VllmMessageQueue(1, 1, max_chunk_bytes=1 << 16, max_chunks=2)
    r = MQ.create_from_handle(w.export_handle(), 0)
    try:
        assert not getattr(r, "_rdmaq", False) and isinstance(r, rq.VllmMessageQueue)
        assert isinstance(r, MQ) == patched
        assert isinstance(r.buffer, sb.ShmRingBuffer)  # vLLM's own reader
        assert not r.buffer.is_creator
        _ready(w, r)
        w.enqueue({"from": "vllm"})
        if hasattr(rq.VllmMessageQueue, "readable"):  # vLLM's own, where vLLM has one
            deadline = time.monotonic() + 5
            while not r.readable():
                assert time.monotonic() < deadline, "vLLM's readable() never saw the message"
        assert r.dequeue(timeout=5) == {"from": "vllm"}
        r.shutdown()  # vLLM's own: it marks the reader shutting down (a blocked dequeue's cue)
        assert r.shutting_down
    finally:
        r.shutdown()
        w.shutdown()
        _close_zmq_sockets(r, w)


def _close_zmq_sockets(*mqs):
    """vLLM's shutdown() leaves its ZMQ sockets open, and libzmq leaves an ipc://
    socket's file behind even when it is closed: close them, remove the files."""
    import zmq

    for mq in mqs:
        for obj in (mq, getattr(mq, "_spin_condition", None)):
            for v in list(vars(obj).values()) if obj is not None else ():
                if isinstance(v, zmq.Socket) and not v.closed:
                    endpoint = v.getsockopt(zmq.LAST_ENDPOINT).decode()
                    v.close(linger=0)
                    if endpoint.startswith("ipc://"):
                        try:
                            os.unlink(endpoint[len("ipc://"):])
                        except FileNotFoundError:
                            pass


def test_arena_flag_is_accepted_and_ignored(caplog):
    with caplog.at_level(logging.INFO, logger="vllm.rdmaq"):
        w = MQ(1, 1, enable_shm_tensor_arena=True)
    try:
        # vLLM 0.26's Handle has no arena field at all
        handle = w.export_handle()
        assert w.tensor_arena is None and getattr(handle, "tensor_arena_handle", None) is None
        assert "ignores enable_shm_tensor_arena" in caplog.text
    finally:
        w.shutdown()


# ------------------------------------------------------------ remote readers
def test_a_failed_send_to_remote_readers_alone_raises_its_own_error():
    """No ring reader has the message, so the enqueue raised nothing was sent: the
    error itself, not held for the next call as when the ring's readers have it."""
    w = MQ(1, 0, connect_ip="127.0.0.1")
    try:
        assert w._writer is None and w._remote is not None

        def refused(parts):
            raise OSError(105, "No buffer space available")

        w._remote.send = refused
        with pytest.raises(OSError, match="No buffer space"):
            w.enqueue("lost")
    finally:
        w.shutdown()


def test_a_failed_send_to_remote_readers_is_raised_by_the_next_enqueue():
    """The ring's reader has the message, so the enqueue that failed for the remote ones
    returns (raising would have it enqueued again); the next enqueue raises the error."""
    w = MQ(2, 1, connect_ip="127.0.0.1")
    local = MQ.create_from_handle(w.export_handle(), 0)
    remote = MQ.create_from_handle(w.export_handle(), -1)
    try:
        _ready(w, local, remote)
        real_send = w._remote.send

        def refused_once(parts):
            w._remote.send = real_send
            raise OSError(105, "No buffer space available")

        w._remote.send = refused_once
        w.enqueue("first")
        assert local.dequeue(timeout=10) == "first"
        with pytest.raises(OSError, match="No buffer space"):
            w.enqueue("second")
        w.enqueue("third")
        assert local.dequeue(timeout=10) == "third"
    finally:
        _close(remote, local, w)


@pytest.mark.parametrize("readers", ["ring", "remote only"])
def test_enqueue_after_shutdown_is_cancelled(readers):
    if readers == "ring":
        w, r = _pair()
        _close(r, w)
    else:
        w = MQ(1, 0, connect_ip="127.0.0.1")  # vLLM's ZMQ socket alone, no ring
        w.shutdown()
    with pytest.raises(RuntimeError, match="cancelled"):
        w.enqueue("late")


def test_remote_reader_over_zmq_and_its_shutdown():
    w = MQ(2, 1, connect_ip="127.0.0.1")
    local = MQ.create_from_handle(w.export_handle(), 0)
    remote = MQ.create_from_handle(w.export_handle(), -1)  # as vLLM's executor
    try:
        assert remote._is_remote_reader and remote.remote_socket is not None
        _ready(w, local, remote)
        big = torch.arange(1 << 19, dtype=torch.float32)  # 2 MiB: out of band
        w.enqueue(("hello", big))
        for mq in (local, remote):
            s, t = mq.dequeue(timeout=10)
            assert s == "hello" and torch.equal(t, big)
        # vLLM's remote reader cannot be woken; this one can.
        polling = threading.Event()
        poller = remote._remote._poller
        real_poll = poller.poll

        def observed_poll(*args, **kwargs):
            polling.set()  # the reader is about to block in zmq's poll
            return real_poll(*args, **kwargs)

        poller.poll = observed_poll
        th, box = in_thread(remote.dequeue)
        assert polling.wait(30) and th.is_alive()
        remote.shutdown()
        th.join(timeout=10)
        assert not th.is_alive() and str(box.get("error")) == "cancelled", box
    finally:
        _close(local, w)


def test_remote_readers_on_the_ring_get_their_own_slots(monkeypatch):
    """With RDMA (forced here with RDMAQ_VLLM_REMOTE=ring, any host-local
    transport) remote readers whose ranks are known read the ring."""
    monkeypatch.setenv("RDMAQ_VLLM_REMOTE", "ring")
    w = MQ(3, 1, local_reader_ranks=[0], remote_reader_ranks=[1, 2])
    h = w.export_handle()
    assert h.ring.n_readers == 3 and h.ring_remote_ranks == [1, 2]
    assert h.remote_subscribe_addr is None
    readers = [MQ.create_from_handle(h, rank) for rank in (0, 1, 2)]
    try:
        assert readers[1]._is_remote_reader and readers[1]._reader.index == 1
        assert readers[2]._reader.index == 2
        with pytest.raises(ValueError, match="remote ring reader"):
            MQ.create_from_handle(h, 3)
        _ready(w, *readers)
        w.enqueue([1, 2, 3])
        assert [r.dequeue(timeout=10) for r in readers] == [[1, 2, 3]] * 3
    finally:
        _close(*readers, w)


def test_remote_mode_env_is_checked(monkeypatch):
    monkeypatch.setenv("RDMAQ_VLLM_REMOTE", "bogus")
    with pytest.raises(ValueError, match="RDMAQ_VLLM_REMOTE"):
        MQ(2, 1)


# ------------------------------------------------------------ process groups
def _pg_worker(rank, world, port, fn_name, out):
    import torch.distributed as dist

    os.environ.update(VLLM_HOST_IP="127.0.0.1")
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        out.put((rank, globals()[fn_name](rank)))
    finally:
        dist.destroy_process_group()


def _pg_broadcast(rank):
    import torch.distributed as dist

    mq = MQ.create_from_process_group(dist.group.WORLD, 1 << 16, 4, writer_rank=1)
    assert isinstance(mq, MQ) and mq._rdmaq
    if rank == 1:
        for i in range(50):
            mq.broadcast_object({"i": i, "a": np.arange(i)})
        got = "writer"
    else:
        got = [mq.broadcast_object()["i"] for _ in range(50)]
    dist.barrier()
    mq.shutdown()
    return got


def _pg_single_reader(rank):
    from unittest import mock

    import torch.distributed as dist

    with mock.patch(
        "vllm.platforms.interface.get_assigned_physical_gpu_ids", return_value=[0, 1, 2]
    ):
        mq, handles = MQ.create_from_process_group_single_reader(
            dist.group.WORLD, 1 << 16, 4, reader_rank=0
        )
    if rank == 0:
        readers = [MQ.create_from_handle(h, 0) for h in handles]
        own = threading.Thread(target=mq.wait_until_ready)  # rank 0 writes to itself
        own.start()
        for r in readers:
            r.wait_until_ready()
        own.join()
        mq.enqueue("self")
        got = [r.dequeue(timeout=30) for r in readers]
        for r in readers:
            r.shutdown()
    else:
        mq.wait_until_ready()
        mq.enqueue(f"from {rank}")
        got = None
    dist.barrier()
    mq.shutdown()
    return got


def _run_group(fn_name, world=3):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = FORK.Queue()
    procs = [
        FORK.Process(target=_pg_worker, args=(r, world, port, fn_name, out))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    try:
        return _collect(out, procs)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()


def test_create_from_process_group():
    res = _run_group("_pg_broadcast")
    assert res[1] == "writer" and res[0] == res[2] == list(range(50))


def test_create_from_process_group_single_reader():
    res = _run_group("_pg_single_reader")
    assert res[0] == ["self", "from 1", "from 2"]


def test_role_attributes_match_vllms_own_queue(_vllm_queue_sockets):
    """The attributes vLLM's class sets, which its inherited methods and vLLM's
    callers may read, exist on rdmaq's queues, and those that say an endpoint's
    role have vLLM's values, for a writer and for a local reader."""
    role = ("_is_writer", "_is_local_reader", "_is_remote_reader", "local_reader_rank",
            "n_local_reader", "n_remote_reader")
    theirs_w = rq.VllmMessageQueue(1, 1, max_chunk_bytes=1 << 20, max_chunks=4, connect_ip="127.0.0.1")
    theirs_r = rq.VllmMessageQueue.create_from_handle(theirs_w.export_handle(), 0)
    ours_w, ours_r = _pair()
    try:
        for theirs, ours in ((theirs_w, ours_w), (theirs_r, ours_r)):
            assert not [a for a in vars(theirs) if not hasattr(ours, a)]
            assert {a: getattr(ours, a) for a in role if hasattr(theirs, a)} == \
                {a: getattr(theirs, a) for a in role if hasattr(theirs, a)}
    finally:
        _close(ours_r, ours_w)
        for q in (theirs_r, theirs_w):
            getattr(q, "shutdown", lambda: None)()


class _WritersGroup:
    """What create_from_process_group uses of a StatelessProcessGroup, for the writer's
    side alone: its rank, the world's size, and a broadcast that keeps what is sent."""

    def __init__(self, rank, world_size):
        self.rank, self.world_size, self.sent = rank, world_size, []

    def broadcast_obj(self, obj, src):
        self.sent.append((obj, src))
        return obj


def test_create_from_process_group_serves_other_nodes_ranks_remotely(monkeypatch):
    import vllm.distributed.parallel_state as ps

    monkeypatch.setattr(ps, "in_the_same_node_as", lambda pg, source_rank=0: [True, True, False])
    pg = _WritersGroup(rank=0, world_size=3)
    mq = MQ.create_from_process_group(pg, 1 << 20, 4, writer_rank=0, blocking=False)
    try:
        [(handle, src)] = pg.sent
        assert src == 0 and handle is mq.export_handle()
        assert handle.local_reader_ranks == [1]
        assert handle.n_remote_reader == 1 and handle.remote_subscribe_addr is not None
    finally:
        mq.shutdown()


# ------------------------------------------------------------ sizing, stats
def test_ring_geometry():
    # executor broadcast: 16 MiB x 10 in vLLM -> 64 slots of 64 KiB (4 MiB)
    assert ring_geometry(16 << 20, 10) == (64 << 10, 64)
    assert ring_geometry(24 << 20, 10) == (64 << 10, 64)
    assert ring_geometry(40 * 1024, 2) == (32 << 10, 8)  # small chunks
    assert ring_geometry(100, 3) == (4096, 8)
    with pytest.raises(ValueError):
        ring_geometry(0, 1)


def test_ring_geometry_env(monkeypatch):
    monkeypatch.setenv("RDMAQ_VLLM_RING_BYTES", str(1 << 20))
    assert ring_geometry(16 << 20, 10) == (64 << 10, 16)
    monkeypatch.setenv("RDMAQ_VLLM_RING_BYTES", "lots")
    with pytest.raises(ValueError, match="RDMAQ_VLLM_RING_BYTES"):
        ring_geometry(16 << 20, 10)


def test_stats_file_rewritten_while_messages_flow(monkeypatch, tmp_path):
    """Not only at shutdown: vllm serve SIGKILLs its EngineCore, whose record would be lost."""
    monkeypatch.setenv("RDMAQ_VLLM_STATS_DIR", str(tmp_path))
    monkeypatch.setenv("RDMAQ_VLLM_STATS_INTERVAL", "0.05")  # if this process's rewriter starts here
    w, r = _pair()
    try:
        for i in range(3):
            w.enqueue(i)
            assert r.dequeue(timeout=5) == i

        def records():
            out = []
            for p in tmp_path.glob("*.json"):
                try:
                    out.append(json.loads(p.read_text()))
                except (OSError, ValueError):
                    pass  # replaced as we read it
            return sorted((s["role"], s["messages"], s["final"]) for s in out)

        wait_until(lambda: records() == [("local reader", 3, False), ("writer", 3, False)],
                   "the stats files of both endpoints to show 3 messages")
    finally:
        _close(r, w)


def test_stats_file_written_at_shutdown(monkeypatch, tmp_path):
    monkeypatch.setenv("RDMAQ_VLLM_STATS_DIR", str(tmp_path))
    w, r = _pair()
    for i in range(5):
        w.enqueue(i)
        assert r.dequeue(timeout=5) == i
    _close(r, w)
    stats = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    roles = sorted((s["role"], s["messages"], s["final"]) for s in stats)
    assert roles == [("local reader", 5, True), ("writer", 5, True)]
    assert all(s["ring"]["messages"] == 5 for s in stats)


def test_stats_interval_from_the_environment(monkeypatch):
    from rdmaq.vllm import _stats
    monkeypatch.delenv("RDMAQ_VLLM_STATS_INTERVAL", raising=False)
    assert _stats._interval() == 1.0
    for raw, seconds in (("0.25", 0.25), ("0", 0.0), ("-3", 0.0)):
        monkeypatch.setenv("RDMAQ_VLLM_STATS_INTERVAL", raw)
        assert _stats._interval() == seconds
    monkeypatch.setenv("RDMAQ_VLLM_STATS_INTERVAL", "soon")
    with pytest.raises(ValueError, match=r"^RDMAQ_VLLM_STATS_INTERVAL must be a number of seconds, not 'soon'$"):
        _stats._interval()


class _StandInQueue:
    """What QueueStats reads of a MessageQueue: its pid, close lock, stats and endpoint."""

    def __init__(self, ring_stats):
        self._pid = os.getpid()
        self._close_lock = threading.Lock()
        self._writer = type("Endpoint", (), {"stats": ring_stats})()
        self._reader = None
        self._stats = None


def test_stats_count_messages_and_bytes_and_write_only_what_changed(monkeypatch, tmp_path):
    from rdmaq.vllm import _stats
    monkeypatch.setenv("RDMAQ_VLLM_STATS_DIR", str(tmp_path / "made"))
    mq = _StandInQueue({"messages": 2})
    st = mq._stats = _stats.QueueStats(mq, "writer", n_reader=3)
    assert st.dirty()  # a new endpoint's record is due, messages or not
    st.count(10)
    st.count(5)
    assert (st.messages, st.bytes) == (2, 15) and st.dirty()
    st.flush()
    assert not st.dirty()
    [path] = (tmp_path / "made").glob("rdmaq-stats-*.json")
    line = json.loads(path.read_text())
    assert (line["role"], line["messages"], line["bytes"], line["final"]) == ("writer", 2, 15, False)
    assert (line["pid"], line["n_reader"], line["ring"]) == (os.getpid(), 3, {"messages": 2})
    st.count(1)
    assert st.dirty()
    st.flush(final=True)
    assert json.loads(path.read_text())["final"] is True
    st.count(1)
    st.flush()  # after the final record: nothing more
    assert json.loads(path.read_text())["messages"] == 3


def test_stats_are_not_written_without_the_directory_or_for_another_process(monkeypatch, tmp_path):
    from rdmaq.vllm import _stats
    monkeypatch.delenv("RDMAQ_VLLM_STATS_DIR", raising=False)
    mq = _StandInQueue({})
    st = mq._stats = _stats.QueueStats(mq, "writer")
    st.count(1)
    assert not st.dirty()
    st.flush(final=True)
    monkeypatch.setenv("RDMAQ_VLLM_STATS_DIR", str(tmp_path))
    st = mq._stats = _stats.QueueStats(mq, "writer")
    st.count(1)
    mq._pid = os.getpid() + 1  # a copy inherited through fork
    st.flush(final=True)
    assert list(tmp_path.iterdir()) == []


def test_stats_a_directory_that_cannot_be_written_is_said_once(monkeypatch, tmp_path, caplog):
    from rdmaq.vllm import _stats
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("RDMAQ_VLLM_STATS_DIR", str(blocker / "sub"))
    mq = _StandInQueue({})
    st = mq._stats = _stats.QueueStats(mq, "writer")
    st.count(1)
    with caplog.at_level(logging.WARNING, logger="vllm.rdmaq"):
        st.flush()
        assert not st.dirty()  # given up
        st.count(1)
        st.flush(final=True)
    assert [r.getMessage().startswith(f"rdmaq: cannot write queue stats to {blocker / 'sub'}: ")
            for r in caplog.records] == [True]


def test_stats_of_an_endpoint_that_refuses_say_why(monkeypatch, tmp_path):
    from rdmaq.vllm import _stats

    class Refusing:
        @property
        def stats(self):
            raise rdmaq.ClosedError("writer is closed")

    mq = _StandInQueue({})
    mq._writer = Refusing()
    mq._stats = _stats.QueueStats(mq, "writer")
    assert _stats.snapshot(mq)["ring"] == {"error": "writer is closed"}
    mq._writer, mq._reader = None, type("Endpoint", (), {"stats": {"messages": 4}})()
    assert _stats.snapshot(mq)["ring"] == {"messages": 4}
    mq._reader = None  # a remote (zmq) reader: no ring
    assert _stats.snapshot(mq)["ring"] is None


def test_rdmaq_stats_count_each_message_and_its_bytes():
    """The writer counts the bytes it pickled (stream and out-of-band buffers), the
    reader each message as it came off the ring, framing included."""
    objs = ["abc", np.arange(1000, dtype=np.int64), {"k": [1, 2, 3]}, np.arange((1 << 20) // 8, dtype=np.int64)]
    pickled = [rq._serializer().pickle(o) for o in objs]
    assert pickled[-1].buffers  # the large array travels out of band: its bytes are counted too
    w, r = _pair()
    try:
        for o in objs:
            t = threading.Thread(target=w.enqueue, args=(o,))
            t.start()
            r.dequeue(timeout=5)
            t.join(timeout=30)
        ws, rs = w.rdmaq_stats(), r.rdmaq_stats()
        assert (ws["role"], ws["messages"], rs["role"], rs["messages"]) == ("writer", 4, "local reader", 4)
        assert ws["bytes"] == sum(p.stream_bytes + sum(b.nbytes for b in p.buffers) for p in pickled)
        assert rs["bytes"] == rs["ring"]["bytes"] == ws["ring"]["bytes"] > ws["bytes"]
    finally:
        _close(r, w)


def test_rdmaq_stats_describe_the_queue_and_the_endpoint_as_vllm_s_attributes_do():
    w, r = _pair()
    try:
        slot_bytes, slots = ring_geometry(1 << 20, 4)
        ws, rs = w.rdmaq_stats(), r.rdmaq_stats()
        assert {k: ws[k] for k in ("n_reader", "n_local_reader", "transport", "remote", "slot_bytes", "slots")} == {
            "n_reader": 1, "n_local_reader": 1, "transport": "shm", "remote": None,
            "slot_bytes": slot_bytes, "slots": slots}
        assert (rs["transport"], rs["rank"], rs["pid"]) == ("shm", 0, os.getpid())
        assert (w._is_writer, w.n_local_reader, w.n_remote_reader, w.local_reader_rank, w.current_idx) == (
            True, 1, 0, -1, -1)
        assert (r._is_writer, r._is_local_reader, r._is_remote_reader, r.local_reader_rank, r.current_idx) == (
            False, True, False, 0, 0)
        assert (r.n_local_reader, r.n_remote_reader, r.buffer, r.shutting_down) == (1, 0, None, False)
    finally:
        _close(r, w)


def test_buffers_travel_out_of_band_from_1_mib_as_vllm_s_do():
    """vLLM's enqueue pickles a buffer shorter than 1 MiB in band, the rest out of band."""
    def out_of_band(nbytes):
        return len(rq._serializer().pickle(np.zeros(nbytes, dtype=np.uint8)).buffers)

    assert (out_of_band((1 << 20) - 1), out_of_band(1 << 20)) == (0, 1)


def test_stats_name_the_process_by_its_command_without_setproctitle(monkeypatch):
    import sys

    from rdmaq.vllm import _stats
    monkeypatch.setitem(sys.modules, "setproctitle", None)  # not installed: the import fails
    monkeypatch.setattr(sys, "argv", ["/venv/bin/vllm", "serve", "facebook/opt-125m", "--port", "8001"])
    assert _stats._process_title() == "/venv/bin/vllm serve"


def test_a_queue_dropped_without_shutdown_closes_its_ring_endpoints():
    import gc
    w, r = _pair()
    ring_writer, ring_reader = w._writer, r._reader
    del w, r
    gc.collect()
    assert ring_writer._closed and ring_reader._closed


def test_a_writer_without_a_ring_says_so_in_its_log_line_and_stats(caplog):
    with caplog.at_level(logging.INFO, logger="vllm.rdmaq"):
        w = MQ(1, 0, connect_ip="127.0.0.1")  # vLLM's ZMQ socket alone
    try:
        assert ("rdmaq MessageQueue writer: 1 readers (0 local), ring transport=None 0 x 0 B, remote=zmq"
                in caplog.text)
        st = w.rdmaq_stats()
        assert (st["transport"], st["slot_bytes"], st["slots"], st["remote"], st["ring"]) == (
            None, None, None, "zmq", None)
    finally:
        w.shutdown()
