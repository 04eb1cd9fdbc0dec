"""``stats`` and ``last_trace`` from other threads while ``close()`` frees the endpoint.

They return the live values, or after close the values as they were, never
``{}`` nor another trace, and they never reach the freed C object: the same
rounds (tests/close_race.py) run in-process, then against an extension built
with AddressSanitizer, where a read of freed memory ends the child with a report.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import close_race

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
COMPILE_TIMEOUT_S = 240
RUN_TIMEOUT_S = 180


def test_stats_and_last_trace_while_another_thread_closes():
    assert close_race.run(30) == []


def _asan_runtime():
    path = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True,
                          check=True).stdout.strip()
    if not os.path.isabs(path):
        pytest.fail("gcc has no libasan.so: install libasan (the CI script does)")
    return path


@pytest.mark.timeout(2 * (COMPILE_TIMEOUT_S + RUN_TIMEOUT_S))
def test_stats_and_last_trace_while_closing_touch_no_freed_memory(tmp_path):
    if shutil.which("gcc") is None:
        pytest.fail("no gcc: install it (the CI script does)")
    # A copy of the package with its extension built under ASan (rdmaq/_build.py's RDMAQ_SANITIZE).
    shutil.copytree(ROOT / "rdmaq", tmp_path / "rdmaq",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copytree(ROOT / "csrc", tmp_path / "csrc")
    build = ("import sys; sys.path.insert(0, '.'); from rdmaq._build import ffibuilder; "
             "ffibuilder.compile(tmpdir='.')")
    subprocess.run([sys.executable, "-c", build], cwd=tmp_path, check=True, capture_output=True,
                   env=dict(os.environ, RDMAQ_SANITIZE="address"), timeout=COMPILE_TIMEOUT_S)
    env = dict(os.environ, LD_PRELOAD=_asan_runtime(), PYTHONPATH=f"{tmp_path}{os.pathsep}{TESTS}",
               ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:exitcode=99")  # the interpreter's own
    p = subprocess.run([sys.executable, str(TESTS / "close_race.py"), "20"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert "AddressSanitizer" not in p.stderr, p.stderr[-4000:]
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    assert p.stdout.startswith("0 wrong values")
