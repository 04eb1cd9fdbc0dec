"""A sweep's result file (``--out``'s .json) and the per-file table made from it, for
tests/mutation/sweep.py's report and for tools/gen_tables.py, which writes docs/testing.md's
table of a sample from the file the document cites; and the paths of the machine that ran the
sweep, kept out of the file (its rows quote test output)."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

SCHEMA = "rdmaq-mutation-sweep/1"
# the start of a path that names the machine it was on: a home, a temporary directory, a
# work area (what is left after the places the sweep knows were replaced)
_HOST_PATH = re.compile(r"(?<![\w.~$<>-])/(?:root|home/[^/\s'\"]+|var/tmp|tmp|work)(?=/)")
STATUSES = ("stillborn", "equivalent", "killed", "survived")


def rows_of(result: Any) -> list[dict]:
    """The mutants' rows of a result file: the whole file in the first format, a list."""
    return result if isinstance(result, list) else result["rows"]


def per_file(generated: dict[str, int], rows: list[dict]) -> tuple[dict[str, Counter], Counter]:
    """Per file: generated, chosen and each status; and their totals."""
    per: dict[str, Counter] = defaultdict(Counter)
    for f, n in generated.items():
        per[f]["generated"] = n
    for r in rows:
        per[r["file"]]["chosen"] += 1
        per[r["file"]][r["status"]] += 1
    total: Counter = Counter()
    for c in per.values():
        total.update(c)
    return dict(per), total


def score(c: Counter) -> float | None:
    """Killed / (killed + survived), in %; None when nothing was scored."""
    scored = c["killed"] + c["survived"]
    return 100.0 * c["killed"] / scored if scored else None


def table(generated: dict[str, int], rows: list[dict]) -> list[str]:
    """The markdown table's lines, one row per file."""
    per, _ = per_file(generated, rows)
    lines = ["| file | generated | chosen | stillborn | equivalent | killed | survived | score |",
             "|---|---|---|---|---|---|---|---|"]
    for f in sorted(per):
        c = per[f]
        s = score(c)
        lines.append(f"| {f} | {c['generated']} | {c['chosen']} | {c['stillborn']} | {c['equivalent']} | "
                     f"{c['killed']} | {c['survived']} | {'-' if s is None else f'{s:.0f} %'} |")
    return lines


def scrub_paths(text: str, places: Sequence[tuple[str, str]] = ()) -> str:
    """``text`` without the paths of the machine it was written on: each of ``places`` (a
    path and the name it becomes: the scratch trees, the checkout, the home directory), the
    longest first, then whatever path is left under a home (``~``), a temporary directory
    (``$TMPDIR``) or a work area (``<host>``)."""
    for path, name in sorted(places, key=lambda p: -len(p[0])):
        path = path.rstrip("/")
        if path:
            text = re.sub(re.escape(path) + r"(?=/|\b|$)", name.replace("\\", r"\\"), text)

    def generic(m: re.Match[str]) -> str:
        s = m.group(0)
        if s in ("/tmp", "/var/tmp"):
            return "$TMPDIR"
        return "~" if s.startswith(("/root", "/home/")) else "<host>"

    return _HOST_PATH.sub(generic, text)


def scrub_rows(rows: list[dict], places: Sequence[tuple[str, str]] = ()) -> list[dict]:
    """The rows with the machine's paths taken out of the test output they quote."""
    for r in rows:
        for key in ("evidence", "reason"):
            if isinstance(r.get(key), str):
                r[key] = scrub_paths(r[key], places)
    return rows
