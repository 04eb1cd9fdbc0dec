"""C unit tests of single concepts (tests/c/test_<concept>.c), under ASan+UBSan,
built by tests/c/Makefile and run by tests/c/run.sh.  Among them the edges Python never
reaches: ring_edges (a fork child's count, a segment that cannot be mapped, drop_reader past
its first word, try_put while an ABORT is owed, ...), spin_preempted (a spin that loses its
CPU, on a made-up clock), busy_preempted, reader_nap (the nap to a predicted window), proc_files
(/proc files that cannot be read), peer_check (a dead peer behind any timeout pattern), wait_clock
(each boundary of a wait, on a clock the test moves)."""
import os
import shutil
import subprocess

import pytest

TESTS_C = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "c")
UNITS = ["cadence", "wait", "recovery", "cadence_limits", "ring_api", "window", "slice", "busy", "schedstat",
         "paced", "ring_edges", "spin_preempted", "busy_preempted", "reader_nap",
         "proc_files", "peer_check", "wait_clock"]


@pytest.mark.parametrize("unit", UNITS)
def test_c_unit(unit, c_build):
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
