"""`rdmaq bench compare`: a checkout against a commit, interleaved, on a trivial setting.

It asserts that the ratios come out, never their values (a timing is never a test assertion)."""
import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from rdmaq.bench import cli

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                    reason="missing dependency: vllm (tests/bench/ci.sh installs it --no-deps)")
@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(),
                    reason="not a git checkout")
@pytest.mark.timeout(600)  # one install (a C build) and two short runs importing torch
def test_compare_prints_both_ratios(tmp_path, capsys):
    # A clone at HEAD: its files are HEAD's tree, installed once for both sides.
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    out = tmp_path / "out"
    rc = cli.main(["compare", "HEAD", "--repo", str(clone), "--rounds", "1", "--out", str(out),
                   "--cache", str(tmp_path / "trees"), "--",
                   "--queues", "rdmaq-shm,vllm", "--readers", "1", "--sizes", "64", "--pace", "0",
                   "--messages", "50", "--warmup", "5", "--idle-window", "0"])
    assert rc == 0
    text = capsys.readouterr().out
    assert text.count("== round") == 2
    assert text.count("rdmaq/vllm: p50 ") == 2 and text.count("here/") == 1
    assert len(list((tmp_path / "trees").glob("*/rdmaq"))) == 1  # one tree, installed once
    summary = json.loads((out / "compare.json").read_text())
    assert len(summary["rounds"]) == 1
    for r in summary["rounds"]:
        for side in r["rdmaq_over_vllm"].values():
            assert all(isinstance(side[k], float) and side[k] > 0 for k in ("p50", "p99", "p99.9"))
        assert all(isinstance(v, float) and v > 0 for v in r["here_over_rev"].values())


def test_compare_names_a_bad_revision(tmp_path, capsys):
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    assert cli.main(["compare", "no-such-rev-xyz", "--repo", str(REPO), "--out", str(tmp_path)]) != 0
    assert "'no-such-rev-xyz' is not a commit" in capsys.readouterr().err
