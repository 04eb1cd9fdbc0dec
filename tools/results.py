"""Benchmark runs as data: one folder per run under docs/results/, named
``<date>-<machine>-<commit>-<slug>``, holding the run's raw result files as the benchmark wrote
them, a ``run.json`` (machine, date, commit, command, what it measured, and where each came
from) and a ``summary.md`` generated from both; docs/results/README.md, the index, is generated
from the folders.

    python -m tools.results new RESULT.json [MORE...] --machine dev2core --slug quick \\
        --measured "what the run measured"      # a new run folder, its summary, the index
    python -m tools.results                     # rewrite every summary.md and the index
    python -m tools.results --check             # exit 1 where one differs (tools.gen_tables
                                                # --check, and so a core test, checks them too)

Run from the checkout's root.  ``new`` takes the commit from ``--commit`` or the checkout's
HEAD, the date from the result file's ``machine.time_start`` (else today) and the command from
its ``argv``; it copies the files and never rewrites them, except that a JSON file of 64 KiB or
more is kept gzip-compressed (``NAME.json.gz``, its bytes unchanged inside): the repository
travels whole, beside the GPU machine's payload, in calls of 64 MiB (bench/device/).
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path("docs") / "results"
SCHEMA = "rdmaq-run/1"
REQUIRED = ("machine", "date", "commit", "command", "measured")
GZIP_FROM_BYTES = 64 << 10  # a JSON result file this large is kept compressed (about a tenth)
# what `rdmaq` command wrote a result file of each schema (its argv follows)
COMMAND = {"rdmaq-bench/1": "rdmaq bench", "rdmaq-bench-step/1": "rdmaq bench step",
           "rdmaq-bench-serve/1": "rdmaq bench serve"}
SLUG = re.compile(r"[a-z0-9][a-z0-9.\-]*")


def folders(root: Path = REPO) -> list[Path]:
    """Every run folder, oldest first (the names start with the date)."""
    return sorted(p.parent for p in (root / RESULTS).glob("*/run.json"))


def load_run(folder: Path) -> dict[str, Any]:
    run = json.loads((folder / "run.json").read_text())
    missing = [k for k in REQUIRED if not run.get(k)]
    if missing:
        raise ValueError(f"{folder.name}/run.json: no {', '.join(missing)} (write 'unknown' where it cannot be known)")
    return run


def commands(run: dict[str, Any]) -> list[str]:
    c = run["command"]
    return c if isinstance(c, list) else [c]


def run_link(name: str, prefix: str, root: Path = REPO) -> str:
    """A table cell naming a run: its date and commit, linking its folder (``prefix`` is the
    path from the citing document to docs/)."""
    run = load_run(root / RESULTS / name)
    commit = "commit unknown" if run["commit"] == "unknown" else run["commit"]
    return f"[{run['date']}, {commit}]({prefix}results/{name}/)"


# --- what a summary shows of each result file --------------------------------------------------

def _fmt(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:.2g}" if abs(v) < 0.1 else f"{v:.2f}"


def _micro(result: dict[str, Any]) -> list[str]:
    """rdmaq ÷ the better vLLM per cell, as the benchmark's report computed it."""
    rows = [r for r in result.get("ratios", []) if r.get("queue")]
    if not rows:
        return ["no ratios in the file (no vLLM ran beside rdmaq)"]
    out = ["| queue | readers | attackers | size | pace | p50 ratio | p99 ratio |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        pace = f"{r['pace_ns'] / 1e6:g} ms" if r.get("pace_ns") else "back to back"
        out.append(f"| `{r['queue']}` | {r.get('readers')} | {r.get('attackers')} | {r.get('size')} | {pace} | "
                   f"{_fmt(r.get('p50_ratio'))} | {_fmt(r.get('p99_ratio'))} |")
    return out


def _step(result: dict[str, Any]) -> list[str]:
    rows = result.get("ratios", [])
    if not rows:
        return ["no ratios in the file"]
    out = ["| TP | setting | step p50 ratio | step p99 ratio |", "|---|---|---|---|"]
    out += [f"| {r['tp']} | {r['setting']} | {_fmt(r.get('step_p50'))} | {_fmt(r.get('step_p99'))} |" for r in rows]
    return out


def _serve(result: dict[str, Any]) -> list[str]:
    runs = result.get("runs", [])
    settings = sorted({r["setting"] for r in runs})
    queues = sorted({r["queue"] for r in runs})
    return [f"{len(runs)} client runs: queues {', '.join(f'`{q}`' for q in queues)}; settings "
            f"{', '.join(settings)}. `rdmaq bench serve --report FILE` prints its tables."]


def is_json(path: Path) -> bool:
    return path.name.endswith((".json", ".json.gz"))


def read_json(path: Path) -> Any:
    """A result file's JSON, from ``NAME.json`` or ``NAME.json.gz``."""
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.name.endswith(".gz") else data)


def describe(path: Path) -> list[str]:
    """A result file's lines in its run's summary: what it is and, for the microbenchmark and
    the step benchmark, its ratios."""
    try:
        result = read_json(path)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return []
    schema = result.get("schema", "") if isinstance(result, dict) else ""
    if schema.startswith("rdmaq-bench/"):
        return _micro(result)
    if schema.startswith("rdmaq-bench-step/"):
        return _step(result)
    if schema.startswith("rdmaq-bench-serve/"):
        return _serve(result)
    return []


def summary(folder: Path) -> str:
    """The run folder's summary.md: its run.json in words, then each result file."""
    run = load_run(folder)
    lines = [f"# {folder.name}", "",
             "Generated by `python -m tools.results` from `run.json` and the result files; do not edit.", "",
             f"- **measured**: {run['measured']}",
             f"- **machine**: {run['machine']}",
             f"- **date**: {run['date']} ({run.get('date_from', 'as recorded')})",
             f"- **commit**: {run['commit']} ({run.get('commit_from', 'as recorded')})"]
    if run.get("added_by"):
        lines.append(f"- **added to the repository by**: {run['added_by']}")
    if run.get("notes"):
        lines.append(f"- **notes**: {run['notes']}")
    if (folder / "README.md").exists():
        lines.append("- **the run's own notes**: [README.md](README.md)")
    lines += ["", "## Command", "", "```bash", *commands(run), "```", "", "## Files", ""]
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in ("run.json", "summary.md"))
    top = [p for p in files if p.parent == folder]
    for sub in sorted({p.parent for p in files} - {folder}):
        n = sum(1 for p in files if p.parent == sub)
        lines.append(f"- `{sub.relative_to(folder)}/`: {n} files")
    for p in top:
        lines.append(f"- [`{p.name}`]({p.name})")
    for p in top:
        if is_json(p) and (body := describe(p)):
            lines += ["", f"### `{p.name}`: rdmaq ÷ vLLM", "", *body]
    return "\n".join(lines) + "\n"


def index(root: Path = REPO) -> str:
    """docs/results/README.md: every run, newest first."""
    rows = []
    for folder in reversed(folders(root)):
        run = load_run(folder)
        rows.append(f"| [{folder.name}]({folder.name}/) | {run['date']} | {run['machine']} | {run['commit']} | "
                    f"{run['measured']} |")
    return "\n".join([
        "# Benchmark results", "",
        "Generated by `python -m tools.results` from the run folders; do not edit.", "",
        "One folder per run, `<date>-<machine>-<commit>-<slug>/`: the result files as the benchmark wrote them "
        "(a JSON file of 64 KiB or more gzip-compressed, `NAME.json.gz`: `gunzip -k` gives it back), "
        "`run.json` (machine, date, commit, command, what it measured, and where each of these came from: "
        "`unknown` where nothing recorded it) and `summary.md`. Analyses that read them: "
        "[../investigations/](../investigations/); the method and the headline tables: "
        "[../benchmarks.md](../benchmarks.md).", "",
        "Add a run (from the checkout's root; the commit is HEAD's unless `--commit` names it):", "",
        "```bash",
        "python -m tools.results new out.json --machine dev2core --slug quick --measured \"rdmaq bench --quick\"",
        "```", "",
        "| run | date | machine | commit | measured |", "|---|---|---|---|---|", *rows, ""])


def generated(root: Path = REPO) -> dict[str, str]:
    """Each generated file (path relative to root) and its text."""
    out = {str(RESULTS / "README.md"): index(root)}
    for folder in folders(root):
        out[str((folder / "summary.md").relative_to(root))] = summary(folder)
    return out


def stale(root: Path = REPO) -> list[str]:
    return [p for p, text in generated(root).items()
            if not (root / p).exists() or (root / p).read_text() != text]


def write(root: Path = REPO) -> None:
    for p, text in generated(root).items():
        (root / p).write_text(text)


# --- a new run ----------------------------------------------------------------------------------

def _git_head(root: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=7", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out or "unknown"


def new_run(files: list[Path], machine: str, slug: str, measured: str, *, commit: str | None = None,
            date: str | None = None, root: Path = REPO) -> Path:
    """A run folder for ``files`` (copied as they are): its run.json, summary.md and the index."""
    if not files:
        raise ValueError("no result file given")
    for f in files:
        if not f.is_file():
            raise ValueError(f"{f}: no such file")
    if not SLUG.fullmatch(slug) or not SLUG.fullmatch(machine):
        raise ValueError(f"machine {machine!r} and slug {slug!r}: lower-case letters, digits, '.' and '-' only")
    starts, cmds = [], []
    for f in files:
        try:
            result = json.loads(f.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue
        if not isinstance(result, dict):
            continue
        start = (result.get("machine") or {}).get("time_start")
        if start:
            starts.append(start)
        prefix = COMMAND.get(result.get("schema", ""))
        argv = result.get("argv")
        if prefix and argv:
            if prefix == "rdmaq bench serve" and argv[:2] == ["bench", "serve"]:
                argv = argv[2:]
            cmd = f"{prefix} {shlex.join(argv)}"
            if cmd not in cmds:
                cmds.append(cmd)
    date_from = "the result files' machine.time_start" if starts and not date else "given"
    if not date:
        date = min(starts)[:10] if starts else time.strftime("%Y-%m-%d", time.gmtime())
        if not starts:
            date_from = "the day the folder was made"
    commit_from = "given" if commit else "the checkout's HEAD when the folder was made"
    commit = commit or _git_head(root)
    folder = root / RESULTS / f"{date}-{machine}-{commit.split()[0]}-{slug}"
    if folder.exists():
        raise ValueError(f"{folder.relative_to(root)} exists already: choose another --slug")
    folder.mkdir(parents=True)
    for f in files:
        if f.suffix == ".json" and f.stat().st_size >= GZIP_FROM_BYTES:
            # mtime 0 and no name: the same file always compresses to the same bytes
            (folder / f"{f.name}.gz").write_bytes(gzip.compress(f.read_bytes(), mtime=0))
        else:
            shutil.copy2(f, folder / f.name)
    run = {"schema": SCHEMA, "machine": machine, "date": date, "date_from": date_from, "commit": commit,
           "commit_from": commit_from, "command": (cmds[0] if len(cmds) == 1 else cmds) or "unknown",
           "measured": measured}
    (folder / "run.json").write_text(json.dumps(run, indent=1, ensure_ascii=False) + "\n")
    (folder / "summary.md").write_text(summary(folder))
    (root / RESULTS / "README.md").write_text(index(root))
    return folder


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.results", description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="only say which generated files differ (exit 1)")
    sub = ap.add_subparsers(dest="cmd")
    n = sub.add_parser("new", help="a new run folder from result files")
    n.add_argument("files", nargs="+", type=Path)
    n.add_argument("--machine", required=True, help="a short name: dev2core, h200, h100, ...")
    n.add_argument("--slug", required=True, help="what the run is, in a word or two: quick, tp8-hogs, ...")
    n.add_argument("--measured", required=True, help="what the run measured, in a sentence")
    n.add_argument("--commit", help="the commit measured (default: the checkout's HEAD)")
    n.add_argument("--date", help="YYYY-MM-DD (default: the result file's start, else today)")
    a = ap.parse_args(argv)
    if a.cmd == "new":
        try:
            folder = new_run(a.files, a.machine, a.slug, a.measured, commit=a.commit, date=a.date)
        except ValueError as e:
            print(f"python -m tools.results new: {e}", file=sys.stderr)
            return 2
        print(folder.relative_to(REPO))
        return 0
    if a.check:
        bad = stale()
        for p in bad:
            print(f"{p}: differs from its run folders; run python -m tools.results")
        return 1 if bad else 0
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
