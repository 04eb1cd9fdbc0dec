"""Values from another process, checked field by field.

A handle travels through the caller's hands and the verbs bootstrap's
messages come from another process, maybe another host: nothing in them is
used before it is checked here.  Every check names the field
(``pool.qps[3][0]``) and what was wrong, and every value that reaches C fits
the C type it goes into.  The checkers return plain, typed values; they
never hand back the peer's containers.
"""
from __future__ import annotations

import json
import re
from typing import Any

U24 = (1 << 24) - 1
U32 = (1 << 32) - 1
U64 = (1 << 64) - 1

PRINTABLE = re.compile(r"[\x20-\x7e]*\Z")
HEX = re.compile(r"[0-9a-f]*\Z")
_MISSING = object()


class Bad(Exception):
    """One field of a peer's message, or of a handle, is missing or wrong."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(field, why)
        self.field, self.why = field, why

    def __str__(self) -> str:
        return f"field {self.field!r} {self.why}"


def show(v: object) -> str:
    """``v`` for an error message: its repr, cut short."""
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def loads(raw: bytes, what: str) -> dict[str, Any]:
    """A JSON object from a peer's bytes."""
    try:
        msg = json.loads(raw)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise Bad(what, f"is not valid JSON ({type(e).__name__})") from None
    return obj(msg, what)


def obj(v: object, field: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise Bad(field, f"must be an object, got {show(v)}")
    return v


def get(d: dict[str, Any], key: str, field: str | None = None) -> object:
    """``d[key]``; ``field`` names it in the error (default: ``key``)."""
    if key not in d:
        raise Bad(field or key, "is missing")
    return d[key]


def attr(o: object, name: str, field: str) -> object:
    """``o.name``, for a dataclass that came out of a pickle (which may lack it)."""
    v = getattr(o, name, _MISSING)
    if v is _MISSING:
        raise Bad(field, "is missing")
    return v


def integer(v: object, field: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise Bad(field, f"must be an integer, got {show(v)}")
    if not lo <= v <= hi:
        raise Bad(field, f"must be in {lo}..{hi}, got {v}")
    return v


def text(v: object, field: str, max_len: int, pattern: re.Pattern[str] = PRINTABLE) -> str:
    if not isinstance(v, str):
        raise Bad(field, f"must be a string, got {show(v)}")
    if len(v) > max_len:
        raise Bad(field, f"is longer than {max_len} characters")
    if not pattern.match(v):
        raise Bad(field, f"has characters it may not have: {show(v)}")
    return v


def hexbytes(v: object, field: str, n: int) -> bytes:
    """``n`` bytes written as 2n lowercase hex digits."""
    s = text(v, field, 2 * n, HEX)
    if len(s) != 2 * n:
        raise Bad(field, f"must be {n} bytes as {2 * n} lowercase hex digits, got {show(v)}")
    return bytes.fromhex(s)


def raw_bytes(v: object, field: str, n: int) -> bytes:
    if not isinstance(v, bytes) or len(v) != n:
        raise Bad(field, f"must be {n} bytes, got {show(v)}")
    return v


def array(v: object, field: str, lo: int, hi: int) -> list[Any] | tuple[Any, ...]:
    if not isinstance(v, (list, tuple)):
        raise Bad(field, f"must be a list, got {show(v)}")
    if not lo <= len(v) <= hi:
        raise Bad(field, f"must have {lo}..{hi} entries, got {len(v)}")
    return v


def flag(v: object, field: str) -> bool:
    if not isinstance(v, bool):
        raise Bad(field, f"must be true or false, got {show(v)}")
    return v
