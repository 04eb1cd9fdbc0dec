"""The generated mutation sweep: mutants made by rule, each run against the tests
that execute its line.

    python tests/mutation/sweep.py                      # the full sweep: every mutant
    python tests/mutation/sweep.py --sample 40 --seed S # a seeded random sample (CI)
    python tests/mutation/sweep.py --list               # the mutants, generated only
    python tests/mutation/sweep.py --only ID ... --keep # some mutants, scratch trees kept

Steps:
 1. generate every mutant of the scope (SCOPE below) by rule: gen_c.py for
    csrc/, gen_py.py for rdmaq/; each has a stable id (file, function,
    rule, the line's text, what changes), so reasons.toml follows the code;
 2. choose them: all, --sample N (random.Random(seed)), or --only;
 3. the coverage map (cover.py): the test universe run once in a scratch
    tree with the coverage build; per test, the lines it ran;
 4. --workers scratch trees, each with its own build, take mutants in turn:
    a C mutant first compiles alone (-g0): a compile error makes it
    stillborn, an object identical to the original's equivalent (trivial
    compiler equivalence); else its file is recompiled and the extension
    relinked;  then the tests that ran its lines, fastest first, `pytest -x`:
    a failure (or the time limit: a hang) kills it; all passing, it survives;
 5. the table (--out, markdown) per file: generated, chosen, stillborn,
    equivalent, killed, survived; every survivor with its reason from
    reasons.toml, or "no reason yet".

The score is killed / (chosen - stillborn - equivalent).  Equivalent: the
compiler's (identical object) and the mutants reasons.toml marks
`equivalent = true`.  Exit status: 0 at or above --min-score, 1 below, 2
when the run is broken (a failing build, no coverage map).
"""
from __future__ import annotations

import argparse
import ast
import concurrent.futures
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parents[1]))  # the checkout's root: tools/

from tools.mutation_result import SCHEMA, per_file, rows_of, scrub_rows, table  # noqa: E402

import build  # noqa: E402
import cover  # noqa: E402
import gen_c  # noqa: E402
import gen_py  # noqa: E402
from run import ROOT, remove_orphan_segments, scratch_copy, vllm_python  # noqa: E402
from run import _segments as shm_segments  # noqa: E402

REASONS = HERE / "reasons.toml"

# What is mutated, and what is not (docs/testing.md says why).
C_SCOPE = "csrc/**/*.c"
C_OUT = ("csrc/verbs/*.c",)  # their tests need the SoftRoCE VM
PY_SCOPE = "rdmaq/**/*.py"
PY_OUT = (
    "rdmaq/transport/verbs/*",  # the SoftRoCE VM
    "rdmaq/_build.py",  # runs when the extension is built, not when the tests run
    "rdmaq/vllm/plugin.py",  # its tests need vLLM's full CPU build (the vllm tier's venv-cpu)
    "rdmaq/softroce.py",  # loads rdma_rxe and configures a netdev: the SoftRoCE VM
)
VLLM_PY = "rdmaq/vllm/*"  # tested in the vllm tier's venv-mq

# The test universe: what the core tier runs, and the vLLM adapter's tests in venv-mq.
SUITE_TESTS = ["tests/core", "tests/cli", "tests/doctor"]
VLLM_TESTS = ["tests/vllm/test_queue.py", "tests/vllm/test_upstream_adapted.py", "tests/vllm/test_placement.py",
              "tests/vllm/test_adapter_edges.py"]
PYTEST = ["-p", "no:cacheprovider", "--transport", "shm"]
DESELECT = [
    # volume: 20,000 to 400,000 messages, behaviour that test_framing, test_flow_control
    # and the others check in small; a mutant that survives them would pay minutes here
    "tests/core/test_soak.py",
    "tests/core/test_broadcast.py",
]


def scope_files():
    def out(rel, pats):
        return any(Path(rel).match(p) for p in pats)
    c = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(C_SCOPE))
    py = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(PY_SCOPE))
    return [f for f in c if not out(f, C_OUT)], [f for f in py if not out(f, PY_OUT)]


def mutant_id(m, source_lines):
    text = " ".join(source_lines[m.line - 1].split())
    h = hashlib.sha1("\0".join([m.file, m.function, m.rule, text, m.original, m.replacement])
                     .encode()).hexdigest()[:10]
    return f"{m.file}:{m.function}:{m.rule}:{h}"


def generate_all(root=ROOT, vllm=True):
    c_files, py_files = scope_files()
    out = []
    for rel in c_files + py_files:
        if not vllm and Path(rel).match(VLLM_PY):
            continue
        gen = gen_c if rel.endswith(".c") else gen_py
        lines = (root / rel).read_text().splitlines()
        seen = Counter()
        for m in gen.generate(root / rel, rel):
            if m.rule == "del" and m.function == "<module>":
                continue  # a module that fails to import: every test kills it, nothing learnt
            mid = mutant_id(m, lines)
            seen[mid] += 1
            if seen[mid] > 1:
                mid = f"{mid}.{seen[mid]}"
            out.append((mid, m))
    return out


def load_reasons():
    if not REASONS.exists():
        return {}
    with open(REASONS, "rb") as f:
        doc = tomllib.load(f)
    reasons: dict[str, dict] = {}
    for r in doc.get("mutant", []):
        if r["id"] in reasons:  # two judgements of one mutant: the later would win unseen
            raise SystemExit(f"{REASONS}: {r['id']} is listed twice")
        reasons[r["id"]] = r
    return reasons


# ------------------------------------------------------------------ running tests

RUNNING: set[subprocess.Popen] = set()  # killed with their sessions if the sweep is stopped


STOPPING = threading.Event()


def stop_running():
    STOPPING.set()
    for p in list(RUNNING):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_pytest(tree: Path, python: str, nodeids, limit, basetemp: Path):
    """(outcome, seconds, first failure): outcome 'pass', 'fail' or 'timeout'."""
    # the C tests' objects stay from mutant to mutant: make rebuilds the changed file
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1",
               RDMAQ_C_BUILD=str(basetemp.parent / "c-build"))
    env.pop("RDMAQ_REQUIRE_ALL", None)
    before = shm_segments()
    t0 = time.monotonic()
    argfile = basetemp.parent / "args.txt"
    argfile.write_text("\n".join(nodeids) + "\n")
    p = subprocess.Popen([*cover.private_shm(), python, "-m", "pytest", "-x", "-q", "-rf", *PYTEST, "-o", "timeout=30",
                          "--basetemp", str(basetemp), f"@{argfile}"],
                         cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    RUNNING.add(p)
    timed_out = False
    try:
        out, _ = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        RUNNING.discard(p)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if timed_out:
        out, _ = p.communicate()
    kill_strays(tree)
    secs = time.monotonic() - t0
    remove_orphan_segments(shm_segments() - before)
    out = (out or "").replace(f"{tree}/", "")
    failed = [ln for ln in out.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    if timed_out:
        return "timeout", secs, f"limit of {limit:.0f} s reached"
    if p.returncode == 0:
        return "pass", secs, ""
    if p.returncode in (4, 5):  # usage error, no tests collected: the run's fault, not the mutant's
        return "broken", secs, out[-800:]
    if p.returncode < 0 or "Fatal Python error" in out:
        return "fail", secs, f"crash (exit {p.returncode}): " + (failed[0] if failed else out.strip()[-120:])
    return "fail", secs, (failed[0] if failed else out.strip().splitlines()[-1] if out.strip() else "")


def kill_strays(tree: Path) -> int:
    """Kill what a test left running in ``tree`` (its working directory there), as the run
    that started it has ended: a mutant can keep a command a test started from ending (a
    demo deaf to SIGINT), and the test's time limit ends the test before its clean-up.
    Their number."""
    root, killed = str(tree), 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if int(pid) != os.getpid() and (cwd == root or cwd.startswith(root + os.sep)):
            try:
                os.kill(int(pid), signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


def unparametrized(nodeids):
    """The node ids without their parameters (``f.py::test[a-1]`` -> ``f.py::test``), once each."""
    return list(dict.fromkeys(n.split("[", 1)[0] for n in nodeids))


class Worker:
    def __init__(self, k, base: Path, tmp: Path, pythons):
        self.k = k
        self.dir = tmp / f"w{k}"
        self.tree = self.dir / "tree"
        shutil.copytree(base, self.tree, symlinks=True)
        self.ext = build.Extension(self.tree)
        self.ext.build()
        self.pristine_so = self.ext.so.read_bytes()
        self.pristine_o = {src: self.ext.obj(src).read_bytes() for src in self.ext.compiles}
        self.ref_obj = {}
        self.pythons = pythons

    def reference(self, src):
        if src not in self.ref_obj:
            out = self.dir / "ref.o"
            if not self.ext.object_alone(src, out):
                raise build.BuildError(f"{src} does not compile unmutated")
            self.ref_obj[src] = out.read_bytes()
        return self.ref_obj[src]

    def run(self, mid, m, tests, limit):
        path = self.tree / m.file
        original = path.read_text()
        t0 = time.monotonic()
        try:
            mutated = m.apply(original)
            if m.file.endswith(".c"):
                ref = self.reference(m.file)
                path.write_text(mutated)
                out = self.dir / "mut.o"
                if not self.ext.object_alone(m.file, out):
                    return {"result": "stillborn"}
                if out.read_bytes() == ref:
                    return {"result": "equivalent", "why": "compiles to the same object"}
                try:
                    self.ext.recompile(m.file)
                    self.ext.relink()
                except build.BuildError as e:
                    return {"result": "stillborn", "why": str(e)[-300:]}
            else:
                path.write_text(mutated)
            if not tests:
                return {"result": "survived", "why": "no test runs this line", "tests": 0}
            python = self.pythons[tests[0][1]]
            basetemp = self.dir / "tmp"
            nodeids = [t for t, _ in tests]
            outcome, secs, first = run_pytest(self.tree, python, nodeids, limit, basetemp)
            if outcome == "broken" and "not found" in first:
                # a mutant of a module's constant can rename a test that is parametrized
                # by it: the test functions then, with whatever parameters they have now
                outcome, secs, first = run_pytest(self.tree, python, unparametrized(nodeids), limit, basetemp)
            if outcome == "broken":
                return {"result": "error", "why": first, "seconds": secs, "tests": len(tests)}
            result = {"pass": "survived", "fail": "killed", "timeout": "killed (time limit)"}[outcome]
            return {"result": result, "seconds": secs, "tests": len(tests), "evidence": first}
        finally:
            path.write_text(original)
            if m.file.endswith(".c"):
                for src, data in self.pristine_o.items():
                    if src == m.file:
                        self.ext.obj(src).write_bytes(data)
                self.ext.so.write_bytes(self.pristine_so)
            self.last = time.monotonic() - t0


# ------------------------------------------------------------------ selection

_STARTS: dict[str, dict[int, int]] = {}


def statement_start(rel, text, line):
    """The first line of the statement that ``line`` belongs to (gcov and coverage.py
    count a statement over several lines on one of them, mostly the first)."""
    if rel.endswith(".py"):
        if rel not in _STARTS:
            starts = {}
            for node in ast.walk(ast.parse(text)):  # outer first: inner statements overwrite
                if isinstance(node, ast.stmt):
                    body = getattr(node, "body", None)
                    end = body[0].lineno - 1 if isinstance(body, list) and body else node.end_lineno
                    for ln in range(node.lineno, end + 1):
                        starts[ln] = node.lineno
            _STARTS[rel] = starts
        return _STARTS[rel].get(line, line)
    lines = text.splitlines()
    ln = line
    while ln > 1 and line - ln < 8:
        above = re.sub(r"/\*.*?\*/|//.*$", "", lines[ln - 2]).strip()
        if not above or above.endswith((";", "}")) or above.endswith("{") and not above.endswith("){") \
                and not above.endswith("= {") and ")" in above or above in ("{",) or above.startswith("#"):
            break
        ln -= 1
    return ln


_FUNCS: dict[str, list[tuple[int, int]]] = {}


def in_function(rel, text, line):
    """Is ``line`` of a Python file inside a function body (not module or class level)?"""
    if rel not in _FUNCS:
        _FUNCS[rel] = [(n.body[0].lineno, n.end_lineno) for n in ast.walk(ast.parse(text))
                       if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return any(a <= line <= b for a, b in _FUNCS[rel])


def tests_for(m, cmap, source_text, killers=None):
    """Node ids of the tests that ran the mutant's lines, one universe: first those
    that killed other mutants of the file (most kills first), then fastest first."""
    first = m.line
    last = m.line + source_text[m.start:m.end].count("\n")
    by_line = cmap["lines"].get(m.file, {})
    idx = set()
    for ln in range(first, last + 1):
        idx.update(by_line.get(str(ln), []))
    if m.file.endswith(".py") and not in_function(m.file, source_text, first):
        # module or class level: it ran when the module was imported, in whichever
        # process imported it first (for pytest's own, before any test): every test
        # that ran a line of the file depends on it
        for ids in by_line.values():
            idx.update(ids)
    executable = set(cmap.get("executable", {}).get(m.file, ()))
    own = any(ln in executable for ln in range(first, last + 1)) if m.file.endswith(".c") else False
    if not idx and not own:  # a line of a statement that starts above: its count is there
        start = statement_start(m.file, source_text, first)
        for ln in range(start, first):
            idx.update(by_line.get(str(ln), []))
    tests = [cmap["tests"][i] for i in idx
             if cmap["tests"][i]["outcome"] == "passed" and cmap["tests"][i]["nodeid"] not in FLAKY
             and not cmap["tests"][i]["nodeid"].startswith(EXCLUDED)]
    universe = "vllm" if Path(m.file).match(VLLM_PY) and any(t["python"] == "vllm" for t in tests) \
        else "suite"
    tests = [t for t in tests if t["python"] == universe]
    kills = (killers or {}).get(m.file, Counter())
    tests.sort(key=lambda t: (-kills[t["nodeid"]], t["seconds"], t["nodeid"]))
    return [(t["nodeid"], t["python"]) for t in tests]


def coverage_map(base: Path, tmp: Path, pythons, need_vllm, log):
    covtree = tmp / "cov" / "tree"
    shutil.copytree(base, covtree, symlinks=True)
    ext = build.Extension(covtree, pythons["suite"], coverage=True)
    ext.build()
    t0 = time.monotonic()
    suite_files = expand_tests(covtree, SUITE_TESTS)
    records = cover.run_shards(covtree, pythons["suite"], tmp / "cov" / "suite", suite_files, PYTEST,
                               shards=2, weights=file_weights())
    log(f"coverage: {len(records)} tests of the suite in {time.monotonic() - t0:.0f} s")
    cmap = cover.build_map(records, covtree, [tmp / "cov" / "suite" / d for d in ("s0", "s1")])
    if need_vllm:
        t0 = time.monotonic()
        ensure_coverage(pythons["vllm"])
        vrec = cover.run_shards(covtree, pythons["vllm"], tmp / "cov" / "vllm", VLLM_TESTS, PYTEST,
                                shards=2)
        for t in vrec:
            t["python"] = "vllm"
        vmap = cover.build_map(vrec, covtree, [tmp / "cov" / "vllm" / d for d in ("s0", "s1")])
        log(f"coverage: {len(vrec)} tests of the vLLM adapter in {time.monotonic() - t0:.0f} s")
        cmap = cover.merge(cmap, vmap)
    failing = [t["nodeid"] for t in cmap["tests"] if t["outcome"] == "failed"]
    if failing:
        log(f"coverage: {len(failing)} tests failed unmutated and select no mutant: "
            + ", ".join(failing[:5]) + (" ..." if len(failing) > 5 else ""))
    return cmap


def expand_tests(tree, roots):
    files = []
    for r in roots:
        p = tree / r
        if p.is_dir():
            files += sorted(str(f.relative_to(tree)) for f in p.rglob("test_*.py"))
        else:
            files.append(r)
    return [f for f in files if f not in DESELECT]


def file_weights():
    """Rough seconds per test file (from an earlier map, if any), to balance the shards."""
    cache = ROOT / "results" / "mutation-map.json"
    if not cache.exists():
        return {}
    w = defaultdict(float)
    for t in json.loads(cache.read_text())["tests"]:
        w[t["nodeid"].split("::")[0]] += t["seconds"]
    return w


def ensure_coverage(python):
    if subprocess.run([python, "-c", "import coverage"], capture_output=True).returncode != 0:
        subprocess.run([python, "-m", "pip", "install", "-q", "coverage"], check=True)


# ------------------------------------------------------------------ report

def killer_of(row):
    m = re.match(r"(?:FAILED|ERROR) (.+?)(?: - .*)?$", row.get("evidence", ""))
    return m.group(1) if m else None


def recheck_killers(rows, w, times, cmap, texts, by_id, one):
    """Each test that killed a mutant, run ``times`` times on the unmutated tree:
    a kill by a test that fails there too proves nothing, so those mutants run
    again with that test left out."""
    killers = sorted({k for r in rows if r["status"] == "killed" for k in [killer_of(r)] if k})
    python = w.pythons["suite"]
    flaky = set()
    for _ in range(times):
        outcome, _, first = run_pytest(w.tree, python, [k for k in killers if k not in flaky], 1800,
                                       w.dir / "tmp")
        while outcome == "fail" and first:  # -x: the first failure; go on without it
            bad = killer_of({"evidence": first})
            if not bad or bad in flaky:
                break
            flaky.add(bad)
            log(f"recheck: {bad} fails on the unmutated tree")
            outcome, _, first = run_pytest(w.tree, python, [k for k in killers if k not in flaky], 1800,
                                           w.dir / "tmp")
    log(f"recheck: {len(killers)} killing tests run {times} times unmutated, {len(flaky)} failed there")
    if not flaky:
        return rows
    FLAKY.update(flaky)
    again = [r["id"] for r in rows if r["status"] == "killed" and killer_of(r) in flaky]
    redone = {r["id"]: r for r in map(one, [(i, by_id[i]) for i in again])}
    return [redone.get(r["id"], r) for r in rows]


FLAKY: set[str] = set()  # tests left out of every selection (see recheck_killers)
EXCLUDED: tuple[str, ...] = ()  # --exclude


def _commit() -> str | None:
    """The checkout's commit (with "+" when it has changes): what the sample ran on."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "csrc", "rdmaq", "tests"], cwd=ROOT,
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+" if dirty else "")


def write_table(out: Path, rows, generated, a, seconds, load):
    _, total = per_file(generated, rows)
    scored = total["killed"] + total["survived"]
    score = 100.0 * total["killed"] / scored if scored else 100.0
    lines = [
        f"# Mutation sweep ({'sample of ' + str(a.sample) + ', seed ' + str(a.seed) if a.sample else 'all mutants'}"
        f"{'; the survivors of ' + Path(a.rerun).name + ' run again' if a.rerun else ''})",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, {a.workers} workers, "
        f"load average {load[0]:.1f} / {load[1]:.1f} at the start / the end; {seconds / 60:.1f} min in all.",
        f"Score: {total['killed']}/{scored} killed ({score:.1f} %); "
        f"{total['equivalent']} equivalent, {total['stillborn']} stillborn, {total['error']} errors.",
        "",
        *table(generated, rows),
    ]
    lines += ["", "## Survivors and equivalent mutants", "",
              "| mutant | line | change | status | reason |", "|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: r["id"]):
        if r["status"] in ("survived", "equivalent", "error"):
            change = f"`{r['original'][:60]}` → `{r['replacement'][:60]}`".replace("|", "\\|")
            lines.append(f"| {r['id']} | {r['line']} | {change} | {r['status']} | "
                         f"{(r.get('reason') or '').replace('|', '/')} |")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    return score


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, help="a random sample of this many mutants")
    ap.add_argument("--seed", default="21", help="the sample's seed (any string)")
    ap.add_argument("--only", nargs="+", metavar="ID", help="only these mutants")
    ap.add_argument("--files", nargs="+", metavar="GLOB", help="only mutants of these files")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--list", action="store_true", help="list the mutants and stop")
    ap.add_argument("--no-vllm", action="store_true", help="leave out the vLLM adapter's mutants")
    ap.add_argument("--vllm-python", help="python of a venv with vLLM (default: venv-mq)")
    ap.add_argument("--min-score", type=float, default=85.0)
    ap.add_argument("--min-scored", type=int, default=0, metavar="K",
                    help="with --sample: draw more (from the same seed) until K mutants count in the "
                         "score (neither stillborn nor equivalent)")
    ap.add_argument("--map", help="reuse this coverage map (JSON) instead of collecting one")
    ap.add_argument("--out", default=str(ROOT / "results" / "mutation-sweep.md"))
    ap.add_argument("--keep", action="store_true", help="keep the scratch trees")
    ap.add_argument("--run-equivalent", action="store_true",
                    help="run the mutants reasons.toml calls equivalent too (else they are not run)")
    ap.add_argument("--recheck", type=int, default=0, metavar="N",
                    help="then run each test that killed a mutant N times on the unmutated tree: "
                         "one that fails there (a flaky test) is reported, its kills re-run without it")
    ap.add_argument("--exclude", nargs="+", default=[], metavar="NODEID",
                    help="leave these tests (node id prefixes) out of every selection (a test found flaky)")
    ap.add_argument("--rerun", metavar="JSON",
                    help="the mutants of an earlier sweep (its .json): run again those that survived "
                         "(or failed to run), keep the others' results")
    a = ap.parse_args(argv)
    def on_term(*_):
        stop_running()
        sys.exit(143)

    signal.signal(signal.SIGTERM, on_term)
    try:
        return sweep(a)
    except (build.BuildError, RuntimeError) as e:
        print(f"sweep: {e}", file=sys.stderr)
        return 2
    finally:
        stop_running()


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sweep(a):
    global EXCLUDED
    EXCLUDED = tuple(a.exclude)
    t_start = time.monotonic()
    load0 = os.getloadavg()
    pythons = {"suite": sys.executable, "vllm": vllm_python(a.vllm_python)}
    have_vllm = os.access(pythons["vllm"], os.X_OK) and not a.no_vllm
    everything = generate_all(vllm=have_vllm)
    generated = Counter(m.file for _, m in everything)
    chosen = everything
    if a.files:
        chosen = [(i, m) for i, m in chosen if any(Path(m.file).match(g) for g in a.files)]
    if a.only:
        chosen = [(i, m) for i, m in chosen if i in a.only]
        missing = set(a.only) - {i for i, _ in chosen}
        if missing:
            print(f"sweep: no mutant {sorted(missing)}", file=sys.stderr)
            return 2
    if a.sample and a.sample < len(chosen):
        chosen = sorted(random.Random(a.seed).sample(chosen, a.sample), key=lambda x: x[0])
    kept_rows = []
    if a.rerun:
        prev = {r["id"]: r for r in rows_of(json.loads(Path(a.rerun).read_text()))}
        chosen = [(i, m) for i, m in everything if i in prev]
        kept_rows = [prev[i] for i, _ in chosen if prev[i]["status"] not in ("survived", "error")]
        chosen = [(i, m) for i, m in chosen if prev[i]["status"] in ("survived", "error")]
        log(f"{len(prev)} mutants in {a.rerun}: {len(kept_rows)} results kept, "
            f"{len(prev) - len(kept_rows) - len(chosen)} no longer generated (out of scope or changed)")
    if not have_vllm and not a.no_vllm:
        log(f"no vLLM venv at {pythons['vllm']}: the vLLM adapter's mutants are left out")
    log(f"{len(everything)} mutants generated, {len(chosen)} chosen" +
        (f" (seed {a.seed!r})" if a.sample else ""))
    if a.list:
        for i, m in chosen:
            print(f"{i}  {m.line}: {m.original!r} -> {m.replacement!r}")
        return 0
    reasons = load_reasons()
    tmp = Path(tempfile.mkdtemp(prefix="rdmaq-sweep-"))
    rows = []
    try:
        base = tmp / "base"
        base.mkdir()
        scratch_copy(base)
        if a.map:
            cmap = json.loads(Path(a.map).read_text())
        else:
            need_vllm = have_vllm and any(Path(m.file).match(VLLM_PY) for _, m in chosen)
            cmap = coverage_map(base, tmp, pythons, need_vllm, log)
            cache = ROOT / "results" / "mutation-map.json"
            cache.parent.mkdir(exist_ok=True)
            cache.write_text(json.dumps(cmap))
        texts = {f: (ROOT / f).read_text() for f in generated}
        seconds = {t["nodeid"]: t["seconds"] for t in cmap["tests"]}
        workers = []
        with concurrent.futures.ThreadPoolExecutor(a.workers) as ex:
            workers = list(ex.map(lambda k: Worker(k, base, tmp, pythons), range(a.workers)))
        log(f"{a.workers} worker trees built")
        free = list(workers)
        killers = defaultdict(Counter)  # file -> test -> mutants it killed
        lock = threading.Lock()
        done = [0]

        def one(item):
            mid, m = item
            if STOPPING.is_set():
                raise SystemExit(143)
            if reasons.get(mid, {}).get("equivalent") and not a.run_equivalent:
                log(f"     equivalent (reasons.toml, not run)            {mid}")
                return {"id": mid, "file": m.file, "line": m.line, "rule": m.rule, "original": m.original,
                        "replacement": m.replacement, "status": "equivalent", "result": "equivalent",
                        "seconds": 0.0, "tests": 0, "evidence": "", "reason": reasons[mid].get("reason", "")}
            with lock:
                w = free.pop()
            try:
                with lock:
                    tests = tests_for(m, cmap, texts[m.file], killers)
                limit = 60 + 3 * sum(seconds.get(t, 5.0) for t, _ in tests)
                r = w.run(mid, m, tests, min(limit, 900))
            finally:
                with lock:
                    free.append(w)
            status = r["result"]
            if status.startswith("killed"):
                status = "killed"
            why = reasons.get(mid, {})
            if status == "survived" and why.get("equivalent"):
                status = "equivalent"
            row = {"id": mid, "file": m.file, "line": m.line, "rule": m.rule, "original": m.original,
                   "replacement": m.replacement, "status": status, "result": r["result"],
                   "seconds": round(w.last, 1), "tests": r.get("tests", 0),
                   "evidence": r.get("evidence", ""), "reason": why.get("reason") or r.get("why", "")}
            with lock:
                done[0] += 1
                n = done[0]
                killer = killer_of(row)
                if status == "killed" and killer:
                    killers[m.file][killer] += 1
            log(f"{n:4d}/{len(chosen)} {r['result']:20s} {w.last:6.1f} s {r.get('tests', 0):4d} tests  {mid}")
            return row

        with concurrent.futures.ThreadPoolExecutor(a.workers) as ex:
            rows = list(ex.map(one, chosen))
            rest = [x for x in everything if x[0] not in {i for i, _ in chosen}]
            more = random.Random(f"{a.seed}+").sample(rest, len(rest)) if a.sample else []
            while a.min_scored and more:
                scored = sum(r["status"] in ("killed", "survived") for r in rows)
                if scored >= a.min_scored:
                    break
                extra, more = more[:a.min_scored - scored], more[a.min_scored - scored:]
                log(f"{scored} mutants scored: {len(extra)} more drawn")
                chosen += extra
                rows += list(ex.map(one, extra))
        if a.recheck:
            rows = recheck_killers(rows, workers[0], a.recheck, cmap, texts, dict(chosen), one)
    finally:
        if a.keep:
            log(f"scratch trees kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    seconds = time.monotonic() - t_start
    load = (load0[0], os.getloadavg()[0])
    rows = sorted(kept_rows + rows, key=lambda r: r["id"])
    for r in rows:  # reasons written since
        why = reasons.get(r["id"], {})
        if r["status"] == "survived" and why.get("equivalent"):
            r["status"] = "equivalent"
        if why.get("reason"):
            r["reason"] = why["reason"]
    # the rows quote test output: no path of this machine goes into the table or the file
    scrub_rows(rows, [(str(tmp), "<scratch>"), (str(ROOT), "."), (str(Path.home()), "~"),
                      (tempfile.gettempdir(), "$TMPDIR")])
    score = write_table(Path(a.out), rows, generated, a, seconds, load)
    result = {"schema": SCHEMA, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "commit": _commit(), "seed": a.seed, "sample": a.sample, "min_scored": a.min_scored,
              "rerun": Path(a.rerun).name if a.rerun else None, "cpus": os.cpu_count(), "workers": a.workers,
              "load": list(load), "seconds": round(seconds, 1), "generated": dict(generated), "rows": rows}
    Path(a.out).with_suffix(".json").write_text(json.dumps(result, indent=1))
    c = Counter(r["status"] for r in rows)
    log(f"mutation score: {c['killed']}/{c['killed'] + c['survived']} killed ({score:.1f} %); "
        f"{c['equivalent']} equivalent, {c['stillborn']} stillborn, {c['error']} errors; "
        f"{seconds / 60:.1f} min; table in {a.out}")
    unexplained = [r["id"] for r in rows if r["status"] == "survived" and not r["reason"]]
    if unexplained:
        log(f"{len(unexplained)} survivors without a reason in reasons.toml: " + ", ".join(unexplained[:10])
            + (" ..." if len(unexplained) > 10 else ""))
    if c["error"]:
        return 2
    return 0 if score >= a.min_score else 1


if __name__ == "__main__":
    sys.exit(main())
