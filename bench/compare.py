"""``rdmaq bench compare REV [options] [-- BENCH-ARGS]``: this checkout against commit REV.

Both trees are installed side by side (``pip install --no-deps --no-build-isolation
--target``; the same tree, by its git tree hash, is installed once), then ``rdmaq bench
BENCH-ARGS`` runs for each in turn, round after round, on this machine, from a directory
outside the checkout so that its source tree does not shadow the installed copy.  Printed
per round: each tree's rdmaq ÷ vLLM (median over the cells of p50, p99, p99.9, from that
tree's own run) and this tree ÷ REV (median over the cells of the rdmaq latencies' ratio,
from the two runs of that round).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rdmaq.command import ArgumentParser, fail

PROG = "rdmaq bench compare"
FIGURES = (("p50", "p50_us", "p50_ratio"), ("p99", "p99_us", "p99_ratio"),
           ("p99.9", "p999_us", "p999_ratio"))
DEFAULT_BENCH = ["--queues", "rdmaq-shm,vllm", "--readers", "1", "--attackers", "0",
                 "--sizes", "64,2K,40K", "--pace", "1ms,10ms", "--idle-window", "0"]


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("rev", metavar="REV", help="the commit to compare against (e.g. main, aed39a8)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default %(default)s)")
    p.add_argument("--repo", default=".", help="the checkout (default: the current directory's)")
    p.add_argument("--out", metavar="DIR",
                   help="keep each run's JSON and output here (default: a temporary directory, removed)")
    p.add_argument("--cache", metavar="DIR",
                   help="install trees here and reuse them by tree hash (default: a temporary directory)")
    p.epilog = ("After --, the arguments of each `rdmaq bench` run (default: "
                + " ".join(DEFAULT_BENCH) + ").")
    return p


def _git(repo: Path, *args: str, env: dict | None = None, stdin: bytes | None = None) -> str:
    r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, input=stdin,
                       env=env, check=False)
    if r.returncode:
        raise SystemExit(fail(PROG, f"git {' '.join(args)}: {r.stderr.decode().strip()}"))
    return r.stdout.decode().strip()


def working_tree_hash(repo: Path) -> str:
    """The git tree of the checkout's files as they are (tracked and untracked, not ignored)."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, GIT_INDEX_FILE=str(Path(d) / "index"))
        _git(repo, "read-tree", "HEAD", env=env)
        _git(repo, "add", "-A", env=env)
        return _git(repo, "write-tree", env=env)


def install(repo: Path, tree: str, cache: Path) -> Path:
    """Install git tree ``tree`` of ``repo`` into cache/<tree> once; return that directory."""
    target = cache / tree[:12]
    if (target / "rdmaq").is_dir():
        return target
    src = cache / f"src-{tree[:12]}"
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", tree], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--no-build-isolation", "--target", str(target), str(src)],
                       capture_output=True, text=True, check=False)
    shutil.rmtree(src, ignore_errors=True)
    if r.returncode:
        raise SystemExit(fail(PROG, f"installing tree {tree[:12]} failed:\n{r.stdout}{r.stderr}"))
    return target


def run_bench(target: Path, bench: list[str], out_json: Path, log: Path) -> dict:
    """One `rdmaq bench` run of the tree installed in ``target``, from a private directory."""
    with tempfile.TemporaryDirectory(prefix="rdmaq-compare-") as d:
        env = dict(os.environ, PYTHONPATH=str(target), TMPDIR=d, VLLM_RPC_BASE_PATH=d)
        cmd = [sys.executable, "-c", "import sys; from rdmaq.cli import main; sys.exit(main())",
               "bench", *bench, "--json", str(out_json)]
        with open(log, "w") as f:
            r = subprocess.run(cmd, cwd=d, env=env, stdout=f, stderr=subprocess.STDOUT, check=False)
    if r.returncode:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise SystemExit(fail(PROG, f"`rdmaq bench` of tree {target.name} exited {r.returncode}:\n{tail}"))
    return json.loads(out_json.read_text())


def _latencies(result: dict) -> dict[tuple, dict]:
    """rdmaq's latency figures per cell and subrun: (queue, readers, attackers, size, pace) -> figures."""
    out = {}
    for c in result["cells"]:
        if not c["queue"].startswith("rdmaq") or c.get("error"):
            continue
        for s in c["subruns"]:
            key = (c["queue"], c["readers"], c["attackers"], s["size"], s["pace_ns"])
            out[key] = s["latency_max_over_readers"]
    return out


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def against_vllm(result: dict) -> dict[str, float | None]:
    """rdmaq ÷ vLLM, the median over the cells of each figure."""
    rs = [r for r in result.get("ratios") or [] if r["queue"].startswith("rdmaq")]
    return {name: _median([r[k] for r in rs if r.get(k) is not None]) for name, _, k in FIGURES}


def between(mine: dict, theirs: dict) -> dict[str, float | None]:
    """This tree's rdmaq latency ÷ REV's, the median over the cells both runs have."""
    a, b = _latencies(mine), _latencies(theirs)
    keys = sorted(set(a) & set(b))
    return {name: _median([a[k][f] / b[k][f] for k in keys if b[k].get(f)]) for name, f, _ in FIGURES}


def _fmt(fig: dict[str, float | None]) -> str:
    return " ".join(f"{n} {'-' if v is None else f'{v:.3f}'}" for n, v in fig.items())


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = build_parser().parse_args(argv[:cut])
    args.bench = argv[cut + 1:]
    if args.rounds < 1:
        return fail(PROG, f"--rounds must be >= 1, got {args.rounds}")
    bench = args.bench or DEFAULT_BENCH
    if "--json" in bench:
        return fail(PROG, "--json is set by compare; use --out DIR to keep the runs")
    repo = Path(_git(Path(args.repo), "rev-parse", "--show-toplevel"))
    try:
        rev_tree = _git(repo, "rev-parse", "--verify", "--quiet", f"{args.rev}^{{tree}}")
    except SystemExit:
        return fail(PROG, f"{args.rev!r} is not a commit of {repo}")
    here_tree = working_tree_hash(repo)
    rev_name = _git(repo, "rev-parse", "--short", args.rev)
    with tempfile.TemporaryDirectory(prefix="rdmaq-compare-") as tmp:
        cache = Path(args.cache).resolve() if args.cache else Path(tmp) / "trees"
        out = Path(args.out).resolve() if args.out else Path(tmp) / "out"
        out.mkdir(parents=True, exist_ok=True)
        trees = {"here": install(repo, here_tree, cache), rev_name: install(repo, rev_tree, cache)}
        summary = []
        for i in range(1, args.rounds + 1):
            results, loads = {}, {}
            for name, target in trees.items():
                with open("/proc/loadavg") as f:
                    loads[name] = " ".join(f.read().split()[:3])
                print(f"== round {i} {name} (tree {target.name}) load {loads[name]}", flush=True)
                results[name] = run_bench(target, bench, out / f"{name}-r{i}.json", out / f"{name}-r{i}.txt")
                print(f"   {name} rdmaq/vllm: {_fmt(against_vllm(results[name]))}", flush=True)
            ratio = between(results["here"], results[rev_name])
            print(f"   here/{rev_name} rdmaq: {_fmt(ratio)}", flush=True)
            summary.append({"round": i, "load": loads, "rdmaq_over_vllm":
                            {n: against_vllm(r) for n, r in results.items()}, "here_over_rev": ratio})
        (out / "compare.json").write_text(json.dumps({"rev": rev_name, "here_tree": here_tree,
                                                      "rev_tree": rev_tree, "bench": bench,
                                                      "rounds": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
