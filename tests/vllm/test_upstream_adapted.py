"""vLLM 0.33.0's tests/distributed/test_shm_broadcast.py cases that tests/vllm/upstream
deselects, rewritten for rdmaq's MessageQueue wherever what they check is behaviour a
caller sees rather than vLLM's internals.

Each test names the upstream case(s) it adapts and what it leaves out.  What the
upstream cases assert through mocks of vLLM internals (SpinCondition.wait call
counts, MessageQueue.recv for the ZMQ overflow path, _reduce_tensor call counts,
arena slot bookkeeping) is replaced by the observable result: the object that
arrives, whether the reader woke, what the caller can do next.  The deselected
cases covered elsewhere are named in tests/vllm/upstream/upstream_conftest.py.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import queue as _queue
import shutil
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from rdmaq.vllm.queue import RdmaqMessageQueue  # noqa: E402

MQ = RdmaqMessageQueue
FORK = multiprocessing.get_context("fork")


@pytest.fixture(autouse=True)
def _loopback(monkeypatch):
    monkeypatch.setenv("VLLM_HOST_IP", "127.0.0.1")
    monkeypatch.delenv("RDMAQ_VLLM_REMOTE", raising=False)
    monkeypatch.delenv("RDMAQ_VLLM_STATS_DIR", raising=False)


def _pair(**kw):
    kw.setdefault("max_chunk_bytes", 1 << 20)
    kw.setdefault("max_chunks", 4)
    w = MQ(1, 1, connect_ip="127.0.0.1", **kw)
    r = MQ.create_from_handle(w.export_handle(), 0)
    t = threading.Thread(target=w.wait_until_ready)  # collective: writer in a thread
    t.start()
    r.wait_until_ready()
    t.join(timeout=30)
    assert not t.is_alive()
    return w, r


def _send(w, *objs):
    """Enqueue from a thread (a big message streams through the ring as it is read)."""
    t = threading.Thread(target=lambda: [w.enqueue(o, timeout=60) for o in objs])
    t.start()
    return t


def _results(out, procs, n, timeout=120.0):
    """n results from child processes; fail at once if a child died without one."""
    got, deadline = [], time.monotonic() + timeout
    while len(got) < n:
        try:
            got.append(out.get(timeout=0.5))
            continue
        except _queue.Empty:
            pass
        dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
        if dead:
            pytest.fail(f"child process failed with exit code(s) {dead}")
        if time.monotonic() > deadline:
            pytest.fail(f"children gave {len(got)}/{n} results in {timeout:.0f}s")
    return got


def _join(procs):
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
            p.join()


# ---------------------------------------------------------------- tensors
# Upstream test_tensor_pickle_roundtrip[*] and test_reduce_tensor_fallback[requires_grad,
# conj] pickle with _reduce_tensor directly; here the same tensors go through the queue.
# The *_big cases are the tensors of test_arena_pickler_* (above the arena's 1 MiB
# threshold there), sent with enable_shm_tensor_arena=True, which rdmaq accepts.
TENSORS = {
    "small": lambda: torch.randn(100, 10),
    "mid": lambda: torch.randn(1024, 512),
    "bf16": lambda: torch.randn(512, 512, dtype=torch.bfloat16),
    "fp8": lambda: torch.randn(32, 32).to(torch.float8_e4m3fn),
    "empty": lambda: torch.empty(0, 8),
    "scalar": lambda: torch.tensor(3.14),
    "noncontig": lambda: torch.randn(64, 64).t(),
    "requires_grad": lambda: torch.randn(8, 8, requires_grad=True),
    "conj": lambda: torch.randn(4, dtype=torch.complex64).conj(),
    "param": lambda: torch.nn.Parameter(torch.randn(4), requires_grad=False),
    "noncontig_big": lambda: torch.randn(2048, 1024)[:, ::2],
    "requires_grad_big": lambda: torch.randn(1024, 1024, requires_grad=True),
    "conj_big": lambda: torch.randn(600, 600, dtype=torch.complex64).conj(),
    "param_big": lambda: torch.nn.Parameter(torch.randn(1024, 1024), requires_grad=False),
}


@pytest.mark.parametrize("case", TENSORS)
def test_tensor_kinds_roundtrip_through_the_queue(case):
    """From test_tensor_pickle_roundtrip / test_reduce_tensor_fallback /
    test_arena_pickler_*: shape, dtype, values, requires_grad and type survive, and the
    received tensor is writable.  Left out: the CUDA case (no GPU here) and which reducer
    ran (internal)."""
    w, r = _pair(max_chunk_bytes=8 << 20, enable_shm_tensor_arena=case.endswith("_big"))
    try:
        torch.manual_seed(0)
        tensor = TENSORS[case]()
        t = _send(w, {"tensor": tensor, "meta": list(range(10))})
        msg = r.dequeue(timeout=60)
        t.join()
        received = msg["tensor"]
        assert msg["meta"] == list(range(10))
        assert received.shape == tensor.shape and received.dtype == tensor.dtype
        if tensor.dtype == torch.float8_e4m3fn:
            assert torch.equal(received.view(torch.uint8), tensor.view(torch.uint8))
        else:
            assert torch.equal(received, tensor)
        assert received.requires_grad == tensor.requires_grad
        assert isinstance(received, type(tensor))
        if tensor.numel() and not tensor.requires_grad:
            before = tensor.reshape(-1)[0].clone()
            received.reshape(-1)[0] = 1.0  # writable, like a regular tensor ...
            assert torch.equal(tensor.reshape(-1)[0], before)  # ... and not the sender's
    finally:
        r.shutdown()
        w.shutdown()


# ------------------------------------------------------------ idle / busy readers
def _waking_reader(handle, rank, out):
    mq = MQ.create_from_handle(handle, rank)
    mq.wait_until_ready()
    try:
        # idle: nothing sent yet
        try:
            mq.dequeue(timeout=0.01)
            raise AssertionError("dequeue returned with nothing sent")
        except TimeoutError:
            pass
        cpu0 = time.thread_time()
        try:
            mq.dequeue(timeout=0.5)
            raise AssertionError("dequeue returned with nothing sent")
        except TimeoutError:
            pass
        idle_cpu = time.thread_time() - cpu0
        out.put(("waiting", rank, None))
        first = mq.dequeue(timeout=60)  # woken from idle
        second = mq.dequeue(timeout=60)
        burst = [mq.dequeue(timeout=60) for _ in range(200)]  # busy
        try:  # busy -> idle
            mq.dequeue(timeout=0.01)
            raise AssertionError("dequeue returned with nothing sent")
        except TimeoutError:
            pass
        out.put(("waiting", rank, None))
        last = mq.dequeue(timeout=60)  # woken again
        ok = (first == "hello world" and np.array_equal(second, np.arange(100))
              and burst == list(range(200)) and last == [0, 1, 2])
        out.put(("done", rank, (ok, idle_cpu)))
    finally:
        mq.shutdown()


def test_readers_wake_from_idle_and_after_busy():
    """From test_message_queue_idle_wake and test_message_queue_busy_to_idle (4 ranks,
    the writer rank 2): readers that timed out with nothing to read get the next message
    when it is sent, before and after a busy burst; while idle they sleep rather than
    spin (CPU time of a 0.5 s wait well under the wait).  Left out: SpinCondition.wait
    call counts, and the upstream sleeps that order writer and readers (here the writer
    waits for each reader's word that it is about to wait)."""
    w = MQ(3, 3, max_chunk_bytes=64 << 10, max_chunks=4)
    out = FORK.Queue()
    procs = [FORK.Process(target=_waking_reader, args=(w.export_handle(), rank, out))
             for rank in range(3)]
    for p in procs:
        p.start()
    try:
        w.wait_until_ready()
        _results(out, procs, 3)  # every reader idles, then waits
        w.enqueue("hello world")
        w.enqueue(np.arange(100))
        for i in range(200):
            w.enqueue(i)
        _results(out, procs, 3)  # every reader went idle again
        w.enqueue([0, 1, 2])
        done = _results(out, procs, 3)
    finally:
        _join(procs)
        w.shutdown()
    for _, rank, (ok, idle_cpu) in done:
        assert ok, f"reader {rank} got the wrong messages"
        assert idle_cpu < 0.25, f"reader {rank} used {idle_cpu:.2f} s CPU in a 0.5 s idle wait"
    assert all(p.exitcode == 0 for p in procs)


# ------------------------------------------------------------ a reader that fails
def _explode(message):
    raise RuntimeError(message)


class _FailsToUnpickle:
    def __reduce__(self):
        return _explode, ("reader failed",)


def test_reader_error_leaves_the_queue_usable():
    """From test_acquire_read_releases_slot_when_reader_raises: an error while the reader
    handles a message (here: unpickling it) releases that message's space in the ring.
    Unlike vLLM's, the adapter's dequeue that raises took nothing (README, Errors): the
    message stays first, off the ring, and each dequeue raises its error again (vLLM's
    goes on to the next message).  Left out: acquire_read and the ring's
    metadata flags (vLLM's chunk API, which rdmaq does not have)."""
    w, r = _pair(max_chunk_bytes=1 << 20, max_chunks=1)
    try:
        w.enqueue(_FailsToUnpickle(), timeout=5)
        for _ in range(2):
            with pytest.raises(RuntimeError, match="reader failed"):
                r.dequeue(timeout=5)
        assert r._reader.stats["messages"] == 1  # off the ring: its space is the writer's
        assert r.readable()
    finally:
        r.shutdown()
        w.shutdown()


# ------------------------------------------------------------ arena flag across processes
def _digest(t):
    # numpy, not torch: a forked child must not enter torch's OpenMP pool, which the
    # parent may have started (libgomp does not survive fork)
    return hashlib.sha256(t.numpy().tobytes()).hexdigest(), tuple(t.shape), str(t.dtype)


def _arena_reader(handle, expected, out):
    mq = MQ.create_from_handle(handle, 1)
    mq.wait_until_ready()
    try:
        got = mq.dequeue(timeout=60)
        ok = {k: _digest(got[k]) == expected[k] for k in expected}
        got["huge"].numpy()[0, 0] = -1.0  # writable: the receiver's own memory
        out.put(("done", 1, ok))
    finally:
        mq.shutdown()


def test_arena_flag_broadcast_across_processes():
    """From test_arena_broadcast: with enable_shm_tensor_arena=True a 16 MiB and a 2 MiB
    tensor reach a reader in another process intact and writable.  Left out: that the
    16 MiB one is a view of vLLM's arena and its slot bookkeeping (rdmaq has no arena:
    the tensors travel as out-of-band buffers through the ring)."""
    torch.manual_seed(42)
    payload = {"huge": torch.randn(2048, 2048), "mid": torch.randn(1024, 512)}
    expected = {k: _digest(v) for k, v in payload.items()}
    w = MQ(1, 1, local_reader_ranks=[1], max_chunk_bytes=8 << 20,
           enable_shm_tensor_arena=True)
    out = FORK.Queue()
    p = FORK.Process(target=_arena_reader, args=(w.export_handle(), expected, out))
    p.start()
    try:
        w.wait_until_ready()
        w.enqueue(payload, timeout=60)
        (_, _, ok), = _results(out, [p], 1)
    finally:
        _join([p])
        w.shutdown()
    assert ok == {"huge": True, "mid": True} and p.exitcode == 0


# ------------------------------------------------------------ /dev/shm too small
SMALL_SHM = textwrap.dedent("""
    import numpy as np
    from rdmaq.vllm.queue import RdmaqMessageQueue as MQ
    try:
        w = MQ(1, 1, max_chunk_bytes=1 << 20, max_chunks=4, connect_ip="127.0.0.1")
        r = MQ.create_from_handle(w.export_handle(), 0)
    except Exception as e:
        print(f"REFUSED {type(e).__name__}: {e}", flush=True)
        raise SystemExit(0)
    import threading
    t = threading.Thread(target=w.wait_until_ready); t.start(); r.wait_until_ready(); t.join()
    for i in range(16):  # 4 MiB through each reader's 4 MiB ring
        w.enqueue(np.full(256 << 10, i, dtype=np.uint8), timeout=30)
        r.dequeue(timeout=30)
    print("SENT", flush=True)
""")


def _can_mount_private_shm():
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    p = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
                       capture_output=True)
    return p.returncode == 0


@pytest.mark.skipif(not _can_mount_private_shm(),
                    reason="needs root and unshare -m to give a child a 1 MiB /dev/shm")
def test_queue_larger_than_dev_shm_fails_at_creation():
    """From test_check_shm_free_space_* and test_shm_ring_buffer_creation_checks_free_space
    (vLLM checks /dev/shm's free space before it creates a ring, so that an undersized
    /dev/shm, e.g. a container's 64 MiB default, is an error at creation, not a SIGBUS
    later).  Here a child process gets a private 1 MiB /dev/shm and creates a queue
    whose ring needs 4 MiB: creating it must fail with an exception, not the process
    die by SIGBUS while messages flow."""
    p = subprocess.run(
        ["unshare", "-m", "sh", "-c",
         'mount -t tmpfs -o size=1m tmpfs /dev/shm && exec "$0" -c "$1"',
         sys.executable, SMALL_SHM],
        capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (f"exit {p.returncode} (SIGBUS is -7 or 135)", p.stdout,
                               p.stderr[-2000:])
    assert "REFUSED" in p.stdout, p.stdout
