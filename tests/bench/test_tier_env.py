"""The bench tier runs in the suite's venv (tests/bench/ci.sh sets RDMAQ_BENCH_VENV), never in
whatever Python is first on PATH, nor in the system's."""
import os
import sys

import pytest

VENV = os.environ.get("RDMAQ_BENCH_VENV")


@pytest.mark.skipif(not VENV, reason="RDMAQ_BENCH_VENV unset: not run by tests/bench/ci.sh")
def test_tier_runs_in_the_suite_venv():
    assert sys.prefix != sys.base_prefix, f"{sys.executable} is not a venv's interpreter"
    assert os.path.samefile(sys.prefix, VENV), (sys.prefix, VENV)
