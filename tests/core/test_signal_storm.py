"""Numbered messages under SIGINTs at random moments in the writer and the reader
(tests/signal_storm.py): every put that raised is put again, as the README says,
and the reader gets every message once, in order, whole.

The core tier runs one short storm per message size; the full check is
RDMAQ_STORM_RUNS=10 RDMAQ_STORM_MESSAGES=10000 (docs/testing.md).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

STORM = Path(__file__).resolve().parents[1] / "signal_storm.py"
RUNS = int(os.environ.get("RDMAQ_STORM_RUNS", "1"))
MESSAGES = int(os.environ.get("RDMAQ_STORM_MESSAGES", "1500"))
SEED = int(os.environ.get("RDMAQ_STORM_SEED", "27"))


@pytest.mark.timeout(max(300, RUNS * MESSAGES // 20))
@pytest.mark.parametrize("sizes", ["small", "large", "mixed"])
def test_no_message_lost_duplicated_or_corrupted_under_sigints(sizes):
    p = subprocess.run([sys.executable, str(STORM), "--sizes", sizes, "--messages", str(MESSAGES),
                        "--runs", str(RUNS), "--seed", str(SEED)],
                       capture_output=True, text=True, timeout=max(280, RUNS * MESSAGES // 20 - 20))
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    runs = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(runs) == RUNS, p.stdout
    for run in runs:
        assert "error" not in run, run
        assert (run["lost"], run["duplicated"], run["corrupted"]) == (0, 0, 0), run
        # the storm reached both processes' calls (else it proves nothing)
        assert run["writer_signals"]["raised"] > 0 and run["reader_signals"]["raised"] > 0, run
