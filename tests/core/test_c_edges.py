"""C tests of edges that Python never reaches, under ASan+UBSan, built by
tests/c/Makefile and run by tests/c/run.sh:

ring_edges      the fork count in a child, a segment that cannot be mapped,
                watching pid 1, drop_reader's bitmap past its first word, a
                credit fetch before waiting, try_put while an ABORT is owed
spin_preempted  a spin that loses its CPU (a made-up clock): what it counts;
                a deadline at clock zero
busy_preempted  busy.c's next verdict after a preemption weighs only what
                came after it
reader_nap      a reader's nap to its predicted window plans the next get;
                a new reader's back-off after a preempted window
"""
import os
import shutil
import subprocess

import pytest

TESTS_C = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "c")
UNITS = ["ring_edges", "spin_preempted", "busy_preempted", "reader_nap"]


@pytest.mark.parametrize("unit", UNITS)
def test_c_edge(unit, c_build):
    """Each check of tests/c/test_<unit>.c holds (the binary prints PASS)."""
    for tool in ("make", "gcc"):
        if shutil.which(tool) is None:
            pytest.fail(f"no {tool}: install it (the CI script does)")
    exe = c_build / "asan" / f"test_{unit}"
    subprocess.run(["make", "-s", "--no-print-directory", "-C", TESTS_C, f"O={c_build}", str(exe)],
                   check=True, timeout=120)
    p = subprocess.run([os.path.join(TESTS_C, "run.sh"), "asan", str(exe)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("PASS"), p.stdout
