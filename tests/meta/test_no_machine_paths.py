"""The mutation sweep's result files quote test output, which names the paths of the machine
that ran it (its scratch trees, the checkout, the home directory, a venv under ~/.cache): the
sweep writes them without, and none is in the repository's result files."""
import importlib
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))  # last: the rdmaq installed stays the one imported
mutation_result = importlib.import_module("tools.mutation_result")

MACHINE_PATH = re.compile(r"(?<![\w.~$<>-])/(?:root|home/\w+|tmp|var/tmp|work)/")


def test_the_places_the_sweep_knows_become_their_names():
    places = [("/tmp/rdmaq-sweep-x1", "<scratch>"), ("/srv/rdmaq", "."), ("/root", "~"), ("/tmp", "$TMPDIR")]
    text = ("FAILED /tmp/rdmaq-sweep-x1/w0/tree/tests/core/test_a.py::test_b - "
            "AssertionError: /tmp/pytest-of-root/x\n/root/.cache/venv/lib/site.py:3 in /srv/rdmaq/rdmaq/queue.py")
    assert mutation_result.scrub_paths(text, places) == (
        "FAILED <scratch>/w0/tree/tests/core/test_a.py::test_b - "
        "AssertionError: $TMPDIR/pytest-of-root/x\n~/.cache/venv/lib/site.py:3 in ./rdmaq/queue.py")


def test_paths_of_another_machine_are_taken_out_too():
    text = "/home/ci/.cache/x.py, /var/tmp/a, /work/other/b, /tmp/..., but /usr/lib/python3/x.py stays"
    assert mutation_result.scrub_paths(text) == (
        "~/.cache/x.py, $TMPDIR/a, <host>/other/b, $TMPDIR/..., but /usr/lib/python3/x.py stays")


def test_a_place_is_replaced_whole_not_where_it_is_a_prefix():
    assert mutation_result.scrub_paths("/tmp/abc and /tmp/abcd/x", [("/tmp/abc", "<s>")]) == "<s> and $TMPDIR/abcd/x"


def test_rows_lose_the_paths_in_their_evidence_and_reason_only():
    rows = [{"id": "m1", "file": "rdmaq/queue.py", "evidence": "FAILED - /root/x", "reason": "in /tmp/y"},
            {"id": "m2", "file": "rdmaq/queue.py", "evidence": "", "reason": None}]
    assert mutation_result.scrub_rows(rows) == [
        {"id": "m1", "file": "rdmaq/queue.py", "evidence": "FAILED - ~/x", "reason": "in $TMPDIR/y"},
        {"id": "m2", "file": "rdmaq/queue.py", "evidence": "", "reason": None}]


def test_the_sweep_scrubs_its_rows_before_it_writes_them():
    """sweep.py's main: the scrub comes before the table and the result file are written."""
    text = (REPO / "tests" / "mutation" / "sweep.py").read_text()
    main = text[text.index("def main("):]
    assert "scrub_rows(rows," in main
    assert main.index("scrub_rows(rows,") < main.index("write_table(") < main.index(".write_text(json.dumps(result")


def test_no_mutation_result_file_holds_a_machine_path():
    bad = {}
    for f in sorted((REPO / "docs" / "mutation").glob("*.json")):
        rows = mutation_result.rows_of(json.loads(f.read_text()))
        found = [f"{r['id']}: {m.group(0)}" for r in rows for k in ("evidence", "reason")
                 if isinstance(r.get(k), str) for m in MACHINE_PATH.finditer(r[k])]
        if found:
            bad[f.name] = found[:3]
    assert bad == {}
