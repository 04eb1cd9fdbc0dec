"""One client run of ``rdmaq bench serve``: ``vllm bench serve``'s command and figures, the
servers' CPU time over it, the queue's share of a step (StepTimer) and rdmaq's counters."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from .client import BenchClient
from .plan import (
    order_for,  # noqa: F401  (the run order, tested through this module)
)
from .server import VllmServer

MAIN_LINE = "Starting main benchmark run"


RESULT_LINE = "Serving Benchmark Result"


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


def rdmaq_stats(stats_dir: Path) -> list[dict]:
    out = []
    for p in sorted(stats_dir.glob("*.json")):
        try:
            s = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        out.append({k: s.get(k) for k in ("title", "role", "pid", "messages", "bytes", "transport",
                                          "n_reader", "ring", "final")})
    return out


def client_env(tmpdir: str) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", TMPDIR=tmpdir)
    for k in ("RDMAQ_BENCH_STEPTIME_DIR", "RDMAQ_VLLM_STATS_DIR", "RDMAQ_DISTRIBUTED_IPC",
              "VLLM_DISTRIBUTED_IPC", "VLLM_USE_SPINLOOP_EXT"):
        env.pop(k, None)
    return env
