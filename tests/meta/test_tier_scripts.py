"""The suite's own scripts: every pytest they run prints its skip reasons, so a log says
what did not run and why (-rs, -ra, or any -r with s or a)."""
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
    {p for pattern in ("tests/**/*.sh", "docker/*.sh", "tests/rxe/vm-run", ".ci/run")
     for p in REPO.glob(pattern)}
)
# `python -m pytest`, or pytest in a command's place (not a package name in a pip install)
PYTEST = re.compile(r"(?:-m\s+pytest|(?:^|\bexec\s+|&&\s*|;\s*|\s--\s+)pytest)(?=\s)")
REPORTS_SKIPS = re.compile(r"\s-r[a-zA-Z]*[sa]")


def logical_lines(text):
    """Shell lines with backslash continuations joined; comment lines dropped."""
    joined = re.sub(r"\\\n", " ", text)
    for n, line in enumerate(joined.splitlines(), 1):
        code = line.strip()
        if code and not code.startswith("#"):
            yield n, code


def pytest_runs(path):
    for n, line in logical_lines(path.read_text()):
        # what a script prints or passes as text is no run of its own
        if re.match(r"(echo|printf|say|log|note|phase|stage \"[^\"]*\" *$)\b", line):
            continue
        if PYTEST.search(line):
            yield n, line


def test_the_scripts_are_found():
    names = {p.relative_to(REPO).as_posix() for p in SCRIPTS}
    assert {"tests/run_all.sh", "tests/bench/ci.sh", "tests/vllm/ci.sh", "tests/rxe/ci.sh",
            "docker/in-vm.sh", "docker/entrypoint.sh"} <= names, names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_pytest_run_prints_skip_reasons(script):
    missing = [f"{script.name}:{n}: {line}" for n, line in pytest_runs(script)
               if not REPORTS_SKIPS.search(line)]
    assert not missing, "pytest without -rs/-ra:\n" + "\n".join(missing)


def test_the_check_finds_a_run_without_skip_reasons(tmp_path):
    script = tmp_path / "ci.sh"
    script.write_text('echo "python -m pytest"\nexec "$PY" -m pytest -q \\\n  tests/x\n'
                      'python -m pytest -q -rs tests/y\n')
    runs = list(pytest_runs(script))
    assert [bool(REPORTS_SKIPS.search(line)) for _, line in runs] == [False, True], runs
