"""README.md's tables and those of docs/ (benchmarks, the mutation sample) are what tools/gen_tables.py
builds from the result files they cite: a number edited by hand, or a result file replaced
without regenerating, fails here."""
import copy
import importlib
import json
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gen():
    """tools.gen_tables, as `python -m tools.gen_tables` imports it from the checkout's root (the
    root goes last on sys.path, so that the rdmaq installed stays the one imported)."""
    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))
    return importlib.import_module("tools.gen_tables")


def docs_copy(gen, tmp_path):
    """The documents with tables, copied under tmp_path at their paths."""
    for doc in {d for d, _, _ in gen.TABLES}:
        (tmp_path / doc).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / doc, tmp_path / doc)
    return tmp_path


def test_the_tables_are_what_the_result_files_give(gen):
    assert gen.stale() == [], "a table differs from its result files: run python -m tools.gen_tables"


def test_a_number_edited_by_hand_is_caught_and_regenerated(gen, tmp_path):
    root = docs_copy(gen, tmp_path)
    readme = (root / "README.md").read_text()
    block = readme[readme.index("<!-- measured:begin -->"):readme.index("<!-- measured:end -->")]
    assert "| 1.05 / 1.03 / 1.00 |" in block  # the idle H200 serving row, TPOT / ITL / TTFT
    (root / "README.md").write_text(readme.replace("| 1.05 / 1.03 / 1.00 |", "| 0.95 / 1.03 / 1.00 |"))
    assert gen.stale(root) == ["README.md"]
    assert gen.generate(root)["README.md"] == readme


def test_a_table_follows_its_result_file(gen, monkeypatch):
    """The idle serving row is computed from the A/B's runs: double rdmaq's TPOT in every
    idle run and its ratio doubles."""
    real = gen.load

    def load(name):
        result = real(name)
        if name != gen.AB1:
            return result
        result = copy.deepcopy(result)
        for run in result["runs"]:
            if run["setting"] == "idle" and run["queue"] == "rdmaq-shm":  # "rdmaq" in the file
                run["metrics"]["tpot_p50_ms"] *= 2
        return result

    before = gen.serve_ratio(gen.AB1, "idle", "tpot_p50_ms")
    monkeypatch.setattr(gen, "load", load)
    assert gen.serve_ratio(gen.AB1, "idle", "tpot_p50_ms") == pytest.approx(2 * before)
    assert f"| {gen.fmt(2 * before)} / 1.03 / 1.00 |" in gen.readme_measured()


def test_a_document_without_its_marks_is_named(gen, tmp_path):
    root = docs_copy(gen, tmp_path)
    (root / "README.md").write_text("# rdmaq\n")
    with pytest.raises(SystemExit, match="README.md: needs exactly one <!-- measured:begin -->"):
        gen.generate(root)


def test_the_mutation_sample_is_counted_from_its_rows(gen, tmp_path, monkeypatch):
    """docs/testing.md's sample: a survivor of the result file turned into a kill moves the
    headline and its file's row, as the sweep's own table would."""
    result = json.loads((REPO / gen.FRESH_SAMPLE).read_text())
    survivor = next(r for r in result["rows"] if r["status"] == "survived")
    before = gen.fresh_sample()
    survivor["status"] = "killed"
    changed = tmp_path / "fresh.json"
    changed.write_text(json.dumps(result))
    monkeypatch.setattr(gen, "REPO", tmp_path)
    monkeypatch.setattr(gen, "FRESH_SAMPLE", "fresh.json")
    after = gen.fresh_sample()
    assert after != before
    row = next(line for line in after.splitlines() if line.startswith(f"| {survivor['file']} |"))
    assert row == next(line for line in gen.sweep_result.table(result["generated"], result["rows"])
                       if line.startswith(f"| {survivor['file']} |"))



def test_the_suite_times_are_the_runs_own(gen, tmp_path, monkeypatch):
    """README's suite time is the tiers.json of a run: its total and each tier's minutes, a
    failed tier marked as such."""
    run = json.loads((REPO / gen.TIER_TIMES).read_text())
    run["seconds"], run["tiers"]["verbs"] = 3600, {"rc": 1, "seconds": 90}
    (tmp_path / "docs" / "testing").mkdir(parents=True)
    (tmp_path / gen.TIER_TIMES).write_text(json.dumps(run))
    monkeypatch.setattr(gen, "REPO", tmp_path)
    text = gen.suite_times()
    assert text.startswith(f"60 minutes at {run['commit']} ")
    assert "verbs 1.5 (failed)," in text
    assert all(f"{name} {t['seconds'] / 60:.1f}" in text for name, t in run["tiers"].items())
