"""The shm sleep/wake handshake, checked by exhausting its interleavings.

A sleeper stores its ``sleeping`` flag, issues a barrier and re-checks the
ring; a waker publishes, issues a barrier and reads the flag (csrc/shm.c).
Both barriers must be full: a store followed by a load to another address is
the one reordering that weaker barriers allow (store buffering, seen even on
x86), and then each side can miss the other's store, so the sleeper blocks
with nobody to wake it.  Stress tests cannot see this (the window is a few
instructions between system calls), so this module models the handshake
with a store buffer per thread, explores every interleaving, and checks the
barriers csrc/shm.c uses.
"""
import re
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parents[3] / "csrc"

FULL, WEAK = "full", "weak"


# ---------------------------------------------------------------- the barriers the code uses

def _function_body(src, name):
    m = re.search(r"^\w[^\n;]*\b" + name + r"\([^)]*\)\n\{\n(.*?)^\}", src, re.S | re.M)
    assert m, f"{name} not found in csrc/shm.c"
    return m.group(1)


def _fence_kind(call):
    """FULL when ``call`` (a barrier.h macro or an __atomic fence) orders an
    earlier store before a later load, else WEAK."""
    barrier_h = (CSRC / "barrier.h").read_text()
    m = re.fullmatch(r"(\w+)\(\)", call)
    if m and m.group(1) != "__atomic_thread_fence":
        # The macro's definition outside the TSan branch (barrier.h's #else).
        defs = re.findall(r"^#define " + m.group(1) + r"\(\)\s+(.+)$", barrier_h, re.M)
        assert defs, f"{call} is not defined in barrier.h"
        call = defs[-1].strip()
    m = re.fullmatch(r"__atomic_thread_fence\(__ATOMIC_(\w+)\)", call)
    assert m, f"not a fence the model knows: {call}"
    return FULL if m.group(1) == "SEQ_CST" else WEAK


def _barrier_between(body, first, then):
    """The kind of barrier between the statement containing ``first`` (None:
    the body's start) and the next one containing ``then``; WEAK when none."""
    start = body.index(first) if first else 0
    end = body.index(then, start)
    stmts = [s.strip() for s in re.sub(r"/\*.*?\*/", "", body[start:end], flags=re.S).split(";")]
    fences = [s for s in stmts[1 if first else 0:] if re.fullmatch(r"(smp_mb|__atomic_thread_fence)\(.*\)", s)]
    assert len(fences) <= 1, fences
    return _fence_kind(fences[0]) if fences else WEAK


def code_barriers():
    """{site: FULL/WEAK} for the sleeper and both wakers of csrc/shm.c."""
    src = (CSRC / "shm.c").read_text()
    return {
        "sleeper (shm_sleep_prepare)": _barrier_between(
            _function_body(src, "shm_sleep_prepare"), "WRITE_ONCE(*s->sleeping, 1)", "return"),
        "writer waking readers (shm_writer_flush)": _barrier_between(
            _function_body(src, "shm_writer_flush"), "w->dirty = false", "credits[i].sleeping"),
        "reader waking the writer (shm_wake_writer)": _barrier_between(
            _function_body(src, "shm_wake_writer"), None, "ww->sleeping"),
    }


# ---------------------------------------------------------------- the model

def _sleeper(fence):
    """shm_sleep_prepare, the re-check in wait.c's rdmaq_block_once, shm_sleep_block."""
    return [("load", "doorbell", "seen"), ("store", "sleeping", 1), ("fence", fence),
            ("load", "ring", "found"), ("futex_wait", "doorbell", "seen")]


def _waker(fence):
    """A record published (or credit returned), then shm_writer_flush / shm_wake_writer."""
    return [("store", "ring", 1), ("fence", fence), ("load", "sleeping", "flag"),
            ("doorbell_if", "flag")]


def lost_wakeups(sleeper_fence, waker_fence):
    """Every interleaving of one sleep and one publish, with stores that wait in a
    FIFO store buffer per thread until flushed to memory at any moment (a
    full fence, a locked RMW and a system call drain the thread's own).
    Returns the interleavings (as step lists) that end with the sleeper
    blocked and the record unseen."""
    progs = (_sleeper(sleeper_fence), _waker(waker_fence))
    lost, seen_states = [], set()

    def load(t, var, mem, bufs):
        for v, val in reversed(bufs[t]):
            if v == var:
                return val
        return dict(mem)[var]

    def explore(pcs, mem, bufs, regs, blocked, trace):
        key = (pcs, mem, bufs, regs, blocked)
        if key in seen_states:
            return
        seen_states.add(key)
        moved = False
        for t in (0, 1):  # flush the oldest buffered store of thread t
            if bufs[t]:
                (var, val), rest = bufs[t][0], bufs[t][1:]
                m = tuple((k, val if k == var else v) for k, v in mem)
                nb = (rest, bufs[1]) if t == 0 else (bufs[0], rest)
                explore(pcs, m, nb, regs, blocked, trace + [f"flush T{t} {var}={val}"])
                moved = True
        for t in (0, 1):
            if pcs[t] >= len(progs[t]) or (t == 0 and blocked):
                continue
            op = progs[t][pcs[t]]
            r = dict(regs[t])
            m, b, blk = mem, bufs[t], blocked
            npc = pcs[t] + 1
            if op[0] == "load":
                r[op[2]] = load(t, op[1], mem, bufs)
            elif op[0] == "store":
                b = b + ((op[1], op[2]),)
            elif op[0] == "fence" and op[1] == FULL and b:
                continue  # waits for the store buffer to drain
            elif op[0] == "futex_wait":
                if r["found"]:
                    npc = len(progs[0])  # the re-check found the record: no sleep
                elif b:
                    continue  # a system call: the buffer drains first
                elif dict(mem)["doorbell"] == r["seen"]:
                    blk = True  # sleeps until a FUTEX_WAKE
            elif op[0] == "doorbell_if":
                if r["flag"]:
                    if b:
                        continue  # a locked RMW: the buffer drains first
                    m = tuple((k, v + 1 if k == "doorbell" else v) for k, v in mem)
                    blk = False  # FUTEX_WAKE of every sleeper
            nr = tuple(sorted(r.items()))
            npcs = (npc, pcs[1]) if t == 0 else (pcs[0], npc)
            nb = (b, bufs[1]) if t == 0 else (bufs[0], b)
            nregs = (nr, regs[1]) if t == 0 else (regs[0], nr)
            explore(npcs, m, nb, nregs, blk, trace + [f"T{t} {op}"])
            moved = True
        if not moved and blocked:
            lost.append(trace)

    explore((0, 0), (("doorbell", 0), ("ring", 0), ("sleeping", 0)), ((), ()), ((), ()), False, [])
    return lost


# ---------------------------------------------------------------- tests

def test_the_model_finds_the_lost_wakeup_a_weak_barrier_allows():
    assert lost_wakeups(FULL, FULL) == []
    assert lost_wakeups(WEAK, FULL), "a release barrier in the sleeper lets a wake-up be lost"
    assert lost_wakeups(FULL, WEAK), "a release barrier in the waker lets a wake-up be lost"


WAKERS = ["writer waking readers (shm_writer_flush)", "reader waking the writer (shm_wake_writer)"]


@pytest.mark.parametrize("waker", WAKERS)
def test_the_handshake_in_shm_c_loses_no_wakeup(waker):
    barriers = code_barriers()
    sleeper_fence, waker_fence = barriers["sleeper (shm_sleep_prepare)"], barriers[waker]
    lost = lost_wakeups(sleeper_fence, waker_fence)
    assert not lost, (f"a sleeper and the {waker} lose a wake-up with the barriers of csrc/shm.c "
                      f"(sleeper {sleeper_fence}, waker {waker_fence}); one interleaving:\n"
                      + "\n".join(lost[0]))


def test_the_barriers_are_read_from_the_code():
    assert _fence_kind("smp_mb()") == FULL
    assert _fence_kind("__atomic_thread_fence(__ATOMIC_RELEASE)") == WEAK
    assert _barrier_between("x = 1; y = 2; return;", "x = 1", "return") == WEAK
