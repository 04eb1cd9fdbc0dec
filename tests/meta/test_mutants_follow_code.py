"""The mutation tier's inputs follow the code: every hand-written mutant of mutants.toml still
applies exactly once, and every judgement in reasons.toml names a mutant the generators still
make.  Checked here, in the core tier, so an edit of csrc/ or rdmaq/ that strands one fails in
minutes, not at the end of a full run."""
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

MUTATION = Path(__file__).resolve().parents[1] / "mutation"
ROOT = MUTATION.parents[1]


def load(name):
    sys.path.insert(0, str(MUTATION))  # sweep.py imports its neighbours (gen_c, gen_py, build)
    try:
        spec = importlib.util.spec_from_file_location(f"_meta_mutation_{name}", MUTATION / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(MUTATION))


@pytest.fixture(scope="module")
def run():
    return load("run")


def test_every_hand_written_mutant_applies_once(run):
    _, mutants = run.load()
    run.check_originals(mutants, ROOT)


def test_a_mutant_whose_text_left_the_code_is_named(run, tmp_path):
    _, mutants = run.load()
    m = next(m for m in mutants if m["file"].startswith("csrc/"))
    (tmp_path / m["file"]).parent.mkdir(parents=True)
    shutil.copy(ROOT / m["file"], tmp_path / m["file"])
    text = (tmp_path / m["file"]).read_text()
    (tmp_path / m["file"]).write_text(text.replace(m["original"], "/* rewritten */"))
    with pytest.raises(run.Broken, match=rf"{m['id']}: original text found 0 times in {m['file']}"):
        run.check_originals([m], tmp_path)


def test_every_reason_names_a_generated_mutant():
    sweep = load("sweep")
    generated = {i for i, _ in sweep.generate_all(vllm=True)}
    stale = sorted(set(sweep.load_reasons()) - generated)
    assert stale == [], ("reasons.toml judges mutants no longer generated (the code moved on): "
                         "remove these entries, or judge the mutants that replaced them: " + ", ".join(stale))
