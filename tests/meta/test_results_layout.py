"""Benchmark results are data: every file under docs/results/ sits in a run folder whose
run.json names its machine, date, commit, command and what it measured; the folder's
summary.md and the index are generated from them (tools/results.py), and `new` makes a folder
that the index then lists."""
import gzip
import importlib
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))  # last: the rdmaq installed stays the one imported
results = importlib.import_module("tools.results")

MICRO = {"schema": "rdmaq-bench/1", "argv": ["--readers", "1", "--json", "out.json"],
         "machine": {"time_start": "2026-12-06T04:00:00+0000"},
         "ratios": [{"queue": "rdmaq-shm", "readers": 1, "attackers": 0, "size": 64, "pace_ns": 1000000,
                     "p50_ratio": 0.5, "p99_ratio": 2.0}]}


def test_every_result_file_is_in_a_run_folder_with_its_metadata():
    root = REPO / results.RESULTS
    folders = results.folders(REPO)
    assert len(folders) > 20
    loose = [p.name for p in root.iterdir() if p.is_file() and p.name != "README.md"]
    assert loose == []
    assert sorted(p for p in root.iterdir() if p.is_dir()) == folders  # no folder without run.json
    for folder in folders:
        run = results.load_run(folder)
        assert folder.name.startswith(f"{run['date']}-"), folder.name
        # the commit measured (of an A/B, the one after) or "unknown", in the folder's name
        named = run["commit"].split(", ")[-1].split()[0]
        assert f"-{named}-" in folder.name, (folder.name, run["commit"])


def test_a_large_result_file_is_kept_compressed_with_its_bytes_unchanged(tmp_path):
    """A JSON file of 64 KiB or more is stored as NAME.json.gz (the repository travels whole
    beside the GPU machine's payload); its summary reads it as it reads a plain one."""
    big = dict(MICRO, padding="x" * results.GZIP_FROM_BYTES)
    out = tmp_path / "big.json"
    out.write_text(json.dumps(big))
    small = tmp_path / "small.json"
    small.write_text(json.dumps(MICRO))
    root = tmp_path / "repo"
    folder = results.new_run([out, small], "dev2core", "big", "a large run", commit="abc1234", root=root)
    assert not (folder / "big.json").exists()
    assert gzip.decompress((folder / "big.json.gz").read_bytes()) == out.read_bytes()
    assert (folder / "small.json").read_bytes() == small.read_bytes()
    assert results.read_json(folder / "big.json.gz") == big
    summary = (folder / "summary.md").read_text()
    assert "### `big.json.gz`: rdmaq ÷ vLLM" in summary and "### `small.json`: rdmaq ÷ vLLM" in summary


def test_a_run_json_without_a_field_is_named(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"machine": "m", "date": "2026-12-06", "commit": "abc1234",
                                                   "command": "rdmaq bench"}))
    with pytest.raises(ValueError, match="run.json: no measured"):
        results.load_run(tmp_path)


def test_new_makes_a_folder_its_summary_and_the_index_lists_it(tmp_path):
    out = tmp_path / "out.json"
    out.write_text(json.dumps(MICRO))
    root = tmp_path / "repo"
    folder = results.new_run([out], "dev2core", "quick", "a quick run", commit="abc1234", root=root)
    assert folder == root / "docs/results/2026-12-06-dev2core-abc1234-quick"
    assert (folder / "out.json").read_text() == out.read_text()  # copied, not rewritten
    run = json.loads((folder / "run.json").read_text())
    assert run["command"] == "rdmaq bench --readers 1 --json out.json"
    assert (run["date"], run["commit"], run["measured"]) == ("2026-12-06", "abc1234", "a quick run")
    summary = (folder / "summary.md").read_text()
    assert "| `rdmaq-shm` | 1 | 0 | 64 | 1 ms | 0.50 | 2.00 |" in summary
    index = (root / "docs/results/README.md").read_text()
    name = "2026-12-06-dev2core-abc1234-quick"
    assert f"| [{name}]({name}/) | 2026-12-06 | dev2core |" in index
    assert results.stale(root) == []
    assert results.run_link(folder.name, "../", root) == f"[2026-12-06, abc1234](../results/{folder.name}/)"
    with pytest.raises(ValueError, match="exists already"):
        results.new_run([out], "dev2core", "quick", "again", commit="abc1234", root=root)


def test_an_edited_summary_or_run_json_is_caught(tmp_path):
    out = tmp_path / "out.json"
    out.write_text(json.dumps(MICRO))
    root = tmp_path / "repo"
    folder = results.new_run([out], "dev2core", "quick", "a quick run", commit="abc1234", root=root)
    run = json.loads((folder / "run.json").read_text())
    run["measured"] = "something else"
    (folder / "run.json").write_text(json.dumps(run))
    assert results.stale(root) == ["docs/results/README.md", f"docs/results/{folder.name}/summary.md"]
    results.write(root)
    assert results.stale(root) == []


@pytest.mark.parametrize("machine, slug", [("Dev 2", "quick"), ("dev2core", "../up"), ("dev2core", "")])
def test_new_refuses_a_name_that_is_no_folder_name(tmp_path, machine, slug):
    out = tmp_path / "out.json"
    out.write_text(json.dumps(MICRO))
    with pytest.raises(ValueError, match="lower-case letters"):
        results.new_run([out], machine, slug, "x", commit="abc1234", root=tmp_path)


def test_new_refuses_a_missing_file(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        results.new_run([tmp_path / "nope.json"], "dev2core", "quick", "x", root=tmp_path)
