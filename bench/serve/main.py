"""``rdmaq bench serve``: vLLM serving latency with each MessageQueue, idle and under CPU contention.

Starts one ``vllm serve`` per queue (``vllm``: vLLM's own, ``--distributed-ipc shm``;
``vllm-spinloop``: the same with its C spin loop, ``VLLM_USE_SPINLOOP_EXT=1``; ``rdmaq-shm``:
``--distributed-ipc rdmaq`` over shared memory; ``rdmaq-verbs``: over verbs). All stay up for the whole sweep, the
others idle while one is measured (vLLM's and rdmaq's readers stop spinning once no message
comes: each run records every server's CPU time, the idle ones' included). They are driven in
turn with vLLM's own client, ``vllm bench serve`` (random dataset, fixed seed, Poisson arrivals
at a fixed rate, bounded concurrency). Each contention setting (bench/serve/attack.py) starts
its attackers once, then alternates the queues run by run (bench/serve/plan.py). Per run it
keeps the client's raw JSON and records the server processes' CPU time over the client's main
run, and the queue's share of a step (bench/serve/steptime.py, bench/serve/steps.py). Servers stop
with SIGTERM, then SIGKILL after a grace period; what vLLM leaves in /dev/shm and its TMPDIR is
removed and reported.

Two kinds of machine: ``--device cpu`` (a CPU build of vLLM, TP=2, a tiny model) and ``--device
cuda`` (a CUDA build, TP = the GPUs, ``--distributed-executor-backend mp`` so the EngineCore talks
to its workers through the MessageQueue even at TP=1, a model of Llama 3.2 1B's shapes, CUDA
graphs for decode steps). The server's CPUs can be confined as a container's are
(``--server-cpus``, ``--server-quota``: bench/serve/confine.py); each run records the server's
CPU seconds per 1 000 output tokens. A sweep can be cut into parts that each end before a deadline
(``--deadline``, ``--keep-servers``, ``--resume``), the servers staying up in between.
"""

from __future__ import annotations

import importlib.util
import json
import signal
import sys
import time
from pathlib import Path

from rdmaq.command import fail, missing_package

from ..common.names import current_name
from ..common.output import check_plot_format
from .launch import make_model
from .options import EXIT_INCOMPLETE, PROG, SCHEMA, build_parser, check_args, find_vllm, resolve
from .plan import (
    order_for,  # noqa: F401  (the run order, tested through this module)
)
from .sweep import log_line, new_result, sweep


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.plot:
        if importlib.util.find_spec("matplotlib") is None:
            return fail(PROG, missing_package("matplotlib", "bench"))
        check_plot_format(parser, "--plot", args.plot)
    from .report import format_markdown, plot, with_current_names

    if args.report:
        with open(args.report) as f:
            result = json.load(f)
        if result.get("schema") != SCHEMA:
            parser.error(f"{args.report} is not a {SCHEMA} file")
        result = with_current_names(result)
        print(format_markdown(result))
        if args.plot:
            plot(result, args.plot)
        return 0
    if args.resume:
        if not args.out or not (Path(args.out) / "results.json").exists():
            parser.error("--resume needs --out DIR holding an earlier part's results.json")
        out = Path(args.out).resolve()
        result = json.loads((out / "results.json").read_text())
        if result.get("schema") != SCHEMA or "parts" not in result:
            parser.error(f"{out / 'results.json'} is not a {SCHEMA} sweep to resume")
        if any(current_name(q) != q for q in result["config"]["queues"]):
            parser.error(f"{out / 'results.json'} names its queues as before "
                         f"({', '.join(result['config']['queues'])}): start a new sweep")
        result.pop("error", None)
    else:
        resolve(args)
        queues, settings = check_args(parser, args)
    # after the arguments: a bad one is exit status 2 whatever is installed
    if importlib.util.find_spec("psutil") is None:
        return fail(PROG, missing_package("psutil", "bench"))
    if not args.resume:
        vllm = find_vllm(args.vllm)
        out = Path(args.out or time.strftime("serve-bench-%Y%m%d-%H%M%S")).resolve()
        out.mkdir(parents=True, exist_ok=True)
        model = (Path(args.model).resolve() if args.model
                 else make_model(out, args.model_shape, args.device))
        result = new_result(args, vllm, model, queues, settings)
    # a SIGTERM to the harness stops the servers and attackers the same way as Ctrl-C
    signal.signal(signal.SIGTERM, _raise_interrupt)
    result = sweep(args, result, out)
    text = format_markdown(result)
    (out / "summary.md").write_text(text + "\n")
    print(text)
    plot_path = args.plot or str(out / "serve.png")
    try:
        plot(result, plot_path)
        log_line(f"plot written to {plot_path}")
    except ImportError:
        log_line("matplotlib not installed: no plot (pip install matplotlib, then --report)")
    except ValueError as e:
        log_line(f"no plot: {e}")
    log_line(f"results in {out} ({result['elapsed_s']:.0f} s)")
    if result["failed_runs"] or result.get("error"):
        return 1
    return 0 if result["complete"] else EXIT_INCOMPLETE


if __name__ == "__main__":
    sys.exit(main())
