"""C unit tests of single concepts (tests/c/test_<concept>.c), under ASan+UBSan."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CSRC = os.path.join(ROOT, "csrc")
UNITS = {
    "cadence": ["cadence.c"],
}


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_c_unit(unit, tmp_path):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.fail("no C compiler: install gcc (the CI script does)")
    exe = tmp_path / f"test_{unit}"
    subprocess.run([cc, "-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-I", CSRC,
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    os.path.join(ROOT, "tests", "c", f"test_{unit}.c"),
                    *(os.path.join(CSRC, s) for s in UNITS[unit]), "-o", str(exe)],
                   check=True, timeout=120)
    p = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("PASS"), p.stdout
