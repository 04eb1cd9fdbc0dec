"""``rdmaq bench step``'s child processes: the engine (one writer) and the TP ranks.

The engine broadcasts one step message per step through the queue under test, as vLLM's
EngineCore does through ``rpc_broadcast_mq``, then waits for rank 0's reply on a response queue
of the same kind (one reader: the engine) and starts the next step as soon as it has it (or
after ``gap_ns``), as in decode. Each rank dequeues the step, does the step's work (a timed spin,
or a calibrated chain of matmuls on the GPU), meets the other ranks at a barrier, and rank 0
replies. The barrier is what NCCL's all-reduce does to the step: everyone waits for the slowest,
so the step starts, in effect, when its slowest reader has it.

Every stamp is ``time.monotonic_ns()`` (CLOCK_MONOTONIC, comparable across the processes of one
host). The parent drives the children over multiprocessing pipes between sub-runs only.
"""

from __future__ import annotations

import os
import pickle
import time
from array import array
from collections.abc import Callable

from ..common.children import pin, send_failure, stop_quietly

STEP = "execute_model"  # the RPC name vLLM's engine broadcasts each step
END_SUBRUN = "end_subrun"
END_ALL = "end_all"
# after this long spinning, a waiting rank yields its CPU on every poll (several ranks may share one)
BARRIER_SPIN_NS = 50_000
BARRIER_TIMEOUT_NS = 120 * 10**9


def step_message(step: int, n_reqs: int, pad: bytes) -> tuple:
    """An RPC as vLLM's executor broadcasts it: (method, args, kwargs, output rank), with a
    SchedulerOutput-shaped dict of ``n_reqs`` running requests and ``pad`` bytes of block tables."""
    out = {
        "step": step,
        "scheduled_new_reqs": [],
        "scheduled_cached_reqs": {"req_ids": [f"req-{i}" for i in range(n_reqs)],
                                  "num_computed_tokens": [100 + step] * n_reqs},
        "num_scheduled_tokens": {f"req-{i}": 1 for i in range(n_reqs)},
        "total_num_scheduled_tokens": n_reqs,
        "finished_req_ids": set(),
        "block_tables": pad,
    }
    return (STEP, (out,), {"non_block": False}, 0)


class SpinBarrier:
    """All ranks wait until every rank has arrived at step ``epoch``: one int64 slot per rank in
    shared memory, written by its rank only (aligned 8-byte stores: atomic on the CPUs this
    runs on). Waiters poll, as a CUDA stream synchronize and NCCL's kernels do, yielding the CPU
    after a short spin so that a rank that shares a core with others is not starved."""

    def __init__(self, slots, rank: int):
        self.slots, self.rank = slots, rank

    def wait(self, epoch: int) -> None:
        slots = self.slots
        slots[self.rank] = epoch
        mono = time.monotonic_ns
        t0 = mono()
        while min(slots) < epoch:
            t = mono()
            if t - t0 > BARRIER_SPIN_NS:
                if t - t0 > BARRIER_TIMEOUT_NS:
                    late = [r for r, v in enumerate(slots) if v < epoch]
                    raise RuntimeError(f"barrier: rank(s) {late} did not reach step {epoch - 1} "
                                       f"within {BARRIER_TIMEOUT_NS // 10**9} s")
                os.sched_yield()


class BlockingBarrier:
    """multiprocessing.Barrier: waiters sleep on a semaphore instead of polling."""

    def __init__(self, barrier):
        self.barrier = barrier

    def wait(self, epoch: int) -> None:
        self.barrier.wait(BARRIER_TIMEOUT_NS / 1e9)


class SpinWork:
    """--device cpu: the step's work is a timed spin (the GPU's time, on a CPU)."""

    def __init__(self, work_ns: int):
        self.work_ns = work_ns

    def __call__(self) -> None:
        mono = time.monotonic_ns
        end = mono() + self.work_ns
        while mono() < end:
            pass


class GpuWork:
    """--device cuda: ``count`` chained matmuls on this process's CUDA context, then a
    synchronize (the rank waits for its GPU, as a worker does before sampling)."""

    SIZE = 2048  # bf16 2048^3: some 30 µs each on a current GPU: few launches, fine steps

    def __init__(self):
        import torch

        self.torch = torch
        torch.cuda.init()
        g = torch.Generator(device="cuda").manual_seed(0)
        self.a = torch.randn(self.SIZE, self.SIZE, device="cuda", dtype=torch.bfloat16, generator=g)
        self.b = torch.randn(self.SIZE, self.SIZE, device="cuda", dtype=torch.bfloat16, generator=g)
        self.c = torch.empty_like(self.a)
        self.count = 1

    def __call__(self) -> None:
        mm, a, b, c = self.torch.mm, self.a, self.b, self.c
        for _ in range(self.count):
            mm(a, b, out=c)
        self.torch.cuda.synchronize()

    def calibrate(self, work_ns: int) -> dict:
        """How many matmuls make ``work_ns`` on this GPU, measured alone (the other ranks wait)."""
        mono, n = time.monotonic_ns, 20

        def mean_ns(count):
            self.count = count
            self()  # warm
            t = mono()
            for _ in range(n):
                self()
            return (mono() - t) / n
        # chains of 1 and 11: their difference is the matmuls' own time, without the synchronize
        one = mean_ns(1)
        per_ns = max(1.0, (mean_ns(11) - one) / 10)
        self.count = max(1, round((work_ns - (one - per_ns)) / per_ns))
        return {"matmuls": self.count, "matmul_size": self.SIZE, "dtype": "bfloat16",
                "matmul_us": per_ns / 1e3, "work_us": mean_ns(self.count) / 1e3,
                "gpu": self.torch.cuda.get_device_name()}


def engine_main(conn, adapter, tp, cpus) -> None:
    """The EngineCore: writer of the step queue, reader of rank 0's response queue."""
    stop_quietly()
    try:
        pin(cpus)
        adapter.apply_env()
        adapter.prepare()
        w, handle = adapter.create_writer(tp)
        conn.send(("imported", os.getpid(), pickle.dumps(handle), sorted(os.sched_getaffinity(0))))
        cmd = conn.recv()
        assert cmd[0] == "handles", cmd
        resp = adapter.open_reader(pickle.loads(cmd[1]), 0)
        adapter.writer_ready(w)
        adapter.reader_ready(resp)
        conn.send(("ready",))
        send, recv = adapter.sender(w), adapter.receiver(resp)
        while True:
            cmd = conn.recv()
            if cmd[0] == "run":
                conn.send(("done", engine_subrun(send, recv, cmd[1])))
            elif cmd[0] == "exit":
                send((END_ALL, (), {}, 0))
                break
        adapter.close_reader(resp)
        adapter.close_writer(w)
        conn.send(("bye",))
    except BaseException:
        send_failure(conn)


def engine_subrun(send, recv, sub) -> dict:
    """warmup + steps steps, each: broadcast, wait for rank 0's reply, pace; stops early past
    the time cap (every rank has then done exactly the steps sent)."""
    pad = os.urandom(sub["msg_pad"])
    warmup, steps, gap_ns, n_reqs = sub["warmup"], sub["steps"], sub["gap_ns"], sub["n_reqs"]
    mono, ptime, sleep = time.monotonic_ns, time.process_time_ns, time.sleep
    t_send, t_reply = array("q"), array("q")
    errors: list[str] = []
    deadline = mono() + int(sub["time_cap_s"] * 1e9)
    cpu0 = cpu1 = None
    done = 0
    for i in range(warmup + steps):
        if i == warmup:
            cpu0 = ptime()
        t = mono()
        send(step_message(i, n_reqs, pad))
        reply = recv()
        t1 = mono()
        done = i + 1
        if i >= warmup:
            t_send.append(t)
            t_reply.append(t1)
        if reply.get("step") != i and len(errors) < 10:
            errors.append(f"step {i}: rank 0 replied for step {reply.get('step')}")
        if t1 > deadline:
            break
        if gap_ns:
            sleep(gap_ns / 1e9)
    if cpu0 is not None:
        cpu1 = ptime()
    send((END_SUBRUN, (done,), {}, 0))
    return {"sent": done, "t_send": t_send.tobytes(), "t_reply": t_reply.tobytes(),
            "cpu_ns": (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else None,
            "errors": errors}


def rank_main(conn, adapter, rank, tp, cpus, device, barrier_kind, barrier_obj) -> None:
    """One TP rank: reader of the step queue; rank 0 is also the response queue's writer."""
    stop_quietly()
    try:
        pin(cpus)
        adapter.apply_env()
        adapter.prepare()
        work = GpuWork() if device == "cuda" else None
        resp_w = None
        resp_handle = None
        if rank == 0:
            resp_w, h = adapter.create_writer(1)
            resp_handle = pickle.dumps(h)
        conn.send(("imported", os.getpid(), resp_handle))
        cmd = conn.recv()
        assert cmd[0] == "handles", cmd
        r = adapter.open_reader(pickle.loads(cmd[1]), rank)
        adapter.reader_ready(r)
        if resp_w is not None:
            adapter.writer_ready(resp_w)
        conn.send(("ready",))
        recv = adapter.receiver(r)
        reply = adapter.sender(resp_w) if resp_w is not None else None
        barrier = SpinBarrier(barrier_obj, rank) if barrier_kind == "spin" else BlockingBarrier(barrier_obj)
        epoch = 0
        while True:
            cmd = conn.recv()
            if cmd[0] == "calibrate":  # rank 0 alone, before any sub-run
                conn.send(("calibrated", work.calibrate(cmd[1]) if work else None))
            elif cmd[0] == "run":
                sub = cmd[1]
                do_work: Callable[[], None]
                if work is not None:
                    work.count = sub["matmuls"]
                    do_work = work
                else:
                    do_work = SpinWork(int(sub["work_us"] * 1000))
                res, epoch = rank_subrun(recv, reply, do_work, barrier, epoch, sub["warmup"])
                conn.send(("done", res))
            elif cmd[0] == "exit":
                m = recv()
                if m[0] != END_ALL:
                    raise RuntimeError(f"expected the end message, got {m[0]!r}")
                break
        adapter.close_reader(r)
        if resp_w is not None:
            adapter.close_writer(resp_w)
        conn.send(("bye",))
    except BaseException:
        send_failure(conn)


def rank_subrun(recv, reply, work, barrier, epoch, warmup) -> tuple[dict, int]:
    """Steps until the engine's end-of-subrun message: dequeue (stamped), work, barrier, and on
    rank 0 the reply. Returns the records and the barrier's epoch to carry on from."""
    mono, ptime = time.monotonic_ns, time.process_time_ns
    t_deq, t_worked, t_met = array("q"), array("q"), array("q")
    errors: list[str] = []
    expected = 0
    cpu0 = None
    n_reply = 0
    while True:
        m = recv()
        t = mono()
        if m[0] != STEP:
            break
        step = m[1][0]["step"]
        if step != expected and len(errors) < 10:
            errors.append(f"got step {step}, expected {expected}")
        expected = step + 1
        if step == warmup:
            cpu0 = ptime()
        work()
        tw = mono()
        epoch += 1
        barrier.wait(epoch)
        tm = mono()
        if step >= warmup:
            t_deq.append(t)
            t_worked.append(tw)
            t_met.append(tm)
        if reply is not None:
            reply({"step": step, "sampled_token_ids": [[7]] * len(m[1][0]["num_scheduled_tokens"])})
            n_reply += 1
    cpu1 = ptime()
    if m[0] != END_SUBRUN:
        errors.append(f"unexpected message {m[0]!r}")
    elif m[1][0] != expected:
        errors.append(f"engine sent {m[1][0]} steps, this rank got {expected}")
    return {"t_deq": t_deq.tobytes(), "t_worked": t_worked.tobytes(), "t_met": t_met.tobytes(),
            "cpu_ns": (cpu1 - cpu0) if cpu0 is not None else None, "errors": errors}, epoch
