"""The mutation tier: plant each mutant of mutants.toml, one at a time, in a
scratch copy of the tree, build it, run its tests, and tell which ones the
suite caught.

    python tests/mutation/run.py [--ci] [--only ID ...] [--out FILE] [--check]
                                 [--limit S] [--vllm-python PY] [--min-score PCT]

A mutant is killed when its tests fail (a test failure, a crash, or the
per-mutant limit, 60 s by default), and survives when they pass.  Before the
mutants, every test selection in use runs once on the unmutated copy: it must
pass, or no result would mean anything.

Exit status: 0 when the score reaches --min-score (default: 100 with --ci,
90 otherwise); 1 below it; 2 when the run itself is broken: a mutant whose
`original` is not found exactly once (mutants must follow the code), a
baseline that fails, a build that fails, a missing vLLM venv.

Python: the suite's venv runs the runner; mutants marked python = "vllm" run
in a venv with vLLM (--vllm-python, else $RDMAQ_VLLM_CACHE or
~/.cache/rdmaq-vllm, venv-mq: tests/vllm/ci.sh builds it).  The scratch copy
comes first on PYTHONPATH, so tests (and the children they spawn) import the
mutated rdmaq.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MUTANTS = Path(__file__).with_name("mutants.toml")
SHM = "/dev/shm"
PYTEST = ["-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--transport", "shm",
          "-o", "timeout=30"]


class Broken(Exception):
    """The run cannot give a meaningful score."""


def load(path=MUTANTS):
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    selections = doc.get("selections", {})
    mutants = doc.get("mutant", [])
    seen = set()
    for m in mutants:
        for key in ("id", "file", "original", "replacement", "simulates", "tests"):
            if not isinstance(m.get(key), str) or not m[key]:
                raise Broken(f"mutant {m.get('id', '?')}: field {key!r} missing or empty")
        if m["id"] in seen:
            raise Broken(f"mutant id {m['id']} used twice")
        seen.add(m["id"])
        if m["tests"] not in selections:
            raise Broken(f"mutant {m['id']}: no selection {m['tests']!r} in [selections]")
        if m.get("python", "suite") not in ("suite", "vllm"):
            raise Broken(f"mutant {m['id']}: python must be 'suite' or 'vllm'")
        if m["original"] == m["replacement"]:
            raise Broken(f"mutant {m['id']}: replacement equals original")
    return selections, mutants


def check_originals(mutants, tree):
    """Every original must occur exactly once in its file: else fail the run."""
    problems = []
    for m in mutants:
        path = tree / m["file"]
        if not path.exists():
            problems.append(f"{m['id']}: {m['file']} does not exist")
            continue
        n = path.read_text().count(m["original"])
        if n != 1:
            problems.append(f"{m['id']}: original text found {n} times in {m['file']} "
                            "(expected once): update the mutant to follow the code")
    if problems:
        raise Broken("mutants out of date:\n  " + "\n  ".join(problems))


def scratch_copy(dest):
    """Tracked and untracked-not-ignored files, plus the built extensions."""
    files = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    for so in (ROOT / "rdmaq").glob("_rdmaq*.so"):
        shutil.copy2(so, dest / "rdmaq" / so.name)


def build(tree, python):
    p = subprocess.run([python, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree,
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise Broken(f"build failed:\n{(p.stdout + p.stderr)[-3000:]}")


def run_tests(tree, python, args, limit):
    """(passed, seconds, the last lines of output)."""
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    env.pop("RDMAQ_REQUIRE_ALL", None)  # a selection never skips for a missing dependency
    t0 = time.monotonic()
    segments = _segments()
    # its own session: whatever it leaves (readers orphaned by a timed-out
    # test, spawn's resource tracker) is killed with it
    p = subprocess.Popen([python, *PYTEST, *args], cwd=tree, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=limit)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if timed_out:
        out, _ = p.communicate()
    secs = time.monotonic() - t0
    remove_orphan_segments(_segments() - segments)
    out = (out or "").replace(f"{tree}/", "")
    if timed_out:
        return False, secs, f"limit of {limit} s reached\n{out[-1500:]}"
    lines = out.strip().splitlines()
    summary = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))][:3] or lines[-3:]
    return p.returncode == 0, secs, "\n".join(summary)


def _segments():
    try:
        return {n for n in os.listdir(SHM) if n.startswith("rdmaq-")}
    except OSError:
        return set()


def remove_orphan_segments(names):
    """A mutant may crash a writer before its queue is ready, which leaves its
    segment in /dev/shm (named rdmaq-<pid>-...): of the segments that appeared
    during the run, remove those whose creator is dead."""
    for name in names:
        parts = name.split("-")
        if len(parts) < 3 or parts[0] != "rdmaq" or not parts[1].isdigit():
            continue
        try:
            os.kill(int(parts[1]), 0)
        except ProcessLookupError:
            try:
                os.unlink(os.path.join(SHM, name))
            except OSError:
                pass
        except PermissionError:
            pass


def vllm_python(arg):
    if arg:
        return arg
    cache = os.environ.get("RDMAQ_VLLM_CACHE") or os.path.expanduser("~/.cache/rdmaq-vllm")
    return os.path.join(cache, "venv-mq", "bin", "python")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ci", action="store_true", help="only the mutants marked ci = true")
    ap.add_argument("--only", nargs="+", metavar="ID", help="only these mutants")
    ap.add_argument("--out", default=str(ROOT / "results" / "mutation.md"),
                    help="results table (markdown)")
    ap.add_argument("--limit", type=float, default=60, help="seconds per mutant's test run")
    ap.add_argument("--vllm-python", help="python of a venv with vLLM (default: venv-mq)")
    ap.add_argument("--min-score", type=float, help="percent killed needed (default 100 with --ci, else 90)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copy")
    ap.add_argument("--check", action="store_true",
                    help="only check that every mutant still applies (no build, no tests)")
    a = ap.parse_args(argv)
    min_score = a.min_score if a.min_score is not None else (100.0 if a.ci else 90.0)
    try:
        return run(a, min_score)
    except Broken as e:
        print(f"mutation: {e}", file=sys.stderr)
        return 2


def run(a, min_score):
    selections, mutants = load()
    check_originals(mutants, ROOT)  # all of them, whatever is selected
    if a.check:
        print(f"{len(mutants)} mutants, each applies exactly once")
        return 0
    chosen = [m for m in mutants if (not a.ci or m.get("ci")) and (not a.only or m["id"] in a.only)]
    if a.only and len(chosen) != len(set(a.only)):
        raise Broken(f"no mutant named {sorted(set(a.only) - {m['id'] for m in chosen})}")
    pythons = {"suite": sys.executable}
    if any(m.get("python") == "vllm" for m in chosen):
        pythons["vllm"] = vllm_python(a.vllm_python)
        if not os.access(pythons["vllm"], os.X_OK):
            raise Broken(f"mutants of the vLLM adapter need a venv with vLLM: {pythons['vllm']} "
                         "is missing (tests/run_all.sh vllm builds it, or pass --vllm-python)")
    tmp = Path(tempfile.mkdtemp(prefix="rdmaq-mutation-"))
    tree = tmp / "tree"
    rows = []
    try:
        tree.mkdir()
        scratch_copy(tree)
        if not list((tree / "rdmaq").glob("_rdmaq.*so")):
            build(tree, sys.executable)
        pristine = {so.name: so.read_bytes() for so in (tree / "rdmaq").glob("_rdmaq*.so")}
        # the baseline: each selection in use passes on the unmutated copy
        for sel, py in sorted({(m["tests"], m.get("python", "suite")) for m in chosen}):
            ok, secs, out = run_tests(tree, pythons[py], selections[sel], a.limit * 5)
            print(f"baseline {sel:10s} ({py}) {'pass' if ok else 'FAIL'} {secs:5.1f} s", flush=True)
            if not ok:
                raise Broken(f"selection {sel!r} fails without any mutant:\n{out}")
        for m in chosen:
            rows.append(one(m, tree, pythons, selections, a.limit, pristine))
    finally:
        if a.keep:
            print(f"scratch copy kept: {tree}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    killed = sum(r["result"] != "survived" for r in rows)
    score = 100.0 * killed / len(rows) if rows else 100.0
    write_table(Path(a.out), rows, score, a)
    print(f"mutation score: {killed}/{len(rows)} killed ({score:.0f} %), table in {a.out}")
    if score < min_score:
        survivors = ", ".join(r["id"] for r in rows if r["result"] == "survived")
        print(f"mutation: below {min_score:.0f} %; survived: {survivors}", file=sys.stderr)
        return 1
    return 0


def one(m, tree, pythons, selections, limit, pristine):
    path = tree / m["file"]
    original = path.read_text()
    is_c = m["file"].startswith("csrc/")
    t0 = time.monotonic()
    try:
        path.write_text(original.replace(m["original"], m["replacement"], 1))
        if is_c:
            build(tree, sys.executable)
        ok, secs, out = run_tests(tree, pythons[m.get("python", "suite")], selections[m["tests"]], limit)
    finally:
        path.write_text(original)
        if is_c:
            for name, data in pristine.items():
                (tree / "rdmaq" / name).write_bytes(data)
    if ok:
        result = "survived"
    elif out.startswith("limit of"):
        result = "killed (time limit)"
    else:
        result = "killed"
    first = out.splitlines()[0] if out else ""
    print(f"{m['id']:34s} {result:20s} {secs:5.1f} s  {first[:90]}", flush=True)
    return {"id": m["id"], "file": m["file"], "simulates": m["simulates"], "result": result,
            "seconds": secs, "total": time.monotonic() - t0, "evidence": first}


def write_table(out, rows, score, a):
    out.parent.mkdir(parents=True, exist_ok=True)
    load_avg = os.getloadavg()
    lines = [
        f"# Mutation tier results ({'CI subset' if a.ci else 'all mutants'})",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
        f"load average {load_avg[0]:.1f} at the end; limit {a.limit:g} s per mutant's tests.",
        f"Score: {sum(r['result'] != 'survived' for r in rows)}/{len(rows)} killed ({score:.0f} %).",
        "",
        "| mutant | file | simulates | result | tests (s) | first failure |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        ev = r["evidence"].replace("|", "\\|")[:120]
        lines.append(f"| {r['id']} | {r['file']} | {r['simulates']} | {r['result']} | "
                     f"{r['seconds']:.1f} | {ev} |")
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
