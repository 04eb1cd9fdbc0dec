"""``rdmaq bench`` (the microbenchmark): dequeue latency of rdmaq and vLLM's MessageQueue, same
harness, same run."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import sys
import time

from rdmaq.command import ArgumentParser, fail, missing_package, parse_size
from rdmaq.vllm import SUPPORTED_VLLM

from ..common import machine
from ..common.args import parse_cpus, parse_int_list, parse_pace
from ..common.output import check_plot_format
from ..common.output import write_json as _write_json
from ..common.queues import ADAPTERS, BASELINES, parse_queue, split_usable
from .report import VLLM_SPIN_AFTER_LAST_S

DEFAULT_QUEUES = "rdmaq-shm,rdmaq-verbs,vllm,vllm-spinloop"
SCHEMA = "rdmaq-bench/1"

PROG = "rdmaq bench"


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=PROG,
        formatter_class=argparse.HelpFormatter,  # the help texts name their defaults
        description="One writer and N reader processes per queue (rdmaq shm, rdmaq verbs, vLLM's "
                    "MessageQueue), same harness: one-way latency (max over readers), throughput, "
                    "CPU time busy and idle, with optional CPU contention. "
                    "`rdmaq bench serve --help`: vLLM serving latency with each queue; "
                    "`rdmaq bench step --help`: barrier amplification of a TP serving step; "
                    "`rdmaq bench sweep --help`: idle p99 against reader CPU from a run's variants; "
                    "`rdmaq bench compare --help`: this checkout against another commit, interleaved.")
    p.add_argument("--queues", default=DEFAULT_QUEUES,
                   help=f"comma list from {', '.join(ADAPTERS)} (default: %(default)s; "
                        "unavailable ones are skipped with a message); QUEUE@NAME=VALUE[@...] runs a "
                        "variant with those environment variables in its processes, e.g. "
                        "rdmaq-shm@RDMAQ_RESTORE_SLICE=1")
    p.add_argument("--readers", default="4,8", help="reader counts, e.g. 1,2,4,8 (default %(default)s)")
    p.add_argument("--sizes", default="64,2K,40K,1M", help="payload sizes (default %(default)s)")
    p.add_argument("--pace", default="0,1ms,10ms",
                   help="writer pace: 0 = back to back, else the gap between sends "
                        "(default %(default)s)")
    p.add_argument("--messages", type=int, default=None,
                   help="measured messages per sub-run (default: 5000 back to back; paced: "
                        "--duration / pace, 200..5000)")
    p.add_argument("--duration", type=float, default=2.5,
                   help="target measured seconds of a paced sub-run (default %(default)s)")
    p.add_argument("--warmup", type=int, default=None,
                   help="warm-up messages, excluded (default 200 back to back, 20 paced)")
    p.add_argument("--time-cap", type=float, default=10.0,
                   help="the writer stops a sub-run after this many seconds (default %(default)s)")
    p.add_argument("--cpus", default="all",
                   help="cpuset for writer, readers and attackers, e.g. 0-3 (default: all allowed)")
    p.add_argument("--attackers", default="0", help="CPU-hog counts, e.g. 0,2 (default %(default)s)")
    p.add_argument("--tokenizer-attacker", action="store_true",
                   help="add one HF tokenizers batch-encoding process (its thread pool) to each cell")
    p.add_argument("--attacker-policy", choices=("normal", "idle"), default="normal",
                   help="scheduling class of the attackers: normal (SCHED_OTHER) or idle (SCHED_IDLE, "
                        "as `rdmaq doctor` advises for CPU-heavy neighbours) (default %(default)s)")
    p.add_argument("--stages", action="store_true",
                   help="also record rdmaq's per-stage timestamps (serialize, copy, publish, wake, "
                        "copy out, deserialize) and report their medians")
    p.add_argument("--sched-trace", metavar="DIR",
                   help="root only: trace the scheduler (tracefs sched_waking/wakeup/switch/migrate_task, "
                        "all CPUs) during every sub-run and explain the slowest 1%% of messages from it; "
                        "summaries go to stderr and DIR/schedtrace.txt, raw excerpts to DIR/excerpts.txt")
    p.add_argument("--sched-trace-kb", type=int, default=None, metavar="KB",
                   help="trace buffer per CPU (default 4096)")
    p.add_argument("--idle-window", type=float, default=3.0,
                   help="seconds of the idle CPU measurement per cell, reported in halves; vLLM's "
                        f"readers spin for {VLLM_SPIN_AFTER_LAST_S:g} s after their last message "
                        "(its SpinCondition's busy_loop_s), then block: only a window of at least "
                        f"{2 * VLLM_SPIN_AFTER_LAST_S:g} s has a second half past that spin "
                        "(default %(default)s, also with --quick)")
    p.add_argument("--json", metavar="FILE", help="write every figure and the machine description here")
    p.add_argument("--plot", metavar="FILE.png", help="latency CDFs and p99 vs attackers (matplotlib)")
    p.add_argument("--plot-size", default=None, help="payload size for the plot (default 2K or first)")
    p.add_argument("--plot-pace", default=None, help="pace for the plot (default: first non-zero)")
    p.add_argument("--label", default=None, help="machine label recorded in the JSON and titles")
    p.add_argument("--quick", action="store_true",
                   help="short run, idle and contended: readers 2, attackers 0 and one CPU hog per "
                        "allowed CPU, sizes 64,40K, every 1 ms, 300 messages, the full idle window "
                        "(explicit options still win); ends with a verdict per setting: which queue "
                        "won, by how much, and the bootstrap interval of the p50 and p99 ratios")
    p.add_argument("--markdown", action="store_true",
                   help="print Markdown tables (each queue beside vLLM) instead of the text table")
    p.add_argument("--from-json", metavar="FILE",
                   help="do not run: print the tables (and --plot) of an earlier --json file")
    return p


def quick_plan(args, argv, readers, sizes, paces, attackers):
    """--quick's cells, where the command line does not name them: 2 readers, 64 B and 40 KiB,
    every 1 ms (a decode step's rhythm, where back to back is none), idle and with one CPU hog
    per allowed CPU."""
    if not _explicit(argv, "--readers"):
        readers = [2]
    if not _explicit(argv, "--sizes"):
        sizes = [64, 40 * 1024]
    if not _explicit(argv, "--pace"):
        paces = [1_000_000]
    if not _explicit(argv, "--time-cap"):
        args.time_cap = 3.0
    if not _explicit(argv, "--attackers"):
        attackers = [0, len(os.sched_getaffinity(0))]
    return readers, sizes, paces, attackers


def quick_verdict(samples: dict, queues: list[str], readers: list[int], attackers: list[int]) -> list[str]:
    """bench/micro/verdict.py's line per reader count and setting: rdmaq-shm against the better
    of vLLM's queues."""
    from ..common.names import base_name
    from .verdict import verdicts

    baselines = [q for q in queues if base_name(q) in ("vllm", "vllm-spinloop")]
    lines = []
    for rd in readers:
        settings = {att: (f"idle ({rd} readers)" if att == 0 else f"contended ({rd} readers, {att} CPU hogs)")
                    for att in attackers}
        by_queue = {(q, att): samples[(q, r, att)] for (q, r, att) in samples if r == rd}
        lines += verdicts(by_queue, "rdmaq-shm", baselines, settings)
    return lines


def _explicit(argv, flag):
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def make_subruns(sizes, paces, args) -> list[dict]:
    subs = []
    for size in sizes:
        for pace in paces:
            if args.messages is not None:
                n = args.messages
            elif pace == 0:
                n = 5000
            else:
                n = max(200, min(5000, int(args.duration * 1e9 / pace)))
            warm = args.warmup if args.warmup is not None else (200 if pace == 0 else 20)
            if args.quick and args.messages is None:
                n = 300
            if args.quick and args.warmup is None:
                warm = 20
            subs.append({"size": size, "pace_ns": pace, "n": n, "warmup": warm,
                         "time_cap_s": args.time_cap, "stages": bool(args.stages)})
    return subs


def _progress_factory(stream, trace_dir=None):
    from .report import pace_label, size_label

    def progress(cell, s, k, total):
        lm = s["latency_max_over_readers"] or {}
        p50, p99 = lm.get("p50_us"), lm.get("p99_us")
        head = (f"[{k + 1}/{total}] {cell['queue']} rd={cell['readers']} att={cell['attackers']} "
                f"{size_label(s['size'])} {pace_label(s['pace_ns'])}")
        stream.write(
            f"  {head}: n={s['measured']} "
            f"p50={'-' if p50 is None else f'{p50:.1f}'}us p99={'-' if p99 is None else f'{p99:.1f}'}us"
            + (f" ERRORS {s['errors'][:2]}" if s["errors"] else "") + "\n")
        st = s.get("sched_trace")
        if st is not None and trace_dir:
            # the raw excerpts go to their own file; the JSON keeps the summary
            with open(os.path.join(trace_dir, "excerpts.txt"), "a") as f:
                f.write(f"=== {head}\n" + "\n".join(st.pop("excerpts", [])) + "\n")
            text = f"=== {head}: p50 {p50 and round(p50)} p99 {p99 and round(p99)} us\n{st['text']}\n"
            with open(os.path.join(trace_dir, "schedtrace.txt"), "a") as f:
                f.write(text)
            stream.write(text)
        stream.flush()
    return progress


def finish(result, args) -> None:
    from .report import format_markdown, format_tables

    print(format_markdown(result) if args.markdown else format_tables(result), file=sys.stdout)
    if args.plot:
        from .plot import plot

        plot(result, args.plot,
             size=parse_size(args.plot_size) if args.plot_size else None,
             pace_ns=parse_pace(args.plot_pace) if args.plot_pace else None)
        print(f"# plot written to {args.plot}", file=sys.stderr)


def _missing_packages(args) -> list[str]:
    """Packages this run needs that are not installed (all are in the [bench] extra)."""
    needs = [] if args.from_json else ["numpy"]  # the statistics; the runs need rdmaq only
    if args.plot:
        needs.append("matplotlib")
    if args.tokenizer_attacker:
        needs.append("tokenizers")
    return [m for m in needs if importlib.util.find_spec(m) is None]


def _check_output_path(parser, flag, path) -> None:
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d) or not os.access(d, os.W_OK):
        parser.error(f"{flag} {path}: directory {d} does not exist or is not writable")


NO_COMPARISON = ("WARNING: no comparison with vLLM's MessageQueue, the point of this benchmark: "
                 "none of the vLLM queues asked for can run here (why: above), so rdmaq is measured "
                 "alone. Install vLLM beside rdmaq: `rdmaq vllm install-cpu` (a CPU build of vLLM "
                 f"0.32), or vLLM {'/'.join(SUPPORTED_VLLM)} (docs/vllm.md); or leave them out with "
                 "--queues")


def compares_nothing(queues, usable) -> bool:
    """vLLM's queue was asked for (in any variant) and none of its variants can run."""
    def baseline(q):
        return parse_queue(q)[0] in BASELINES
    return any(map(baseline, queues)) and not any(map(baseline, usable))


def one_line(error: str) -> str:
    """A cell's error for the terminal: its first and last lines (what failed, and why)."""
    lines = [ln.strip() for ln in error.strip().splitlines() if ln.strip()] or ["?"]
    return lines[0] if len(lines) == 1 else f"{lines[0]} {lines[-1]}"


@contextlib.contextmanager
def _sched_tracer(args):
    """The tracefs instance for --sched-trace (None without it), removed however the run ends:
    SIGTERM and SIGHUP become SystemExit here so that the removal runs."""
    if not args.sched_trace:
        yield None
        return
    from .schedtrace import DEFAULT_BUFFER_KB, Tracer

    def leave(signum, _frame):
        raise SystemExit(128 + signum)
    old = {sig: signal.signal(sig, leave) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with Tracer(args.sched_trace_kb or DEFAULT_BUFFER_KB) as tracer:
            yield tracer
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        readers = parse_int_list(args.readers, "readers", 1)
        sizes = [parse_size(x) for x in args.sizes.split(",") if x.strip()]
        paces = [parse_pace(x) for x in args.pace.split(",") if x.strip()]
        attackers = parse_int_list(args.attackers, "attackers", 0)
        cpus = parse_cpus(args.cpus)
        if args.plot_size:
            parse_size(args.plot_size)
        if args.plot_pace:
            parse_pace(args.plot_pace)
    except argparse.ArgumentTypeError as e:
        parser.error(str(e))
    queues = [q.strip() for q in args.queues.split(",") if q.strip()]
    for q in queues:
        try:
            parse_queue(q)
        except ValueError as e:
            parser.error(str(e))
    if args.sched_trace_kb is not None and args.sched_trace_kb < 64:
        parser.error("--sched-trace-kb must be >= 64")
    if args.messages is not None and args.messages < 1:
        parser.error("--messages must be >= 1")
    if args.warmup is not None and args.warmup < 0:
        parser.error("--warmup must be >= 0")
    if args.idle_window < 0 or args.time_cap <= 0 or args.duration <= 0:
        parser.error("--idle-window must be >= 0, --time-cap and --duration > 0")
    for flag, path in (("--json", args.json), ("--plot", args.plot)):
        if path:
            _check_output_path(parser, flag, path)
    if args.sched_trace and not args.from_json:
        from .schedtrace import unavailable

        why = unavailable()
        if why:
            parser.error(f"--sched-trace: {why}")
        os.makedirs(args.sched_trace, exist_ok=True)
        _check_output_path(parser, "--sched-trace", os.path.join(args.sched_trace, "x"))
    missing = _missing_packages(args)
    if missing:
        return fail(PROG, missing_package(missing[0], "bench"))
    if args.plot:
        check_plot_format(parser, "--plot", args.plot)

    if args.from_json:
        try:
            with open(args.from_json) as f:
                result = json.load(f)
        except OSError as e:
            parser.error(f"--from-json: cannot read {args.from_json}: {e.strerror}")
        except ValueError as e:
            parser.error(f"--from-json: {args.from_json} is not JSON: {e}")
        if not isinstance(result, dict) or result.get("schema") != SCHEMA:
            parser.error(f"--from-json: {args.from_json} is not a {SCHEMA} file")
        from .report import compute_ratios, evaluate_targets

        # recompute, so that a newer report module reads older files the same way
        result["ratios"] = compute_ratios(result["cells"])
        result["targets"] = evaluate_targets(result)
        finish(result, args)
        return 0

    if args.quick:
        readers, sizes, paces, attackers = quick_plan(args, argv, readers, sizes, paces, attackers)

    from ..common.stats import CDF_Q
    from .report import compute_ratios, evaluate_targets
    from .runner import run_cell

    usable, skipped = split_usable(queues, PROG)
    alone = compares_nothing(queues, usable)
    if alone:
        print(f"{PROG}: {NO_COMPARISON}", file=sys.stderr)
    if not usable:
        return fail(PROG, "no queue to measure")

    subruns = make_subruns(sizes, paces, args)
    result = {
        "schema": SCHEMA,
        "argv": machine.recorded_argv(argv),
        "config": {"queues": usable, "readers": readers, "sizes": sizes, "paces_ns": paces,
                   "attackers": attackers, "cpus": cpus, "tokenizer_attacker": args.tokenizer_attacker,
                   "attacker_policy": args.attacker_policy,
                   "idle_window_s": args.idle_window, "subruns": subruns, "quick": args.quick,
                   # rdmaq's waiting knobs as the children saw them (unset: the defaults)
                   "env": {k: v for k, v in os.environ.items() if k.startswith("RDMAQ_")}},
        "machine": machine.describe(args.label),
        "skipped": skipped,
        "cdf_q": CDF_Q,
        "cells": [],
    }
    progress = _progress_factory(sys.stderr, args.sched_trace)
    plan = [(rd, att, q) for rd in readers for att in attackers for q in usable]
    failed = 0
    samples = {}  # (queue, readers, attackers) -> per-sub-run latencies, for the verdict
    t0 = time.monotonic()
    with _sched_tracer(args) as tracer:
        for i, (rd, att, q) in enumerate(plan):
            print(f"rdmaq bench: cell {i + 1}/{len(plan)}: {q}, {rd} readers, cpus {args.cpus}, "
                  f"{att} {args.attacker_policy} attackers"
                  f"{', tokenizer attacker' if args.tokenizer_attacker else ''} "
                  f"({time.monotonic() - t0:.0f} s so far)", file=sys.stderr, flush=True)
            cell, raw = run_cell(q, rd, cpus, att, args.tokenizer_attacker, subruns, args.idle_window,
                                 progress, attacker_policy=args.attacker_policy, tracer=tracer)
            samples[(q, rd, att)] = raw
            result["cells"].append(cell)
            if args.json:  # keep what is measured so far, should a later cell take the run down
                _write_json(args.json, result)
            if cell["error"] and not cell["subruns"]:
                # nothing measured: the queue could not be set up here (a full /dev/shm, ...),
                # and every later cell would fail the same way
                return fail(PROG, f"{q} with {rd} readers: {one_line(cell['error'])}")
            if cell["error"]:
                failed += 1
                print(f"{PROG}: cell failed: {one_line(cell['error'])}", file=sys.stderr, flush=True)
            elif any(s["errors"] for s in cell["subruns"]):
                failed += 1
    result["machine"]["loadavg_end"] = list(os.getloadavg())
    result["machine"]["time_end"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    result["elapsed_s"] = time.monotonic() - t0
    result["ratios"] = compute_ratios(result["cells"])
    result["targets"] = evaluate_targets(result)
    if args.quick:
        result["verdict"] = quick_verdict(samples, usable, readers, attackers)
    if args.json:
        _write_json(args.json, result)
        print(f"# results written to {args.json}", file=sys.stderr)
    finish(result, args)
    for text in result.get("verdict", []):
        print(text)
    if any(": none (" not in line for line in result.get("verdict", [])):  # a verdict compared
        v = {k: result["machine"]["versions"].get(k) or "of unknown version" for k in ("rdmaq", "vllm")}
        print(f"(rdmaq {v['rdmaq']} against vLLM {v['vllm']}: each sub-run against the better of its plain "
              "and spin-loop readers)")
    if alone:  # again where it is seen: under the table
        print(f"{PROG}: {NO_COMPARISON}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
