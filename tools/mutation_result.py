"""A sweep's result file (``--out``'s .json) and the per-file table made from it, for
sweep.py's report and for docs/gen_tables.py, which writes docs/testing.md's table of a
sample from the file the document cites."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

SCHEMA = "rdmaq-mutation-sweep/1"
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
