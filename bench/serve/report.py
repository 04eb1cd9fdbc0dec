"""Tables and plot of an ``rdmaq bench serve`` result: medians over runs, spread, and rdmaq
over the best of vLLM's queues (vllm, and vllm-spinloop, with its spin-loop extension, where it
ran)."""

from __future__ import annotations

import statistics

from ..common.names import current_name, is_rdmaq
from .confine import Confinement
from .plan import base_queue

# (key in a run's metrics or the run record, column title, format)
COLUMNS = [
    ("tpot_p50_ms", "TPOT p50 ms", "{:.2f}"),
    ("tpot_p99_ms", "TPOT p99 ms", "{:.2f}"),
    ("itl_p50_ms", "ITL p50 ms", "{:.2f}"),
    ("itl_p99_ms", "ITL p99 ms", "{:.1f}"),
    ("ttft_p50_ms", "TTFT p50 ms", "{:.1f}"),
    ("e2el_p50_ms", "E2E p50 ms", "{:.0f}"),
    ("output_tok_s", "out tok/s", "{:.0f}"),
    ("worker_cpu_s", "worker CPU s", "{:.1f}"),
    ("queue_share", "queue share", "{:.1%}"),
    ("server_cpu_s_per_1k_tok", "server CPU s per 1k tok", "{:.2f}"),
    ("reader_cpu_ms_per_1k_tok", "reader CPU ms per 1k tok", "{:.1f}"),
]
# lower is better for all but throughput; the ratio is rdmaq ÷ the baseline either way
HIGHER_IS_BETTER = {"output_tok_s"}
BASELINES = ("vllm", "vllm-spinloop")  # vLLM's own queue, plain and with its C spin loop
MIN_DENOMINATOR = 0.01
RATIO_KEYS = ["tpot_p50_ms", "tpot_p99_ms", "itl_p50_ms", "itl_p99_ms", "ttft_p50_ms",
              "e2el_p50_ms", "output_tok_s", "worker_cpu_s", "server_cpu_s_per_1k_tok",
              "reader_cpu_ms_per_1k_tok"]




def with_current_names(result: dict) -> dict:
    """A result file of any version, its queues under today's names (a copy: the file's
    own record is left as it was written)."""
    out = dict(result)
    out["config"] = dict(result["config"], queues=[current_name(q) for q in result["config"]["queues"]])
    out["servers"] = {current_name(q): v for q, v in result.get("servers", {}).items()}
    out["runs"] = []
    for run in result.get("runs", []):
        run = dict(run, queue=current_name(run["queue"]))
        if isinstance(run.get("server_cpu_s"), dict):
            run["server_cpu_s"] = {current_name(q): v for q, v in run["server_cpu_s"].items()}
        out["runs"].append(run)
    return out


def run_value(run: dict, key: str):
    if key in run.get("metrics", {}):
        return run["metrics"][key]
    if key == "queue_share":
        qt = run.get("queue_timing") or {}
        # asynchronous scheduling (GPU) pairs no broadcast with its responses: per step instead
        if run.get("device", "cpu") == "cuda" or "queue_share" not in qt:
            return qt.get("queue_share_of_steps")
        return qt.get("queue_share")
    if key in ("broadcast_delay_p50_us", "broadcast_delay_p99_us"):
        d = (run.get("queue_timing") or {}).get("broadcast_delay_us") or {}
        return d.get("p50" if "p50" in key else "p99")
    if key == "rpc_round_trip_p50_ms":
        return ((run.get("queue_timing") or {}).get("rpc_round_trip_ms") or {}).get("p50")
    if key in WAIT_KEYS:
        return wait_value(run.get("queue_timing") or {}, key)
    if key == "reader_cpu_ms_per_1k_tok":
        return reader_cpu_per_tokens(run)
    return run.get(key)


READERS = ("broadcast reader", "response reader")


def reader_cpu_per_tokens(run: dict) -> float | None:
    """CPU ms of the threads that read the queue (the workers' broadcast readers, the
    EngineCore's response reader: bench/serve/steps.py's per-thread data) per 1 000 output
    tokens; None without step timing."""
    threads = (run.get("queue_timing") or {}).get("threads")
    tokens = run.get("output_tokens")
    rows = [t for t in threads or [] if any(u in READERS for u in t.get("uses", []))]
    if not rows or not tokens:
        return None
    return 1000 * sum(t.get("cpu_ms", 0.0) for t in rows) / tokens


# Who waited where (bench/serve/steps.py): the thread that used an endpoint, by its use
THREAD_OF = {"worker": "broadcast reader", "ec": "response reader", "out": "response writer"}
WAIT_KEYS = (["bc_waited_share", "resp_waited_share"]
             + [f"{t}_{f}_us_per_step" for t in THREAD_OF for f in ("cpu", "runq")]
             + [f"{e}_{c}_share" for e in ("bc", "resp") for c in ("woken", "spins", "busy")])


def wait_value(qt: dict, key: str):
    """One figure of a run's who-waited-where data (None where the run has none)."""
    if key == "bc_waited_share":
        return qt.get("broadcast_waited_share")
    if key == "resp_waited_share":
        return qt.get("response_waited_share")
    if key.endswith("_us_per_step"):
        who, field = key.split("_")[:2]
        steps = qt.get("steps") or qt.get("rpcs")
        rows = [t for t in qt.get("threads") or [] if THREAD_OF[who] in t.get("uses", [])]
        vals = [t[f"{field}_ms"] for t in rows if f"{field}_ms" in t]
        return max(vals) * 1000 / steps if vals and steps else None
    end, counter = key.split("_")[:2]
    endpoint = "broadcast reader" if end == "bc" else "response reader"
    rows = [c for c in qt.get("rdmaq_counters") or [] if c.get("endpoint") == endpoint]
    gets = sum(c.get("messages", 0) for c in rows)
    return sum(c.get(counter, 0) for c in rows) / gets if gets else None


def summarize(result: dict) -> dict:
    """(setting, queue) -> {key: {"median", "min", "max", "n"}} over the runs without errors."""
    cells: dict = {}
    keys = [c[0] for c in COLUMNS] + ["broadcast_delay_p50_us", "broadcast_delay_p99_us",
                                      "rpc_round_trip_p50_ms", "idle_server_cpu_s", "attacker_cpu_s",
                                      *WAIT_KEYS]
    for run in result["runs"]:
        if run.get("error"):
            continue
        cell = cells.setdefault((run["setting"], run["queue"]), {})
        for k in keys:
            v = run_value(run, k)
            if v is not None:
                cell.setdefault(k, []).append(v)
    out = {}
    for ck, vals in cells.items():
        out[ck] = {k: {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}
                   for k, v in vals.items()}
    return out


def best_of(summary: dict, setting: str, queues: list[str]) -> dict:
    """Per metric, the best median among ``queues`` in ``setting``: {key: (median, queue)}."""
    out: dict = {}
    for q in queues:
        cell = summary.get((setting, q)) or {}
        for k, stat in cell.items():
            v = stat["median"]
            if k not in out or (v > out[k][0] if k in HIGHER_IS_BETTER else v < out[k][0]):
                out[k] = (v, q)
    return out


def baselines(queues: list[str]) -> list[str]:
    """vLLM's queues of the sweep (variants of them included), in BASELINES order."""
    return sorted((q for q in queues if base_queue(q) in BASELINES),
                  key=lambda q: (BASELINES.index(base_queue(q)), q))


def rdmaq_queues(queues: list[str]) -> list[str]:
    """rdmaq and its variants (QUEUE@NAME=VALUE): each gets a ratio row."""
    return [q for q in queues if is_rdmaq(q)]


def ratio_label(queues: list[str], num: str = "rdmaq-shm") -> str:
    return f"{num} ÷ " + ("best of " + ", ".join(baselines(queues)) if len(baselines(queues)) > 1
                          else "vllm")


def ratios(summary: dict, setting: str, num: str = "rdmaq-shm", den: str | list[str] = "vllm") -> dict:
    """``num``'s median over ``den``'s per metric; ``den`` a list: over the best of them."""
    a = summary.get((setting, num))
    dens = [den] if isinstance(den, str) else den
    best = best_of(summary, setting, dens)
    if not a or not best:
        return {}
    out = {}
    for k in RATIO_KEYS:
        # a median under the client's resolution (bursts of tokens: ITL p50 = 0) has no ratio
        if k in a and k in best and best[k][0] >= MIN_DENOMINATOR:
            out[k] = a[k]["median"] / best[k][0]
    return out


def _cell(stat: dict | None, fmt: str) -> str:
    if not stat:
        return "-"
    med = fmt.format(stat["median"])
    if stat["n"] < 2:
        return med
    return f"{med} ({fmt.format(stat['min'])}–{fmt.format(stat['max'])})"


def format_markdown(result: dict) -> str:
    m = result["machine"]
    cfg = result["config"]
    summ = summarize(result)
    v = m.get("versions", {})
    load_s = " ".join(f"{x:.2f}" for x in m.get("loadavg_start", []))
    load_e = " ".join(f"{x:.2f}" for x in m.get("loadavg_end", []))
    lines = [
        f"Machine: {m.get('label') or m.get('hostname')}: {m.get('cpu_model')}, "
        f"{m.get('cpus_allowed')} CPUs, {m.get('mem_total_gib') or 0:.0f} GiB, kernel {m.get('kernel')}, "
        f"Python {m.get('python')}; vLLM {v.get('vllm')}, torch {v.get('torch')}, rdmaq {v.get('rdmaq')} "
        f"({m.get('rdmaq_git')}). Load average at start {load_s}, at end {load_e}.",
        "",
        f"Workload: `vllm bench serve` random dataset, {cfg['input_len']} prompt + {cfg['output_len']} "
        f"output tokens (EOS ignored), {cfg['num_prompts']} requests at {cfg['rate']:g} req/s (Poisson), "
        f"at most {cfg['concurrency']} in flight, seed {cfg['seed']}; {_server_desc(cfg, m)}; "
        f"{_runs_desc(cfg)}, queues alternated run by run. Cells: median (min–max); server "
        f"CPU s per 1k tok: the measured server's processes, all threads, over the client's main "
        f"run; reader CPU: the threads that read the queue (with step timing).",
        "",
    ]
    conf = result.get("confinement")
    if conf and (conf.get("server_cpus") or conf.get("quota_cpus") is not None):
        lines += [f"CPU confinement: {Confinement.from_record(conf).describe()}.", ""]
    head = "| setting | queue | " + " | ".join(c[1] for c in COLUMNS) + " | runs |"
    lines += [head, "|" + "---|" * (len(COLUMNS) + 3)]
    for setting in cfg["settings"]:
        for q in cfg["queues"]:
            s = summ.get((setting, q))
            n = max((x["n"] for x in s.values()), default=0) if s else 0
            cells = [_cell(s.get(k) if s else None, fmt) for k, _, fmt in COLUMNS]
            lines.append(f"| {setting} | {q} | " + " | ".join(cells) + f" | {n} |")
        for num in rdmaq_queues(cfg["queues"]):
            r = ratios(summ, setting, num, baselines(cfg["queues"]))
            if r:
                cells = [f"{r[k]:.2f}" if k in r else ("n/a" if k in RATIO_KEYS else "")
                         for k, _, _ in COLUMNS]
                lines.append(f"| {setting} | **{ratio_label(cfg['queues'], num)}** | "
                             + " | ".join(cells) + " | |")
    lines.append("")
    lines.append("Settings: " + "; ".join(f"`{s}` = {d}" for s, d in cfg["setting_desc"].items()) + ".")
    fixes = _fixes_table(summ, cfg)
    if fixes:
        lines += ["", "Against the contended vllm baseline (ratio of medians; < 1 is better, "
                  "except out tok/s):", ""] + fixes
    qt = _queue_table(summ, cfg)
    if qt:
        lines += ["", "Where the step goes (medians over runs): broadcast delay = EngineCore "
                  "enqueue to the slower worker holding the object; RPC = broadcast to last "
                  "response at the EngineCore; queue share = queue delays ÷ RPC time.", ""] + qt
    wt = _wait_table(summ, cfg)
    if wt:
        lines += ["", "Who waited where (medians over runs): the share of broadcasts the worker "
                  "asked for before the EngineCore sent them, and of responses the EngineCore "
                  "asked for before the worker sent them (both: a wake-up, or a spin, on the "
                  "path); per step, the CPU time and the time runnable but waiting for a CPU "
                  "of the worker's thread that reads broadcasts, of the EngineCore's thread "
                  "that reads responses and of the worker's thread that sends them "
                  "(/proc schedstat); rdmaq's gets that ended woken from a sleep, in a spin, "
                  "or found the CPUs oversubscribed (of all gets).", ""] + wt
    clean = _cleanup_line(result)
    if clean:
        lines += ["", clean]
    errors = [r for r in result["runs"] if r.get("error")]
    if errors:
        lines += ["", f"{len(errors)} failed run(s): " + "; ".join(
            f"{r['setting']}/{r['queue']}/{r['run']}: {r['error']}" for r in errors)]
    return "\n".join(lines)


def _runs_desc(cfg: dict) -> str:
    per = cfg.get("runs_by_setting") or {}
    other = [s for s in cfg["settings"] if per.get(s, cfg["runs"]) != cfg["runs"]]
    return f"{cfg['runs']} runs per cell" + "".join(f", {per[s]} in {s}" for s in other)


def _server_desc(cfg: dict, m: dict) -> str:
    model = str(cfg.get("model", "")).rstrip("/").rsplit("/", 1)[-1] or "model"
    if cfg.get("device", "cpu") == "cpu":
        return f"TP={cfg.get('tp', 2)} on CPU, {model}"
    gpus = m.get("gpus") or ["GPU"]
    return (f"TP={cfg['tp']} on {gpus[0].split(',')[0]}, {model}, "
            f"--distributed-executor-backend mp, {cfg.get('profile_desc', cfg.get('profile'))}, "
            f"at most {cfg.get('max_num_seqs')} sequences a step")


def _cleanup_line(result: dict) -> str:
    parts = []
    for q, srv in result.get("servers", {}).items():
        c = srv.get("cleanup")
        if not c:
            continue
        left = c["shm_remaining"] + c["processes_remaining"] + (["TMPDIR"] if c["tmpdir_remaining"] else [])
        parts.append(f"{q} server stopped in {c.get('stop_s', '?')} s"
                     + (f" (SIGKILL: {len(c['sigkilled'])})" if c["sigkilled"] else "")
                     + f", vLLM left {len(c['shm_left_by_vllm'])} /dev/shm name(s) and "
                     f"{len(c['tmp_left_by_vllm'])} TMPDIR entries (removed)"
                     + (f", STILL THERE: {left}" if left else ""))
    ours = (result.get("leftovers") or {}).get("ours")
    if ours is not None:
        parts.append("new in /dev/shm or the temporary directory from this run afterwards: "
                     + (", ".join(ours) if ours else "none"))
    return ("Clean-up: " + "; ".join(parts) + ".") if parts else ""


def _fixes_table(summ: dict, cfg: dict) -> list[str]:
    """hogs: vllm+SCHED_IDLE, rdmaq, rdmaq+SCHED_IDLE; tok: also TOKENIZERS_PARALLELISM=false."""
    families = [("hogs", ["hogs-schedidle"]), ("tok", ["tok-nopar", "tok-schedidle"])]
    keys = ["tpot_p50_ms", "tpot_p99_ms", "itl_p99_ms", "ttft_p50_ms", "e2el_p50_ms", "output_tok_s"]
    rows = []
    for base, fixes in families:
        b = summ.get((base, "vllm"))
        if not b:
            continue
        queues = cfg["queues"]
        variants = [(base, q) for q in queues if q != "vllm"] + [(f, q) for f in fixes for q in queues]
        for setting, q in variants:
            s = summ.get((setting, q))
            if not s:
                continue
            cells = [f"{s[k]['median'] / b[k]['median']:.2f}"
                     if k in s and k in b and b[k]["median"] >= MIN_DENOMINATOR else "n/a" for k in keys]
            rows.append(f"| {base} | {setting} + {q} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    return (["| baseline (vllm) | variant | TPOT p50 | TPOT p99 | ITL p99 | TTFT p50 | E2E p50 | out tok/s |",
             "|---|---|---|---|---|---|---|---|"] + rows)


def _queue_table(summ: dict, cfg: dict) -> list[str]:
    rows = []
    for setting in cfg["settings"]:
        for q in cfg["queues"]:
            s = summ.get((setting, q)) or {}
            if "queue_share" not in s:
                continue
            rows.append(
                f"| {setting} | {q} | {_cell(s.get('broadcast_delay_p50_us'), '{:.0f}')} | "
                f"{_cell(s.get('broadcast_delay_p99_us'), '{:.0f}')} | "
                f"{_cell(s.get('rpc_round_trip_p50_ms'), '{:.2f}')} | "
                f"{_cell(s.get('queue_share'), '{:.1%}')} | "
                f"{_cell(s.get('idle_server_cpu_s'), '{:.2f}')} | {_cell(s.get('attacker_cpu_s'), '{:.0f}')} |")
    if not rows:
        return []
    return (["| setting | queue | broadcast p50 µs | broadcast p99 µs | RPC p50 ms | queue share "
             "| idle server CPU s | attacker CPU s |",
             "|---|---|---|---|---|---|---|---|"] + rows)


def _wait_table(summ: dict, cfg: dict) -> list[str]:
    pct, us = "{:.0%}", "{:.0f}"
    rows = []
    for setting in cfg["settings"]:
        for q in cfg["queues"]:
            s = summ.get((setting, q)) or {}
            if not any(k in s for k in WAIT_KEYS):
                continue

            def pair(a, b, s=s, fmt=us):
                return f"{_cell(s.get(a), fmt)} / {_cell(s.get(b), fmt)}"

            rows.append(
                f"| {setting} | {q} | {_cell(s.get('bc_waited_share'), pct)} | "
                f"{_cell(s.get('resp_waited_share'), pct)} | "
                + " | ".join(pair(f"{t}_cpu_us_per_step", f"{t}_runq_us_per_step")
                             for t in THREAD_OF) + " | "
                + " | ".join(f"{_cell(s.get(f'{e}_woken_share'), pct)} / "
                             f"{_cell(s.get(f'{e}_spins_share'), pct)} / "
                             f"{_cell(s.get(f'{e}_busy_share'), pct)}" for e in ("resp", "bc"))
                + " |")
    if not rows:
        return []
    return (["| setting | queue | worker asked first | EngineCore asked first | worker reader "
             "thread CPU / runq µs per step | EngineCore reader thread | worker output thread "
             "| rdmaq EngineCore gets woken / spun / busy | rdmaq worker gets woken / spun / busy |",
             "|---|---|---|---|---|---|---|---|---|"] + rows)


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summ = summarize(result)
    cfg = result["config"]
    settings = [s for s in cfg["settings"] if any((s, q) in summ for q in cfg["queues"])]
    if not settings:
        raise ValueError("nothing to plot: no run succeeded")
    panels = [("tpot_p50_ms", "TPOT p50 (ms)"), ("tpot_p99_ms", "TPOT p99 (ms)"),
              ("itl_p50_ms", "ITL p50 (ms)"), ("itl_p99_ms", "ITL p99 (ms)"),
              ("ttft_p50_ms", "TTFT p50 (ms)"), ("e2el_p50_ms", "E2E latency p50 (ms)"),
              ("output_tok_s", "output tokens/s"), ("worker_cpu_s", "worker CPU s per run")]
    colors = {"vllm": "tab:red", "vllm-spinloop": "tab:orange", "rdmaq-shm": "tab:blue", "rdmaq-verbs": "tab:cyan"}
    spare = iter(["tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"])
    for q in cfg["queues"]:
        if q not in colors:  # a variant: a colour of its own
            colors[q] = next(spare, "tab:gray")
    fig, axes = plt.subplots(2, 4, figsize=(19, 7.5))
    width = 0.8 / len(cfg["queues"])
    for ax, (key, title) in zip(axes.flat, panels):
        for j, q in enumerate(cfg["queues"]):
            xs, meds, lo, hi = [], [], [], []
            for i, s in enumerate(settings):
                st = (summ.get((s, q)) or {}).get(key)
                if not st:
                    continue
                xs.append(i + (j - (len(cfg["queues"]) - 1) / 2) * width)
                meds.append(st["median"])
                lo.append(st["median"] - st["min"])
                hi.append(st["max"] - st["median"])
            ax.bar(xs, meds, width, yerr=[lo, hi], capsize=3, label=q, color=colors.get(q))
        ax.set_xticks(range(len(settings)))
        ax.set_xticklabels(settings, rotation=25, ha="right", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    axes.flat[0].legend(title="--distributed-ipc", fontsize=8)
    m = result["machine"]
    load = "/".join(f"{x:.1f}" for x in m.get("loadavg_start", [])[:1] + m.get("loadavg_end", [])[:1])
    where = (f"{m.get('cpus_allowed')} CPUs" if cfg.get("device", "cpu") == "cpu"
             else f"{(m.get('gpus') or ['GPU'])[0].split(',')[0]}, {m.get('cpus_allowed')} CPUs")
    fig.suptitle(f"vllm serve -tp {cfg.get('tp', 2)} ({m.get('versions', {}).get('vllm')}), {where}, "
                 f"load {load} (start/end): median of {_runs_desc(cfg)}, bars min–max", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
