"""``rdmaq bench sweep RESULT.json``: the idle tail against reader CPU, one point per setting.

A sweep is an ordinary ``rdmaq bench --json`` run on an idle machine whose queues are rdmaq
with different waiting settings (``rdmaq-shm@RDMAQ_SPIN_US=1000000`` ...) and both vLLM
variants.  For each queue and pace this reads, over the run's sizes, the median ratio of the
p99 (slowest reader per message) to the better vLLM variant of the same cell, and the reader
CPU (busy phase, mean per reader, the highest of the sizes); vLLM's own points are ratios to
that same best, so one of them sits at 1.  One PNG (a panel per pace: p99 ratio against
reader CPU, log scale) and a JSON of the points.

    rdmaq bench sweep RESULT.json [--plot sweep.png] [--json points.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

VLLM = ("vllm", "vllm-spinloop")


def _p99(sub: dict) -> float | None:
    return (sub.get("latency_max_over_readers") or {}).get("p99_us")


def points(result: dict) -> list[dict]:
    """One point per (queue, readers, pace) of the idle cells: median p99 ratio over sizes
    to the better vLLM variant of each sub-run, the highest reader CPU, the sizes used."""
    subs: dict = {}
    for c in result["cells"]:
        if c.get("attackers") or c.get("tokenizer_attacker") or c.get("error"):
            continue
        for s in c["subruns"]:
            if s["pace_ns"] and _p99(s) is not None:
                subs[(c["queue"], c["readers"], s["size"], s["pace_ns"])] = s
    best: dict = {}
    for (q, rd, size, pace), s in subs.items():
        if q in VLLM:
            k = (rd, size, pace)
            best[k] = min(best.get(k, float("inf")), _p99(s))
    groups: dict = {}
    for (q, rd, size, pace), s in subs.items():
        if (rd, size, pace) in best:
            groups.setdefault((q, rd, pace), []).append((size, s, _p99(s) / best[(rd, size, pace)]))
    out = []
    for (q, rd, pace), rows in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        cpu = [s.get("reader_cpu_busy_frac_mean") for _, s, _ in rows]
        cpu = [v for v in cpu if v is not None]
        out.append({
            "queue": q, "readers": rd, "pace_ns": pace,
            "sizes": sorted(size for size, _, _ in rows),
            "p99_ratio_median": statistics.median(r for _, _, r in rows),
            "p99_ratio_max": max(r for _, _, r in rows),
            "p99_us": {str(size): _p99(s) for size, s, _ in rows},
            "reader_cpu_pct_max": 100 * max(cpu) if cpu else None,
        })
    return out


def _label(queue: str) -> str:
    """'rdmaq-shm@RDMAQ_ANTICIPATE=0@RDMAQ_SPIN_US=0' -> 'ANTICIPATE=0 SPIN_US=0'."""
    base, _, env = queue.partition("@")
    if not env:
        return base + (" (default)" if base.startswith("rdmaq") else "")
    return " ".join(kv.removeprefix("RDMAQ_") for kv in env.split("@"))


def plot(pts: list[dict], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted({(p["readers"], p["pace_ns"]) for p in pts})
    fig, axes = plt.subplots(1, len(keys), figsize=(7.5 * len(keys), 6.0), squeeze=False)
    for ax, (rd, pace) in zip(axes[0], keys):
        for p in pts:
            if (p["readers"], p["pace_ns"]) != (rd, pace) or p["reader_cpu_pct_max"] is None:
                continue
            vllm = p["queue"] in VLLM
            ax.scatter(p["reader_cpu_pct_max"], p["p99_ratio_median"], marker="s" if vllm else "o",
                       color="tab:red" if vllm else "tab:blue", zorder=3)
            ax.annotate(_label(p["queue"]), (p["reader_cpu_pct_max"], p["p99_ratio_median"]),
                        fontsize=7, xytext=(4, 3), textcoords="offset points")
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("reader CPU, busy phase (% of a core, per reader)")
        ax.set_ylabel("idle p99 ÷ better vLLM (median over sizes)")
        ax.set_title(f"TP={rd}, pace {pace / 1e6:g} ms")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rdmaq bench sweep", description=__doc__.split("\n\n")[1])
    ap.add_argument("result", help="JSON of an `rdmaq bench` run with rdmaq variants and vLLM")
    ap.add_argument("--plot", metavar="FILE.png", help="the figure")
    ap.add_argument("--json", metavar="FILE", help="the points")
    a = ap.parse_args(argv)
    with open(a.result) as f:
        result = json.load(f)
    pts = points(result)
    if not pts:
        print(f"rdmaq bench sweep: no idle paced cell with a vLLM variant in {a.result}", file=sys.stderr)
        return 1
    for p in pts:
        cpu = p["reader_cpu_pct_max"]
        print(f"TP={p['readers']} {p['pace_ns'] / 1e6:g}ms {_label(p['queue']):<52} p99 ratio median "
              f"{p['p99_ratio_median']:.2f} max {p['p99_ratio_max']:.2f}  p99 us "
              + "/".join(f"{v:.0f}" for v in p["p99_us"].values())
              + f"  rdCPU {'-' if cpu is None else f'{cpu:.1f}'}%")
    m = result.get("machine", {})
    title = (f"rdmaq idle p99 against reader CPU: {m.get('label') or m.get('hostname')}, "
             f"{m.get('cpus_allowed')} cpus, kernel {m.get('kernel')}, rdmaq {m.get('rdmaq_git')}")
    if a.plot:
        plot(pts, a.plot, title)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"source": a.result, "title": title, "points": pts}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
