"""The verdict of a run (``rdmaq bench --quick``): per setting (idle, contended), which queue
won and by how much, with the confidence the samples allow.

For each sub-run (a size and a pace) the figure is rdmaq's p50 (p99) over the better vLLM
queue's (the one with the lower point estimate, as the report's ratios take it), from the
per-message latencies of the slowest reader; a setting's figure is the geometric mean over
its sub-runs.  Its 95 % interval comes from a bootstrap: every sub-run's samples of both
queues resampled with replacement, the figure recomputed, ``ROUNDS`` times.  An interval
wholly below 1 says rdmaq won that percentile, wholly above 1 that vLLM did; one that holds 1
is too close to call.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ROUNDS = 1000
LEVEL = 0.95
MIN_SAMPLES = 20  # fewer in a sub-run: no percentile worth resampling
PERCENTILES = (("p50", 50.0), ("p99", 99.0))


@dataclass(frozen=True)
class Figure:
    """rdmaq ÷ vLLM at one percentile: the point estimate and its interval."""

    ratio: float
    lo: float
    hi: float

    @property
    def call(self) -> str:
        """"ahead", "behind" or "close" (the interval holds 1)."""
        if self.hi < 1.0:
            return "ahead"
        if self.lo > 1.0:
            return "behind"
        return "close"


def _geomean(x: np.ndarray, axis: int = 0) -> np.ndarray:
    return np.exp(np.log(x).mean(axis=axis))


def figure(pairs: list[tuple[np.ndarray, np.ndarray]], q: float, rng: np.random.Generator,
           rounds: int = ROUNDS) -> Figure:
    """rdmaq ÷ vLLM at percentile ``q`` over ``pairs`` (rdmaq's samples, vLLM's samples) of
    the sub-runs, with its bootstrap interval."""
    if not pairs:
        raise ValueError("no sub-run with samples of both queues")
    point = _geomean(np.array([np.percentile(a, q) / np.percentile(b, q) for a, b in pairs]))
    boot = np.empty((len(pairs), rounds))
    for i, (a, b) in enumerate(pairs):
        ra = np.percentile(rng.choice(a, size=(rounds, a.size)), q, axis=1)
        rb = np.percentile(rng.choice(b, size=(rounds, b.size)), q, axis=1)
        boot[i] = ra / rb
    dist = _geomean(boot)
    tail = (1.0 - LEVEL) / 2
    lo, hi = np.quantile(dist, [tail, 1.0 - tail])
    return Figure(float(point), float(lo), float(hi))


def best_baseline(baselines: dict[str, list[np.ndarray]], index: int) -> np.ndarray | None:
    """Of vLLM's queues, the samples of the one with the lower median in sub-run ``index``."""
    cands = [s[index] for s in baselines.values() if index < len(s) and s[index].size >= MIN_SAMPLES]
    return min(cands, key=lambda s: float(np.median(s))) if cands else None


def pairs_of(rdmaq: list[np.ndarray], baselines: dict[str, list[np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(rdmaq, the better vLLM) per sub-run where both have enough samples; latencies must be
    positive for a ratio, so a zero (clock granularity) counts as 1 ns."""
    out = []
    for i, a in enumerate(rdmaq):
        b = best_baseline(baselines, i)
        if b is not None and a.size >= MIN_SAMPLES:
            out.append((np.maximum(a, 1).astype(np.float64), np.maximum(b, 1).astype(np.float64)))
    return out


def _fmt(x: float) -> str:
    return f"{x:.2g}" if x < 0.1 else f"{x:.2f}"


def line(setting: str, rdmaq_name: str, figures: dict[str, Figure]) -> str:
    """One setting's verdict: who won, then each percentile with its interval."""
    calls = {f.call for f in figures.values()}
    if calls <= {"ahead", "close"} and "ahead" in calls:
        head = f"{rdmaq_name} won"
    elif calls <= {"behind", "close"} and "behind" in calls:
        head = "vLLM won"
    elif calls == {"close"}:
        head = "too close to call"
    else:
        ahead = [n for n, f in figures.items() if f.call == "ahead"]
        behind = [n for n, f in figures.items() if f.call == "behind"]
        head = f"mixed ({rdmaq_name} ahead at {', '.join(ahead)}, behind at {', '.join(behind)})"
    parts = []
    for name, f in figures.items():
        note = {"ahead": "", "behind": "", "close": ", too close to call"}[f.call]
        parts.append(f"{name} {_fmt(f.ratio)}× ({int(LEVEL * 100)} % CI {_fmt(f.lo)}–{_fmt(f.hi)}{note})")
    return f"verdict, {setting}: {head}: {rdmaq_name} ÷ vLLM latency " + ", ".join(parts)


def verdicts(samples: dict[tuple[str, int], list[np.ndarray]], rdmaq_name: str, baselines: list[str],
             settings: dict[int, str], seed: int = 0) -> list[str]:
    """One line per setting (attackers -> its name): ``samples`` maps (queue, attackers) to
    the per-sub-run latencies (ns) of one reader count, sub-runs in the same order for every
    queue."""
    rng = np.random.default_rng(seed)
    out = []
    for attackers, name in settings.items():
        mine = samples.get((rdmaq_name, attackers))
        theirs = {b: samples[(b, attackers)] for b in baselines if (b, attackers) in samples}
        pairs = pairs_of(mine, theirs) if mine is not None and theirs else []
        if not pairs:
            why = f"no samples of {rdmaq_name}" if mine is None else "no vLLM queue measured"
            out.append(f"verdict, {name}: none ({why})")
            continue
        out.append(line(name, rdmaq_name, {p: figure(pairs, q, rng) for p, q in PERCENTILES}))
    return out
