"""Which tests run which lines: the coverage map that selects each mutant's tests.

One run of the test universe in a scratch copy of the tree, with the
coverage build of the shm extension (build.py) and coverage.py in every
Python process (cov/sitecustomize.py, cov/covplugin.py): per test, the lines
of rdmaq/ it ran (in pytest's process and in every process it started) and
the lines of csrc/ (the extension's, and those of the C test binaries the
test built: tests/c/Makefile honours CFLAGS, set to --coverage here).
The tests run in shards, one pytest process each, in parallel.

The map (JSON): tests (node id, seconds, outcome) and, per source file,
line -> indices of the tests that ran it.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent


def shard(files, weights, n):
    """Test files in n shards of about equal weight (largest first)."""
    shards = [[] for _ in range(n)]
    load = [0.0] * n
    for f in sorted(files, key=lambda f: -weights.get(f, 1.0)):
        i = load.index(min(load))
        shards[i].append(f)
        load[i] += weights.get(f, 1.0)
    return [s for s in shards if s]


def private_shm():
    """A command prefix that gives what follows a /dev/shm of its own (root and unshare
    needed, else none): parallel runs never see each other's queues (a writer sweeps
    the segments of dead writers, which another run's test may be looking at), and
    what a killed test leaves goes with it."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return []
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        return []
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount -t tmpfs -o mode=1777,size=8g rdmaq-mutation /dev/shm && exec "$@"', "sh"]


def run_shards(tree: Path, python: str, covdir: Path, files, pytest_args, shards=2, limit=1800,
               weights=None, env_extra=None):
    """Run ``files`` (paths relative to the tree) under coverage; returns tests.json records."""
    procs = []
    records = []
    for k, part in enumerate(shard(files, weights or {}, shards)):
        d = covdir / f"s{k}"
        d.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{HERE / 'cov'}",
                   PYTHONDONTWRITEBYTECODE="1", RDMAQ_MUT_COVDIR=str(d),
                   RDMAQ_MUT_SOURCE=str(tree / "rdmaq"), RDMAQ_MUT_TEST="",
                   GCOV_PREFIX=str(d / "gcda" / "between"),
                   # the C tests' builds too; atomic counters, or TSan reports them as races;
                   # fork() itself, not GCC's __gcov_fork, which zeroes a child's counters after
                   # the atfork handlers ran (ring.c's fork count would show as never run)
                   CFLAGS="-g --coverage -fprofile-update=atomic -fno-builtin-fork",
                   # -O0 and coverage in every process: slower than the tiers' runs
                   RDMAQ_TIMEOUT_SCALE="4",
                   **(env_extra or {}))
        env.pop("RDMAQ_REQUIRE_ALL", None)
        log = open(d / "pytest.log", "w")
        p = subprocess.Popen([*private_shm(), python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "covplugin",
                              "--basetemp", str(d / "tmp"), *pytest_args, *part],
                             cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        procs.append((p, d, log))
    end = time.monotonic() + limit
    for p, d, log in procs:
        try:
            p.wait(max(1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.wait()
        log.close()
        try:
            tests = json.loads((d / "tests.json").read_text())
        except FileNotFoundError:
            raise RuntimeError(f"coverage run of {d.name} wrote no tests.json:\n"
                               f"{(d / 'pytest.log').read_text()[-3000:]}") from None
        if p.returncode not in (0, 1):  # 1: some tests failed, reported per test
            print(f"cover: the coverage run of {d.name} ended early (exit {p.returncode}), "
                  f"after {len(tests)} tests:\n{(d / 'pytest.log').read_text()[-1500:]}", flush=True)
        for t in tests:
            t["covdir"] = str(d)
        records += tests
    return records


def python_lines(covdirs, tree: Path, nodeids):
    """{rdmaq/x.py: {line: {nodeid, ...}}} from the shards' coverage data."""
    import coverage

    out: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for d in covdirs:
        files = [str(f) for f in Path(d).glob(".coverage*")]
        if not files:
            continue
        data = coverage.CoverageData(basename=str(Path(d) / ".coverage.all"))
        cov = coverage.Coverage(data_file=str(Path(d) / ".coverage.all"), config_file=False)
        cov.combine(files, keep=True)
        data = cov.get_data()
        for path in data.measured_files():
            rel = os.path.relpath(path, tree)
            if rel.startswith(".."):
                continue
            for line, contexts in data.contexts_by_lineno(path).items():
                for c in contexts:
                    # the main process: "|nodeid" or "nodeid"; a child: "nodeid" (its static context)
                    c = c.strip("|").split("|")[-1]
                    if c in nodeids:
                        out[rel][line].add(c)
    return out


def _gcov_dir(d: Path):
    """(source, line, count) of every instrumented line, from every .gcda of one
    directory (one gcov call)."""
    names = sorted(f.name for f in d.glob("*.gcda"))
    if not names:
        return []
    p = subprocess.run(["gcov", "-j", "-t", *names], cwd=d, capture_output=True, text=True, timeout=300)
    out = []
    for doc in p.stdout.splitlines():
        if not doc.startswith("{"):
            continue
        info = json.loads(doc)
        cwd = info.get("current_working_directory", "")
        for f in info.get("files", []):
            src = os.path.normpath(os.path.join(cwd, f["file"]))
            out += [(src, ln["line_number"], ln["count"]) for ln in f["lines"]]
    return out


def c_lines(records, tree: Path, jobs=4, executable=None):
    """{csrc/x.c: {line: {nodeid, ...}}} from each test's gcda directory; the lines gcov
    instruments (run or not) are added to ``executable``."""
    out: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    executable = executable if executable is not None else defaultdict(set)
    work = []
    for t in records:
        prefix = Path(t["covdir"]) / "gcda" / t["gcda"]
        if not prefix.is_dir():
            continue
        dirs = set()
        for gcda in prefix.rglob("*.gcda"):
            gcno = Path("/") / gcda.relative_to(prefix).with_suffix(".gcno")
            if gcno.exists():
                shutil.copy2(gcno, gcda.with_suffix(".gcno"))
                dirs.add(gcda.parent)
        work += [(t["nodeid"], d) for d in sorted(dirs)]
    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        for (nodeid, _), lines in zip(work, ex.map(lambda w: _gcov_dir(w[1]), work)):
            for src, ln, count in lines:
                rel = os.path.relpath(src, tree)
                if rel.startswith("csrc/"):
                    executable[rel].add(ln)
                    if count > 0:
                        out[rel][ln].add(nodeid)
    return out


def build_map(records, tree: Path, covdirs):
    tests = [t for t in records]
    nodeids = {t["nodeid"] for t in tests}
    index = {t["nodeid"]: i for i, t in enumerate(tests)}
    lines = {}
    executable = defaultdict(set)
    for per_file in (python_lines(covdirs, tree, nodeids), c_lines(records, tree, executable=executable)):
        for rel, by_line in per_file.items():
            lines[rel] = {str(ln): sorted(index[n] for n in ids) for ln, ids in sorted(by_line.items())}
    return {"tests": [{"nodeid": t["nodeid"], "seconds": t.get("seconds", 0.0), "outcome": t["outcome"],
                       "python": t.get("python", "suite")} for t in tests],
            "lines": lines, "executable": {rel: sorted(v) for rel, v in executable.items()}}


def merge(a, b):
    """Two maps of different test universes (the suite's venv, vLLM's) in one."""
    off = len(a["tests"])
    lines = {k: dict(v) for k, v in a["lines"].items()}
    for rel, by_line in b["lines"].items():
        dst = lines.setdefault(rel, {})
        for ln, ids in by_line.items():
            dst[ln] = sorted(set(dst.get(ln, [])) | {i + off for i in ids})
    executable = {k: sorted(set(a.get("executable", {}).get(k, [])) | set(b.get("executable", {}).get(k, [])))
                  for k in set(a.get("executable", {})) | set(b.get("executable", {}))}
    return {"tests": a["tests"] + b["tests"], "lines": lines, "executable": executable}


def main_check():
    """python cover.py MAP: a summary of a map (tests, lines per file)."""
    m = json.loads(Path(sys.argv[1]).read_text())
    print(f"{len(m['tests'])} tests, {sum(t['outcome'] == 'passed' for t in m['tests'])} passed")
    for rel, by_line in sorted(m["lines"].items()):
        print(f"  {rel:32s} {len(by_line):5d} lines run")


if __name__ == "__main__":
    main_check()
