"""Every RDMAQ_* environment variable rdmaq reads: one table, one parser each, one default.

The library, the CLI, the benchmarks and the vLLM plugin read their variables through
``value(name)``; ``check_environment()`` parses every one that is set, so a command can
name a bad setting before it starts anything (``rdmaq demo``, ``rdmaq bench``, the vLLM
plugin).  docs/settings.md's table is generated from ``SETTINGS`` (docs/gen_tables.py).

Rules, the same for every variable:

* a value that is empty or only whitespace is unset: the default applies;
* a bad value raises ValueError naming the variable, its value and what is allowed;
* an RDMAQ_* name that is not in the table but close to one that is (a typo: difflib's
  ratio >= 0.85 and at most two characters longer or shorter), or that an
  earlier release read (RETIRED), makes ``check_environment`` raise: a setting silently
  ignored is the mistake the check is for.  Other unknown RDMAQ_* names (a test harness's
  own) pass.
"""
from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# The C core's bounds (csrc/include/rdmaq.h), repeated here so that this module imports
# without the extension; tests/core/test_settings.py checks them against it.
MAX_SPIN_US = 1_000_000
MIN_SLICE_US, MAX_SLICE_US = 100, 100_000
MAX_SETTLE_FAR_US = 1_000_000_000
VERBS_MAX_QPS = 64  # csrc/verbs/verbs_ctx.h
VLLM_MIN_RING_BYTES = 4 * 1024  # rdmaq/vllm/_geometry.py MIN_SLOT

POLICIES = ("auto", "efficient")  # how a reader waits: rdmaq/policy.py

# Who reads a variable (the table's last column).
LIBRARY = "library"
VERBS = "library (verbs transport)"
CLI = "CLI"
BENCH = "benchmarks"
VLLM = "vLLM plugin"
BUILD = "build (pip install)"


@dataclass(frozen=True)
class Setting:
    name: str
    parse: Callable[[str], Any]  # the stripped text -> the value; ValueError(what is allowed)
    default: Any
    allowed: str  # what parse accepts, for the docs and the error message
    doc: str
    reader: str
    default_text: str | None = None  # the docs' default where str(default) would mislead


def _int(lo: int, hi: int, zero_or_from: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            v = int(text, 10)
        except ValueError:
            raise ValueError("not an integer") from None
        if not lo <= v <= hi or (zero_or_from is not None and 0 < v < zero_or_from):
            raise ValueError("out of range")
        return v
    return parse


def _float(lo: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise ValueError("not a number") from None
        if not v >= lo or v != v or v == float("inf"):
            raise ValueError("out of range")
        return v
    return parse


def _bool(text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError("not 0 or 1")
    return text == "1"


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError("not a choice")
        return text
    return parse


def _text(text: str) -> str:
    return text


# The experiments RDMAQ_EXPERIMENT switches on: name -> (parser, default, allowed).
EXPERIMENTS: dict[str, tuple[Callable[[str], Any], Any, str]] = {
    # spin up to N µs before blocking also on a contended CPU (a wait otherwise blocks at once)
    "busy_spin_us": (_int(0, MAX_SPIN_US), 0, f"an integer in 0..{MAX_SPIN_US}"),
    # policy "auto" spins for a due message also on a contended CPU, through preemptions
    "free_spin_busy": (_bool, False, "0 or 1"),
}


def _experiments(text: str) -> dict[str, Any]:
    out = {k: d for k, (_, d, _) in EXPERIMENTS.items()}
    for item in text.split(","):
        k, eq, v = item.strip().partition("=")
        if not eq or k not in EXPERIMENTS:
            raise ValueError("not a known experiment")
        out[k] = EXPERIMENTS[k][0](v.strip())
    return out


_EXPERIMENT_ALLOWED = ("comma-separated NAME=VALUE of " +
                       ", ".join(f"{k} ({a})" for k, (_, _, a) in EXPERIMENTS.items()))

SETTINGS: tuple[Setting, ...] = (
    Setting("RDMAQ_POLICY", _choice(*POLICIES), "auto", f"one of {', '.join(POLICIES)}",
            "how a reader waits (rdmaq/policy.py decides, `rdmaq doctor` says what and why)",
            LIBRARY),
    Setting("RDMAQ_FREE_SPIN_US", _int(0, MAX_SPIN_US), 20000, f"an integer in 0..{MAX_SPIN_US}",
            "policy auto: the longest spin for a message the writer's rhythm says is due", LIBRARY),
    Setting("RDMAQ_SPIN_US", _int(0, MAX_SPIN_US), 50, f"an integer in 0..{MAX_SPIN_US}",
            "the adaptive spin's most before blocking (Reader/Writer spin_us=)", LIBRARY),
    Setting("RDMAQ_SLICE_US", _int(0, MAX_SLICE_US, MIN_SLICE_US), 300,
            f"0 (off) or an integer in {MIN_SLICE_US}..{MAX_SLICE_US}",
            "scheduler slice asked for while blocked (slice_us=)", LIBRARY,
            default_text=f"300; where a queue's readers and writer outnumber the CPUs: "
                         f"{MIN_SLICE_US} (rdmaq/policy.py)"),
    Setting("RDMAQ_ANTICIPATE", _bool, True, "0 or 1",
            "readers nap until a window predicted from the writer's rhythm (anticipate=)", LIBRARY),
    Setting("RDMAQ_RESTORE_SLICE", _bool, False, "0 or 1",
            "give the thread its own slice back after each wake-up (restore_slice=)", LIBRARY),
    Setting("RDMAQ_WARM", _bool, True, "0 or 1",
            "a reader warms the unpickling path while it waits for a predicted message (warm=)",
            LIBRARY),
    Setting("RDMAQ_SETTLE_FAR_US", _int(0, MAX_SETTLE_FAR_US), 3000, f"an integer in 0..{MAX_SETTLE_FAR_US}",
            "settle the scheduler lag before blocking when the next message is this far (0: never)",
            LIBRARY),
    Setting("RDMAQ_EXPERIMENT", _experiments, {k: d for k, (_, d, _) in EXPERIMENTS.items()},
            _EXPERIMENT_ALLOWED, "waiting experiments under evaluation, not defaults", LIBRARY,
            default_text="none"),
    Setting("RDMAQ_DEVICE", _text, None, "an RDMA device name",
            "the RDMA device (default: the first with an ACTIVE port)", VERBS, "first active"),
    Setting("RDMAQ_PORT", _int(0, 255), 0, "an integer in 0..255", "the device's port (0: the first ACTIVE)",
            VERBS),
    Setting("RDMAQ_GID_INDEX", _int(-1, 65535), -1, "an integer in -1..65535",
            "the port's GID index (-1: its RoCEv2 IPv4 GID)", VERBS),
    Setting("RDMAQ_VERBS_ADDR", _text, None, "an address of this host",
            "the address readers connect to (default: the GID's IPv4)", VERBS, "the GID's IPv4"),
    Setting("RDMAQ_VERBS_LIVENESS_S", _int(2, 3600), 5, "an integer in 2..3600",
            "seconds a silent network path lasts before its peer is declared unreachable", VERBS),
    Setting("RDMAQ_SRQ_DEPTH", _int(64, 1 << 20), 4096, f"an integer in 64..{1 << 20}",
            "receives shared by a context's QPs (capped by the device)", VERBS),
    Setting("RDMAQ_QPS_PER_PEER", _int(1, VERBS_MAX_QPS), None, f"an integer in 1..{VERBS_MAX_QPS}",
            "QPs per peer host", VERBS, f"the CPUs, at most {VERBS_MAX_QPS}"),
    Setting("RDMAQ_TRACEBACK", _bool, False, "0 or 1",
            "`rdmaq` commands print the traceback of a failure, not one line", CLI),
    Setting("RDMAQ_BENCH_CACHE", _text, None, "a directory",
            "where `rdmaq bench` keeps what it builds once (vLLM's spin-loop copy)", BENCH,
            "the user's cache"),
    Setting("RDMAQ_DISTRIBUTED_IPC", _choice("shm", "rdmaq"), "shm", "one of shm, rdmaq",
            "the queue vLLM's broadcast uses (vllm serve --distributed-ipc)", VLLM),
    Setting("RDMAQ_VLLM_RING_BYTES", _int(VLLM_MIN_RING_BYTES, 1 << 40), 4 * 1024 * 1024,
            f"an integer >= {VLLM_MIN_RING_BYTES} (bytes)", "the most a vLLM queue's ring holds", VLLM),
    Setting("RDMAQ_VLLM_REMOTE", _choice("auto", "ring", "zmq"), "auto", "one of auto, ring, zmq",
            "how a vLLM queue reaches readers on other hosts", VLLM),
    Setting("RDMAQ_VLLM_TRANSPORT", _choice("auto", "shm", "verbs"), "auto", "one of auto, shm, verbs",
            "a vLLM queue's ring transport", VLLM),
    Setting("RDMAQ_VLLM_STATS_DIR", _text, None, "a directory",
            "vLLM queues write their counters here", VLLM, "off"),
    Setting("RDMAQ_VLLM_STATS_INTERVAL", _float(0.0), 1.0, "a number of seconds >= 0",
            "how often those counters are written", VLLM),
    Setting("RDMAQ_BENCH_STEPTIME_DIR", _text, None, "a directory",
            "`rdmaq bench serve`'s step timing in the server (set by the benchmark)", VLLM, "off"),
    Setting("RDMAQ_SANITIZE", _text, None, "sanitizers, e.g. address,undefined",
            "build an instrumented extension", BUILD, "off"),
    Setting("RDMAQ_NO_VERBS", _bool, False, "0 or 1", "build without the verbs transport", BUILD),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}

# Names earlier releases read, and what replaced them.
RETIRED: dict[str, str] = {
    "RDMAQ_BUSY_SPIN_US": "RDMAQ_EXPERIMENT=busy_spin_us=N",
    "RDMAQ_FREE_SPIN_BUSY": "RDMAQ_EXPERIMENT=free_spin_busy=1",
}


def default(name: str) -> Any:
    """The variable's default (the value when it is unset)."""
    return BY_NAME[name].default


def stripped(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable's text without surrounding whitespace; None when unset, empty or
    whitespace.  For a reader that parses the text itself: a blank value is unset there too."""
    BY_NAME[name]  # KeyError: a name missing from the table is a bug here
    raw = (os.environ if environ is None else environ).get(name)
    return raw.strip() or None if raw is not None else None


def value(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The variable's value from ``environ`` (default os.environ), parsed; its default when
    unset, empty or whitespace.  ValueError naming the variable when its value is bad."""
    s = BY_NAME[name]  # KeyError: a name missing from the table is a bug here
    text = stripped(name, environ)
    if text is None:
        return s.default
    try:
        return s.parse(text)
    except ValueError:
        raw = (os.environ if environ is None else environ)[name]
        raise ValueError(f"environment variable {name} must be {s.allowed}, got {raw!r}") from None


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Parse every RDMAQ_* variable set in ``environ`` (default os.environ); ValueError on the
    first bad one, a retired name, or an unknown name close to a known one."""
    env = os.environ if environ is None else environ
    for name in sorted(k for k in env if k.startswith("RDMAQ_")):
        if name in BY_NAME:
            value(name, env)
        elif name in RETIRED:
            raise ValueError(f"environment variable {name} is no longer read: set "
                             f"{RETIRED[name]} instead")
        else:
            # A typo: close, and at most two characters longer or shorter.
            close = [c for c in difflib.get_close_matches(name, BY_NAME, n=3, cutoff=0.85)
                     if abs(len(c) - len(name)) <= 2]
            if close:
                raise ValueError(f"unknown environment variable {name}={env[name]!r}: did you "
                                 f"mean {close[0]}? (docs/settings.md lists them)")


def table_markdown() -> str:
    """docs/settings.md's table (docs/gen_tables.py writes it between its markers)."""
    rows = ["| variable | allowed | default | read by | what |", "|---|---|---|---|---|"]
    for s in SETTINGS:
        if s.default_text is not None:
            d = s.default_text
        elif isinstance(s.default, bool):
            d = str(int(s.default))
        else:
            d = str(s.default)
        rows.append(f"| `{s.name}` | {s.allowed} | {d} | {s.reader} | {s.doc} |")
    return "\n".join(rows) + "\n"
