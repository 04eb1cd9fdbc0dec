"""Numbered messages under SIGINTs at random moments in the writer and the reader
(tests/signal_storm.py): every put that raised is put again, as the README says,
and the reader gets every message once, in order, whole.

Scaled down by default (one run of 1,500 messages per size); ``pytest --soak``
runs ten of 10,000 per size.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

STORM = Path(__file__).resolve().parents[2] / "signal_storm.py"
SEED = 27
RUN_LIMIT_S = 600  # one run of 10,000 large messages takes about a minute at load 4


@pytest.mark.soak
@pytest.mark.timeout(RUN_LIMIT_S)
@pytest.mark.parametrize("sizes", ["small", "large", "mixed"])
def test_no_message_lost_duplicated_or_corrupted_under_sigints(sizes, request):
    runs, messages = (10, 10_000) if request.config.getoption("soak") else (1, 1_500)
    p = subprocess.run([sys.executable, str(STORM), "--sizes", sizes, "--messages", str(messages),
                        "--runs", str(runs), "--seed", str(SEED)],
                       capture_output=True, text=True, timeout=runs * RUN_LIMIT_S)
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    reports = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(reports) == runs, p.stdout
    for report in reports:
        assert "error" not in report, report
        assert (report["lost"], report["duplicated"], report["corrupted"]) == (0, 0, 0), report
        # the storm reached both processes' calls (else it proves nothing)
        assert report["writer_signals"]["raised"] > 0 and report["reader_signals"]["raised"] > 0, report
