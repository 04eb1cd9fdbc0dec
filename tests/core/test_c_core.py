"""The C core under AddressSanitizer+UBSan and ThreadSanitizer (race check):
tests/c/test_ring.c, built by tests/c/Makefile and run by tests/c/run.sh."""
import os
import shutil
import subprocess

import pytest

TESTS_C = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "c")

# Sanitizer builds and runs are slow (TSan ~15 s at load 4 on 2 cores); each
# step has its own limit so a hang in the C code fails, naming the step.
COMPILE_TIMEOUT_S = 240
RUN_TIMEOUT_S = 180


@pytest.mark.timeout(2 * (COMPILE_TIMEOUT_S + RUN_TIMEOUT_S))
@pytest.mark.parametrize("kind", ["asan", "tsan"])
def test_c_core_under_sanitizer(kind, c_build):
    for tool in ("make", "gcc"):
        if shutil.which(tool) is None:
            pytest.fail(f"no {tool}: install it (the CI script does)")
    exe = c_build / kind / "test_ring"
    subprocess.run(["make", "-s", "--no-print-directory", "-C", TESTS_C, f"-j{os.cpu_count()}",
                    f"O={c_build}", str(exe)], check=True, timeout=COMPILE_TIMEOUT_S)
    try:
        p = subprocess.run([os.path.join(TESTS_C, "run.sh"), kind, str(exe)], capture_output=True,
                           text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{kind}/test_ring still running after {RUN_TIMEOUT_S} s (a lost wake-up?):\n"
                    f"{(e.stdout or b'').decode(errors='replace')[-3000:]}")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "PASS" in p.stdout
