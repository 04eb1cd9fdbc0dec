"""The benchmarks' argument types: paces, integer lists, CPU lists."""

from __future__ import annotations

import argparse
import os
import re

_PACE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s)?\s*$")


def parse_pace(s: str) -> int:
    m = _PACE_RE.match(s)
    if not m:
        raise argparse.ArgumentTypeError(f"bad pace {s!r}: use 0, or a duration such as 500us, 1ms, 10ms")
    v = float(m.group(1))
    unit = m.group(2) or ("s" if v == 0 else None)
    if unit is None:
        raise argparse.ArgumentTypeError(f"bad pace {s!r}: give a unit (ns, us, ms, s)")
    return int(round(v * {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[unit]))


def parse_int_list(s: str, what: str, minimum: int = 0) -> list[int]:
    try:
        vals = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad {what} list {s!r}: comma-separated integers") from None
    if not vals or any(v < minimum for v in vals):
        raise argparse.ArgumentTypeError(f"bad {what} list {s!r}: integers >= {minimum}")
    return vals


def parse_cpus(s: str) -> list[int] | None:
    """'all', or a list like 0-3,8,10-11 (as taskset -c)."""
    if s.strip().lower() == "all":
        return None
    cpus: set[int] = set()
    try:
        for part in s.split(","):
            part = part.strip()
            if "-" in part:
                a, b = part.split("-", 1)
                cpus.update(range(int(a), int(b) + 1))
            elif part:
                cpus.add(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad cpu list {s!r}: use e.g. 0-3,6") from None
    allowed = os.sched_getaffinity(0)
    if not cpus:
        raise argparse.ArgumentTypeError(f"bad cpu list {s!r}: empty")
    if not cpus <= allowed:
        raise argparse.ArgumentTypeError(
            f"cpus {sorted(cpus - allowed)} are not available here (allowed: {sorted(allowed)})")
    return sorted(cpus)
