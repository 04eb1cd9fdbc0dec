"""PNG figures from a result: latency CDFs per queue, and p99 against attackers."""

from __future__ import annotations

from .report import contention_key, cpus_label, pace_label, size_label

COLORS = {"vllm": "tab:red", "rdmaq-shm": "tab:blue", "rdmaq-verbs": "tab:green"}


def _pick(values, preferred):
    return preferred if preferred in values else sorted(values)[0]


def plot(result: dict, path: str, size: int | None = None, pace_ns: int | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [c for c in result["cells"] if c["subruns"]]
    if not cells:
        raise ValueError("nothing to plot: no cell has results")
    m = result["machine"]
    q_grid = result["cdf_q"]
    sizes = {s["size"] for c in cells for s in c["subruns"]}
    paces = {s["pace_ns"] for c in cells for s in c["subruns"]}
    size = _pick(sizes, size if size is not None else 2048)
    if pace_ns is None:
        nonzero = sorted(p for p in paces if p)
        pace_ns = nonzero[0] if nonzero else 0
    pace_ns = _pick(paces, pace_ns)

    readers = sorted({c["readers"] for c in cells})
    conts = sorted({contention_key(c) for c in cells},
                   key=lambda k: (k[0] is not None, -len(k[0] or ()), k[1], k[2]))
    nrows, ncols = len(conts) + 1, len(readers)
    fig, axes = plt.subplots(nrows, ncols, figsize=(max(7.0, 5.2 * ncols), 3.4 * nrows),
                             squeeze=False)

    def sub_of(c):
        for s in c["subruns"]:
            if s["size"] == size and s["pace_ns"] == pace_ns:
                return s
        return None

    for i, ck in enumerate(conts):
        for j, rd in enumerate(readers):
            ax = axes[i][j]
            for c in cells:
                if c["readers"] != rd or contention_key(c) != ck:
                    continue
                s = sub_of(c)
                if not s or not s.get("cdf_us"):
                    continue
                ax.plot(s["cdf_us"], q_grid, label=c["queue"], color=COLORS.get(c["queue"]))
            ax.set_xscale("log")
            ax.set_ylim(0, 1.0)
            ax.grid(True, which="both", alpha=0.3)
            cpus, att, tok = ck
            cpu_s = cpus_label(list(cpus) if cpus else None, m)
            ax.set_title(f"TP={rd}, cpus {cpu_s}, attackers {att}{', tokenizer' if tok else ''}",
                         fontsize=9)
            ax.set_xlabel("one-way latency, max over readers [us]")
            ax.set_ylabel("CDF")
            if ax.lines:
                ax.legend(fontsize=8, loc="lower right")

    # last row: p99 against attackers, per queue, for each cpuset/tokenizer setting
    for j, rd in enumerate(readers):
        ax = axes[nrows - 1][j]
        series: dict = {}
        for c in cells:
            if c["readers"] != rd:
                continue
            s = sub_of(c)
            if not s or not s["latency_max_over_readers"]:
                continue
            cpus, _, tok = contention_key(c)
            key = (c["queue"], cpus, tok)
            series.setdefault(key, []).append((c["attackers"], s["latency_max_over_readers"]["p99_us"]))
        for (q, cpus, tok), pts in sorted(series.items(), key=lambda kv: str(kv[0])):
            pts.sort()
            lab = f"{q}, cpus {cpus_label(list(cpus) if cpus else None, m)}{', tok' if tok else ''}"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=lab,
                    color=COLORS.get(q), linestyle="-" if cpus is None else "--")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_xlabel("CPU-hog attackers in the cpuset")
        ax.set_ylabel("p99 latency, max over readers [us]")
        ax.set_title(f"TP={rd}: p99 vs attackers", fontsize=9)
        if ax.lines:
            ax.legend(fontsize=7)

    fig.suptitle(f"rdmaq bench, {m.get('label') or m.get('hostname')} ({m.get('cpu_model')}, "
                 f"{m.get('cpus_allowed')} cpus)\n{size_label(size)} messages, pace "
                 f"{pace_label(pace_ns)}; one-way latency, max over readers", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / (3.4 * nrows)))
    fig.savefig(path, dpi=90)
    plt.close(fig)
