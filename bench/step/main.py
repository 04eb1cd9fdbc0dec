"""``rdmaq bench step``: barrier amplification of a serving step, without a multi-GPU machine.

An engine process broadcasts one step message per step to TP rank processes through the queue
under test; each rank does a fixed amount of work (a timed spin with ``--device cpu``, a
calibrated matmul chain on the one GPU with ``--device cuda``), the ranks meet at a barrier
(everyone waits for the slowest, as NCCL's all-reduce makes them), rank 0 replies on a response
queue of the same kind, and the engine starts the next step when the reply is in (decode).
Reported per queue, TP and setting: step time, throughput, the slowest reader's broadcast delay
per step, per rank how often it was the last and the step's share spent waiting for it, and
the CPU seconds the engine and the ranks spent per 1000 steps (proc.py, report.py).

A cell is one queue at one TP: its processes stay up for all its sub-runs (settings x runs,
the settings alternating run by run); the CPU hogs of a setting run only during its sub-runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time

from rdmaq.command import ArgumentParser, fail, missing_package, quiet_spawn_context

from ..common import attackers, machine
from ..common.args import parse_int_list
from ..common.children import CellError, Peer, expect
from ..common.queues import ADAPTERS, BASELINES, make_adapter, parse_queue, private_rpc_dir, split_usable
from . import proc as step_proc

PROG = "rdmaq bench step"
SCHEMA = "rdmaq-bench-step/1"
DEFAULT_QUEUES = "rdmaq-shm,vllm,vllm-spinloop"
# name -> (hogs run, their scheduling class)
SETTINGS = {"idle": (False, "normal"), "hogs": (True, "normal"), "hogs-schedidle": (True, "idle")}
HOG_SETTLE_S = 0.3  # hogs spawned and spinning before the sub-run starts
SUBRUN_OVERHEAD_S = 1.0  # hogs started and stopped, results sent and read
MIN_CAP_S = 0.5  # a sub-run shorter than this is left out
SETUP_GUESS_S = {"cpu": 10.0, "cuda": 30.0}  # a cell's start and stop, before one is measured


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog=PROG, description=(
        "Barrier amplification of a TP serving step on one machine: an engine broadcasts each step "
        "to TP rank processes through the queue under test, the ranks work, meet at a barrier, and "
        "rank 0 replies. Per queue, TP and setting: step time, the slowest reader's broadcast delay, "
        "per rank how often it was the last and the step share spent waiting for it, CPU per 1000 steps."))
    p.add_argument("--tp", default="4,8", help="TP sizes (rank processes), e.g. 2,4,8 (default %(default)s)")
    p.add_argument("--queues", default=DEFAULT_QUEUES,
                   help=f"comma list from {', '.join(ADAPTERS)}, QUEUE@NAME=VALUE for a variant "
                        "(default %(default)s; unavailable ones are skipped with a message)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="the step's work: cpu = a timed spin, cuda = matmuls on the GPU, calibrated "
                        "to --work-us once per cell (default %(default)s)")
    p.add_argument("--work-us", type=float, default=1000.0,
                   help="work per rank per step, µs (default %(default)s)")
    p.add_argument("--steps", type=int, default=2000, help="measured steps per sub-run (default %(default)s)")
    p.add_argument("--warmup", type=int, default=50, help="steps before the measured ones (default %(default)s)")
    p.add_argument("--runs", type=int, default=3, help="sub-runs per setting and cell (default %(default)s)")
    p.add_argument("--settings", default="idle,hogs",
                   help=f"comma list from {', '.join(SETTINGS)} (default %(default)s)")
    p.add_argument("--hogs", type=int, default=None,
                   help="CPU hogs in the hogs settings (default: one per CPU the run may use)")
    p.add_argument("--server-cpus", type=int, default=None, metavar="K",
                   help="confine engine, ranks and hogs to the first K allowed CPUs (default: all)")
    p.add_argument("--step-gap-us", type=float, default=0.0,
                   help="the engine's pause between a reply and the next step, µs (default 0: decode)")
    p.add_argument("--msg-bytes", default="4K", help="block-table bytes in each step message (default %(default)s)")
    p.add_argument("--reqs", type=int, default=64,
                   help="running requests in each step message (default %(default)s)")
    p.add_argument("--barrier", choices=("spin", "block"), default="spin",
                   help="spin: ranks poll shared memory, yielding after 50 µs (as a CUDA synchronize "
                        "and NCCL do); block: multiprocessing.Barrier (default %(default)s)")
    p.add_argument("--time-cap", type=float, default=30.0,
                   help="a sub-run stops after this many seconds (default %(default)s)")
    p.add_argument("--deadline", type=float, default=None,
                   help="seconds for the whole run: sub-runs are shortened to fit and those that "
                        "cannot fit are left out (default: none)")
    p.add_argument("--json", metavar="FILE", help="write every figure and the machine description here")
    p.add_argument("--markdown", metavar="FILE", help="also write the tables as Markdown here")
    p.add_argument("--label", default=None, help="machine label recorded in the JSON and tables")
    return p


def check_args(parser, args) -> tuple[list[int], list[str], list[str], list[int] | None]:
    """(tps, queues, settings, cpus); a bad argument ends the command with one line, status 2."""
    try:
        tps = parse_int_list(args.tp, "tp", 1)
    except argparse.ArgumentTypeError as e:
        parser.error(str(e))
    queues = [q.strip() for q in args.queues.split(",") if q.strip()]
    if not queues:
        parser.error("--queues: give at least one")
    for q in queues:
        try:
            parse_queue(q)
        except ValueError as e:
            parser.error(str(e))
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    if not settings:
        parser.error("--settings: give at least one")
    for s in settings:
        if s not in SETTINGS:
            parser.error(f"unknown setting {s!r}; choose from {', '.join(SETTINGS)}")
    for flag, v, low in (("--steps", args.steps, 1), ("--warmup", args.warmup, 0), ("--runs", args.runs, 1),
                         ("--reqs", args.reqs, 0)):
        if v < low:
            parser.error(f"{flag} must be >= {low}, got {v}")
    if args.hogs is not None and args.hogs < 0:
        parser.error(f"--hogs must be >= 0, got {args.hogs}")
    if not args.work_us >= 0 or not args.step_gap_us >= 0:
        parser.error("--work-us and --step-gap-us must be >= 0")
    if not args.time_cap > 0 or (args.deadline is not None and not args.deadline > 0):
        parser.error("--time-cap and --deadline must be > 0")
    try:
        from rdmaq.command import parse_size

        args.msg_pad = parse_size(args.msg_bytes)
    except argparse.ArgumentTypeError as e:
        parser.error(f"--msg-bytes: {e}")
    allowed = sorted(os.sched_getaffinity(0))
    cpus = None
    if args.server_cpus is not None:
        if not 1 <= args.server_cpus <= len(allowed):
            parser.error(f"--server-cpus must be 1..{len(allowed)} (the CPUs this process may use), "
                         f"got {args.server_cpus}")
        cpus = allowed[:args.server_cpus]
    for flag, path in (("--json", args.json), ("--markdown", args.markdown)):
        if path:
            d = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(d) or not os.access(d, os.W_OK):
                parser.error(f"{flag} {path}: directory {d} does not exist or is not writable")
    return tps, queues, settings, cpus


def cuda_unavailable() -> str | None:
    """Why --device cuda cannot run here (one line), or None. Imports torch: only for cuda."""
    if importlib.util.find_spec("torch") is None:
        return "--device cuda needs torch (with CUDA), which is not installed; use --device cpu"
    import torch

    if not torch.cuda.is_available():
        return (f"--device cuda: CUDA is not available here (torch {torch.__version__}, "
                f"{'built without CUDA' if torch.version.cuda is None else 'no GPU visible'}); "
                "use --device cpu")
    return None


class Budget:
    """How long a sub-run may take so that the rest fits in --deadline."""

    def __init__(self, deadline_s, time_cap_s, setup_guess_s):
        self.t0 = time.monotonic()
        self.deadline_s, self.time_cap_s = deadline_s, time_cap_s
        self.setup_guess_s = setup_guess_s
        self.setups: list[float] = []  # each cell's start + stop, seconds

    @property
    def setup_s(self) -> float:
        """What a cell's start and stop take: the longest seen, or the guess before any."""
        return max(self.setups) if self.setups else self.setup_guess_s

    def cap(self, subruns_left: int, cells_left_after: int) -> float | None:
        """Time cap of the next sub-run, or None when no useful one fits: an equal share of
        what is left for every sub-run left, this cell's and the later cells'."""
        if self.deadline_s is None:
            return self.time_cap_s
        left = self.deadline_s - (time.monotonic() - self.t0) - cells_left_after * self.setup_s
        cap = left / subruns_left - HOG_SETTLE_S - SUBRUN_OVERHEAD_S
        return min(self.time_cap_s, cap) if cap >= MIN_CAP_S else None


def _start_hogs(ctx, setting, n, cpus) -> list:
    run, policy = SETTINGS[setting]
    hogs = []
    if run:
        for _ in range(n):
            h = ctx.Process(target=attackers.hog_main, args=(cpus, policy), daemon=True)
            h.start()
            hogs.append(h)
        time.sleep(HOG_SETTLE_S)
    return hogs


def _stop(procs) -> None:
    for c in procs:
        if c.pid is not None and c.is_alive():
            c.terminate()
    for c in procs:
        if c.pid is None:
            continue
        c.join(5)
        if c.is_alive():
            c.kill()
            c.join(5)


def _other_errors(peers, wait_s=1.0) -> list[str]:
    """The errors the other processes reported, within ``wait_s``, after a first one."""
    out = []
    deadline = time.monotonic() + wait_s
    for p in peers:
        try:
            while p.conn.poll(max(0.0, deadline - time.monotonic())):
                msg = p.conn.recv()
                if msg[0] == "error":
                    out.append(f"{p.name} failed: {msg[1].strip().splitlines()[-1]}")
                    break
        except (EOFError, OSError):
            continue
    return out


def run_cell(queue, tp, args, cpus, order, n_hogs, budget, cells_left_after, progress):
    """One queue at one TP: start engine and ranks, run ``order`` [(setting, run)], stop.
    Returns (cell dict for the JSON, [(setting, run, raw records)] for pooling)."""
    from .report import subrun_figures

    ctx = quiet_spawn_context()
    adapter = make_adapter(queue)
    cell = {"queue": queue, "tp": tp, "subruns": [], "calibration": None, "error": None,
            "skipped_subruns": 0}
    raws = []
    peers, hogs = [], []
    t_start = time.monotonic()
    rpc_dir = private_rpc_dir(adapter)
    try:
        barrier = ctx.RawArray("q", tp) if args.barrier == "spin" else ctx.Barrier(tp)
        a, b = ctx.Pipe()
        engine = Peer("engine", ctx.Process(target=step_proc.engine_main, args=(b, adapter, tp, cpus),
                                             daemon=True), a)
        ranks = []
        for rank in range(tp):
            a, b = ctx.Pipe()
            ranks.append(Peer(f"rank {rank}", ctx.Process(
                target=step_proc.rank_main, args=(b, adapter, rank, tp, cpus, args.device, args.barrier, barrier),
                daemon=True), a))
        peers = [engine] + ranks
        for p in peers:
            p.process.start()
        got = expect(peers, "imported", 600)
        step_handle, resp_handle = got[0][2], got[1][2]
        cell["engine_cpus"] = got[0][3]  # where --server-cpus put it
        for r in ranks:
            r.conn.send(("handles", step_handle))
        engine.conn.send(("handles", resp_handle))
        expect(peers, "ready", 300)
        work = {"work_us": args.work_us, "matmuls": None}
        if args.device == "cuda":
            ranks[0].conn.send(("calibrate", int(args.work_us * 1000)))
            (_, cal), = expect([ranks[0]], "calibrated", 300)
            cell["calibration"] = cal
            work["matmuls"] = cal["matmuls"]
        cell["setup_s"] = time.monotonic() - t_start
        for k, (setting, run) in enumerate(order):
            cap = budget.cap(len(order) - k + cells_left_after * len(order), cells_left_after)
            if cap is None:
                cell["skipped_subruns"] = len(order) - k
                break
            sub = {"steps": args.steps, "warmup": args.warmup, "gap_ns": int(args.step_gap_us * 1000),
                   "n_reqs": args.reqs, "msg_pad": args.msg_pad, "time_cap_s": cap, **work}
            hogs = _start_hogs(ctx, setting, n_hogs, cpus)
            for r in ranks:
                r.conn.send(("run", sub))
            engine.conn.send(("run", sub))
            # all at once: a rank that dies leaves the engine waiting for its reply forever
            done = [m[1] for m in expect(peers, "done", cap + 300)]
            eres, rres = done[0], done[1:]
            _stop(hogs)
            hogs = []
            fig, raw = subrun_figures(eres, rres)
            cell["subruns"].append({"setting": setting, "run": run, "time_cap_s": cap, "figures": fig})
            raws.append((setting, run, raw))
            progress(cell, setting, run, fig, k, len(order))
        t_stop = time.monotonic()
        for r in ranks:
            r.conn.send(("exit",))
        engine.conn.send(("exit",))
        expect(peers, "bye", 60)
        for p in peers:
            p.process.join(30)
        budget.setups.append(cell["setup_s"] + time.monotonic() - t_stop)
    except CellError as e:
        # one failure takes its peers down (a queue's peer closed...): say what each reported
        cell["error"] = "\n".join([str(e)] + _other_errors(peers))
    except Exception as e:  # a harness bug must not lose the other cells' results
        import traceback

        cell["error"] = f"harness error: {e!r}\n{traceback.format_exc()}"
    finally:
        _stop(hogs + [p.process for p in peers])
        shutil.rmtree(rpc_dir, ignore_errors=True)
    cell["wall_s"] = time.monotonic() - t_start
    return cell, raws


def order_for(settings: list[str], runs: int) -> list[tuple[str, int]]:
    """The settings alternate run by run, so that drift meets each the same."""
    return [(s, k + 1) for k in range(runs) for s in settings]


def _progress(stream):
    def progress(cell, setting, run, fig, k, total):
        st, bs = fig.get("step_time") or {}, fig.get("bcast_slowest") or {}

        def us(d, key):
            return "-" if d.get(key) is None else f"{d[key]:.0f}"
        stream.write(f"  [{k + 1}/{total}] {cell['queue']} TP={cell['tp']} {setting} run {run}: "
                     f"{fig['steps']} steps, step p50 {us(st, 'p50_us')} p99 {us(st, 'p99_us')} us, "
                     f"slowest reader p50 {us(bs, 'p50_us')} p99 {us(bs, 'p99_us')} us, last "
                     f"{[r['last_count'] for r in fig['per_rank']]}"
                     + (f" ERRORS {fig['errors'][:2]}" if fig["errors"] else "") + "\n")
        stream.flush()
    return progress


def _write_json(path, result) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, path)


def groups_of(plan, settings, all_raws) -> list[dict]:
    """Per TP, setting and queue: the figures over all its runs' steps."""
    from .report import figures, pool

    out = []
    for (tp, q), raws in zip(plan, all_raws):
        for s in settings:
            mine = [raw for setting, _, raw in raws if setting == s]
            if mine:
                out.append({"tp": tp, "setting": s, "queue": q, "runs": len(mine), "figures": figures(pool(mine))})
    return out


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    tps, queues, settings, cpus = check_args(parser, args)
    if importlib.util.find_spec("numpy") is None:
        return fail(PROG, missing_package("numpy", "bench"))
    if args.device == "cuda":
        why = cuda_unavailable()
        if why:
            return fail(PROG, why)
    usable, skipped = split_usable(queues, PROG)
    if not usable:
        return fail(PROG, "no queue to measure")
    if any(parse_queue(q)[0] in BASELINES for q in queues) and not any(
            parse_queue(q)[0] in BASELINES for q in usable):
        print(f"{PROG}: WARNING: none of the vLLM queues asked for can run here: no comparison",
              file=sys.stderr)
    from .report import compute_ratios, format_markdown, format_tables

    n_cpus = len(cpus) if cpus else len(os.sched_getaffinity(0))
    n_hogs = args.hogs if args.hogs is not None else n_cpus
    order = order_for(settings, args.runs)
    plan = [(tp, q) for tp in tps for q in usable]
    result: dict = {
        "schema": SCHEMA,
        "argv": machine.recorded_argv(argv),
        "config": {"queues": usable, "tp": tps, "settings": settings, "runs": args.runs,
                   "steps": args.steps, "warmup": args.warmup, "device": args.device,
                   "work_us": args.work_us, "barrier": args.barrier, "hogs": n_hogs,
                   "cpus": cpus, "step_gap_us": args.step_gap_us, "msg_pad_bytes": args.msg_pad,
                   "reqs": args.reqs, "time_cap_s": args.time_cap, "deadline_s": args.deadline,
                   "env": {k: v for k, v in os.environ.items() if k.startswith("RDMAQ_")}},
        "machine": machine.describe(args.label),
        "skipped": skipped,
        "cells": [],
    }
    budget = Budget(args.deadline, args.time_cap, SETUP_GUESS_S[args.device])
    progress = _progress(sys.stderr)
    all_raws = []
    failed = 0
    for i, (tp, q) in enumerate(plan):
        print(f"{PROG}: cell {i + 1}/{len(plan)}: {q}, TP={tp}, {args.device} "
              f"({time.monotonic() - budget.t0:.0f} s so far)", file=sys.stderr, flush=True)
        cell, raws = run_cell(q, tp, args, cpus, order, n_hogs, budget, len(plan) - i - 1, progress)
        result["cells"].append(cell)
        all_raws.append(raws)
        if cell["error"]:
            failed += 1
            lines = cell["error"].strip().splitlines() or ["?"]
            print(f"{PROG}: cell failed: {lines[0]} {lines[-1] if len(lines) > 1 else ''}",
                  file=sys.stderr, flush=True)
        elif any(s["figures"]["errors"] for s in cell["subruns"]):
            failed += 1
        if args.json:  # what is measured so far, should a later cell take the run down
            _write_json(args.json, result)
    result["config"]["calibration"] = next((c["calibration"] for c in result["cells"] if c["calibration"]), None)
    result["skipped_subruns"] = sum(c["skipped_subruns"] for c in result["cells"])
    result["groups"] = groups_of(plan, settings, all_raws)
    for g in result["groups"]:
        g["errors"] = [e for c in result["cells"] if c["queue"] == g["queue"] and c["tp"] == g["tp"]
                       for s in c["subruns"] if s["setting"] == g["setting"] for e in s["figures"]["errors"]]
    result["ratios"] = compute_ratios(result["groups"])
    result["machine"]["loadavg_end"] = list(os.getloadavg())
    result["machine"]["time_end"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    result["elapsed_s"] = time.monotonic() - budget.t0
    if args.json:
        _write_json(args.json, result)
        print(f"# results written to {args.json}", file=sys.stderr)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(format_markdown(result))
    print(format_tables(result))
    if result["skipped_subruns"]:
        print(f"{PROG}: {result['skipped_subruns']} sub-run(s) left out: they would have ended past "
              f"--deadline {args.deadline:g} s", file=sys.stderr)
    if not result["groups"]:
        return fail(PROG, "nothing was measured")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
