"""``rdmaq bench serve``'s servers: the model, the ``vllm serve`` command and environment of
each contender, warming a server up, and whether vLLM's spin loop loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from .options import IPC, queue_env
from .plan import base_queue
from .server import ServerError, VllmServer

SPINLOOP_FAILED = "spinloop extension could not be loaded"  # vLLM's warning when it falls back


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
              "RDMAQ_BENCH_STEPTIME_DIR", "TOKENIZERS_PARALLELISM", "VLLM_USE_SPINLOOP_EXT",
              "RDMAQ_VLLM_TRANSPORT"):
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


def serve_command(cfg: dict, queue: str = "rdmaq-shm") -> list[str]:
    """`vllm serve` arguments (after `serve`) of one of the sweep's servers, without host/port."""
    return [cfg["model"], "-tp", str(cfg["tp"]), "--distributed-ipc", IPC[base_queue(queue)],
            *server_args(cfg), "--max-model-len", str(cfg["max_model_len"])]


def describe_gpus() -> list[str]:
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        return [line.strip() for line in r.stdout.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError):
        return []
