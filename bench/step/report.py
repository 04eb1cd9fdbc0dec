"""``rdmaq bench step``'s figures and tables: barrier amplification from the step records.

Per step ``i``: the engine's send stamp ``s_i`` and reply stamp; each rank's dequeue stamp
``d_ri``. The broadcast delay of rank r is ``d_ri - s_i``; the step cannot get past the barrier
before its slowest reader has the step, so the figure that matters is the slowest reader's
delay, and which rank it was. The ranks' spread ``max_r d_ri - min_r d_ri`` is time the first
rank spent waiting for the last one; charged to the last rank, as a share of the step time,
it says how much of each step is waiting for that rank's wake-up.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..common.stats import _arr, summarize

BASELINES = ("vllm", "vllm-spinloop")


def subrun_figures(engine: dict, ranks: list[dict]) -> tuple[dict, dict]:
    """(figures, raw per-step arrays for pooling runs) of one sub-run."""
    raw: dict[str, Any] = {"t_send": _arr(engine["t_send"]), "t_reply": _arr(engine["t_reply"]),
           "t_deq": [_arr(r["t_deq"]) for r in ranks], "t_worked": [_arr(r["t_worked"]) for r in ranks],
           "t_met": [_arr(r["t_met"]) for r in ranks],
           "cpu_ns": {"engine": engine["cpu_ns"], "ranks": [r["cpu_ns"] for r in ranks]}}
    errors = list(engine["errors"]) + [f"rank {i}: {e}" for i, r in enumerate(ranks) for e in r["errors"]]
    n = raw["t_send"].size
    if any(a.size != n for a in raw["t_deq"]):
        errors.append("ranks recorded different numbers of steps than the engine: "
                      f"engine {n}, ranks {[a.size for a in raw['t_deq']]}")
        n = min([n] + [a.size for a in raw["t_deq"]])
        for k in ("t_deq", "t_worked", "t_met"):
            raw[k] = [a[:n] for a in raw[k]]
        raw["t_send"], raw["t_reply"] = raw["t_send"][:n], raw["t_reply"][:n]
    fig = figures(raw)
    fig["errors"] = errors
    fig["engine_sent"] = engine["sent"]
    return fig, raw


def pool(raws: list[dict]) -> dict:
    """Several sub-runs' raw records as one (percentiles over all their steps)."""
    def cat(arrs):
        return np.concatenate(arrs) if arrs else np.zeros(0, dtype=np.int64)

    tp = len(raws[0]["t_deq"])

    def cpu(get):
        vals = [get(r) for r in raws]
        return None if any(v is None for v in vals) else sum(vals)
    return {"t_send": cat([r["t_send"] for r in raws]), "t_reply": cat([r["t_reply"] for r in raws]),
            **{k: [cat([r[k][i] for r in raws]) for i in range(tp)] for k in ("t_deq", "t_worked", "t_met")},
            "cpu_ns": {"engine": cpu(lambda r: r["cpu_ns"]["engine"]),
                       "ranks": [cpu(lambda r, i=i: r["cpu_ns"]["ranks"][i]) for i in range(tp)]},
            "span_ns": sum(_span(r) for r in raws)}


def _span(raw) -> int:
    return int(raw["t_reply"][-1] - raw["t_send"][0]) if raw["t_send"].size else 0


def _p(x: np.ndarray, q: float) -> float | None:
    return float(np.percentile(x, q)) / 1e3 if x.size else None


def figures(raw: dict) -> dict:
    send, reply = raw["t_send"], raw["t_reply"]
    n = int(send.size)
    tp = len(raw["t_deq"])
    if n == 0:
        return {"steps": 0, "per_rank": [], "step_time": None, "bcast_slowest": None,
                "throughput_steps_per_s": None, "cpu_s_per_1000_steps": None}
    deq = np.stack(raw["t_deq"])                  # tp x n
    delay = deq - send                            # broadcast delay of each rank, each step
    slowest = delay.max(axis=0)
    last = delay.argmax(axis=0)
    spread = slowest - delay.min(axis=0)
    step = reply - send
    total_step = float(step.sum())
    barrier_wait = np.stack(raw["t_met"]) - np.stack(raw["t_worked"])
    work = np.stack(raw["t_worked"]) - deq
    span = raw.get("span_ns") or _span(raw)

    def per_1000(ns):
        return None if ns is None else ns / 1e9 / n * 1000

    cpu = raw["cpu_ns"]
    ranks_cpu = [per_1000(c) for c in cpu["ranks"]]
    per_rank = []
    for r in range(tp):
        mine = last == r
        per_rank.append({
            "rank": r,
            "bcast_p50_us": _p(delay[r], 50), "bcast_p99_us": _p(delay[r], 99),
            "last_count": int(mine.sum()),
            # its delay on the steps it was the last: how late the step's slowest reader was
            "last_bcast_p50_us": _p(delay[r][mine], 50), "last_bcast_p99_us": _p(delay[r][mine], 99),
            "wait_share": float(spread[mine].sum()) / total_step if total_step > 0 else None,
            "work_p50_us": _p(work[r], 50),
            "barrier_wait_p50_us": _p(barrier_wait[r], 50),
            "cpu_s_per_1000_steps": ranks_cpu[r],
        })
    return {
        "steps": n,
        "step_time": summarize(step),
        "throughput_steps_per_s": n / (span / 1e9) if span > 0 else None,
        "bcast_slowest": summarize(slowest),
        "bcast_all": summarize(delay.ravel()),
        "spread": summarize(spread),
        # shares of the summed step time: until the slowest reader had the step, and the
        # ranks' spread (the first rank waiting for the last one's wake-up)
        "bcast_share": float(slowest.sum()) / total_step if total_step > 0 else None,
        "spread_share": float(spread.sum()) / total_step if total_step > 0 else None,
        "negative_delays": int((delay < 0).sum()),
        "per_rank": per_rank,
        "cpu_s_per_1000_steps": {
            "engine": per_1000(cpu["engine"]), "ranks": ranks_cpu,
            "ranks_total": None if any(c is None for c in ranks_cpu) else sum(ranks_cpu)},
    }


def compute_ratios(groups: list[dict]) -> list[dict]:
    """rdmaq ÷ the better vLLM queue of the same TP and setting, per figure (lower is better
    for each, so < 1 is rdmaq ahead; throughput is inverted to keep that reading)."""
    out = []
    keys = list(dict.fromkeys((g["tp"], g["setting"]) for g in groups))  # in the groups' order
    for tp, setting in keys:
        cell = {g["queue"]: g["figures"] for g in groups if g["tp"] == tp and g["setting"] == setting
                and g["figures"].get("steps")}
        bases = [cell[q] for q in BASELINES if q in cell]
        if not bases:
            continue
        for q, f in cell.items():
            if q.split("@")[0] in BASELINES:
                continue
            row: dict = {"tp": tp, "setting": setting, "queue": q}
            for name, get in _RATIO_FIGURES.items():
                mine = get(f)
                theirs = [v for v in (get(b) for b in bases) if v]
                row[name] = mine / min(theirs) if mine is not None and theirs else None
            out.append(row)
    return out


def _get(*path):
    def get(f):
        for k in path:
            if f is None:
                return None
            f = f.get(k)
        return f
    return get


_RATIO_FIGURES = {
    "step_p50": _get("step_time", "p50_us"),
    "step_p99": _get("step_time", "p99_us"),
    "bcast_slowest_p50": _get("bcast_slowest", "p50_us"),
    "bcast_slowest_p99": _get("bcast_slowest", "p99_us"),
    "time_per_step": lambda f: 1 / f["throughput_steps_per_s"] if f.get("throughput_steps_per_s") else None,
    "cpu_ranks": _get("cpu_s_per_1000_steps", "ranks_total"),
}


def _f(v, fmt="{:.0f}") -> str:
    return "-" if v is None else fmt.format(v)


def _calibration(cfg) -> str:
    cal = cfg.get("calibration")
    return (" ({matmuls} bf16 {matmul_size}² matmuls, {work_us:.0f} µs on {gpu} alone)".format(**cal)
            if cal else "")


def _load(avg) -> str:
    return "-" if not avg else " ".join(f"{v:.2f}" for v in avg)


def format_tables(result: dict) -> str:
    lines = []
    cfg = result["config"]
    lines.append(f"# rdmaq bench step: device {cfg['device']}, work {cfg['work_us']} us/step"
                 + _calibration(cfg)
                 + f", barrier {cfg['barrier']}, {cfg['steps']} steps x {cfg['runs']} runs per cell")
    lines.append(f"# machine: {result['machine'].get('label') or '-'}, {result['machine'].get('logical_cpus')} "
                 f"CPUs, load average at start {_load(result['machine'].get('loadavg_start'))}, "
                 f"at end {_load(result['machine'].get('loadavg_end'))}")
    head = (f"{'TP':>3} {'setting':<15} {'queue':<16} {'steps':>6} {'step p50':>9} {'p99':>8} "
            f"{'steps/s':>8} {'slowest p50':>11} {'p99':>8} {'bcast%':>6} {'spread%':>7} "
            f"{'cpu s/1k: eng':>13} {'ranks':>6}")
    lines.append(head)
    for g in result["groups"]:
        f = g["figures"]
        st, bs, cpu = f.get("step_time") or {}, f.get("bcast_slowest") or {}, f.get("cpu_s_per_1000_steps") or {}
        lines.append(
            f"{g['tp']:>3} {g['setting']:<15} {g['queue']:<16} {f['steps']:>6} "
            f"{_f(st.get('p50_us')):>9} {_f(st.get('p99_us')):>8} {_f(f.get('throughput_steps_per_s')):>8} "
            f"{_f(bs.get('p50_us'), '{:.1f}'):>11} {_f(bs.get('p99_us'), '{:.1f}'):>8} "
            f"{_f(f.get('bcast_share') and 100 * f['bcast_share'], '{:.1f}'):>6} "
            f"{_f(f.get('spread_share') and 100 * f['spread_share'], '{:.1f}'):>7} "
            f"{_f(cpu.get('engine'), '{:.2f}'):>13} {_f(cpu.get('ranks_total'), '{:.2f}'):>6}"
            + ("  ERRORS" if g.get("errors") else ""))
        for r in f.get("per_rank", []):
            lines.append(f"{'':>3}   rank {r['rank']}: bcast p50 {_f(r['bcast_p50_us'], '{:.1f}')} "
                         f"p99 {_f(r['bcast_p99_us'], '{:.1f}')} us, last {r['last_count']}x (then p50 "
                         f"{_f(r['last_bcast_p50_us'], '{:.1f}')} p99 {_f(r['last_bcast_p99_us'], '{:.1f}')} us), "
                         f"step share waiting for it {_f(r['wait_share'] and 100 * r['wait_share'], '{:.1f}')}%, "
                         f"barrier wait p50 {_f(r['barrier_wait_p50_us'], '{:.1f}')} us, "
                         f"cpu {_f(r['cpu_s_per_1000_steps'], '{:.2f}')} s/1k")
    if result.get("ratios"):
        lines.append("")
        lines.append("# rdmaq / best of (vllm, vllm-spinloop), lower is better for rdmaq")
        lines.append(f"{'TP':>3} {'setting':<15} {'queue':<16} {'step p50':>9} {'p99':>6} "
                     f"{'slowest p50':>11} {'p99':>6} {'time/step':>9} {'rank cpu':>8}")
        for r in result["ratios"]:
            lines.append(f"{r['tp']:>3} {r['setting']:<15} {r['queue']:<16} "
                         f"{_f(r['step_p50'], '{:.2f}'):>9} {_f(r['step_p99'], '{:.2f}'):>6} "
                         f"{_f(r['bcast_slowest_p50'], '{:.2f}'):>11} {_f(r['bcast_slowest_p99'], '{:.2f}'):>6} "
                         f"{_f(r['time_per_step'], '{:.2f}'):>9} {_f(r['cpu_ranks'], '{:.2f}'):>8}")
    for c in result["cells"]:
        if c.get("error"):
            lines.append(f"# {c['queue']} TP={c['tp']}: FAILED: {c['error'].strip().splitlines()[-1]}")
    if result.get("skipped_subruns"):
        lines.append(f"# {result['skipped_subruns']} sub-run(s) not run: past the deadline")
    return "\n".join(lines)


def format_markdown(result: dict) -> str:
    cfg = result["config"]
    out = [f"## rdmaq bench step ({cfg['device']}, work {cfg['work_us']} us/step{_calibration(cfg)}, barrier "
           f"{cfg['barrier']}, {cfg['steps']} steps x {cfg['runs']} runs)", "",
           f"Machine: {result['machine'].get('label') or '-'}, {result['machine'].get('logical_cpus')} CPUs, "
           f"load average at start {_load(result['machine'].get('loadavg_start'))}, at end "
           f"{_load(result['machine'].get('loadavg_end'))}.", "",
           "| TP | setting | queue | steps | step p50 µs | step p99 µs | steps/s | slowest reader p50 µs "
           "| p99 µs | spread share | last count per rank | CPU s/1k steps engine | ranks |",
           "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for g in result["groups"]:
        f = g["figures"]
        st, bs, cpu = f.get("step_time") or {}, f.get("bcast_slowest") or {}, f.get("cpu_s_per_1000_steps") or {}
        out.append(f"| {g['tp']} | {g['setting']} | {g['queue']} | {f['steps']} | {_f(st.get('p50_us'))} "
                   f"| {_f(st.get('p99_us'))} | {_f(f.get('throughput_steps_per_s'))} "
                   f"| {_f(bs.get('p50_us'), '{:.1f}')} | {_f(bs.get('p99_us'), '{:.1f}')} "
                   f"| {_f(f.get('spread_share') and 100 * f['spread_share'], '{:.1f}')}% "
                   f"| {' '.join(str(r['last_count']) for r in f.get('per_rank', []))} "
                   f"| {_f(cpu.get('engine'), '{:.2f}')} | {_f(cpu.get('ranks_total'), '{:.2f}')} |")
    if result.get("ratios"):
        out += ["", "rdmaq ÷ best of (vllm, vllm-spinloop) (< 1: rdmaq ahead):", "",
                "| TP | setting | queue | step p50 | step p99 | slowest p50 | slowest p99 | time/step | rank CPU |",
                "|---:|---|---|---:|---:|---:|---:|---:|---:|"]
        for r in result["ratios"]:
            out.append(f"| {r['tp']} | {r['setting']} | {r['queue']} | {_f(r['step_p50'], '{:.2f}')} "
                       f"| {_f(r['step_p99'], '{:.2f}')} | {_f(r['bcast_slowest_p50'], '{:.2f}')} "
                       f"| {_f(r['bcast_slowest_p99'], '{:.2f}')} | {_f(r['time_per_step'], '{:.2f}')} "
                       f"| {_f(r['cpu_ranks'], '{:.2f}')} |")
    return "\n".join(out) + "\n"
