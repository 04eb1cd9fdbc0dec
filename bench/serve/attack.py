"""CPU contention for ``rdmaq bench serve``: busy-loop hogs and a tokenizer attacker.

Settings pair each attacker with what a user would try first, for free: the attackers as
SCHED_IDLE (they run only when a core would otherwise idle), and TOKENIZERS_PARALLELISM=false
for the tokenizer attacker (one thread instead of a Rayon pool as wide as the machine).

Where the kernel groups tasks by session (``sched_autogroup_enabled``), the attackers started here
share the harness's session, so all of them together weigh as one task against the server (which
runs in a session of its own); ``hogs-sessions`` gives each hog a session of its own, as separate
services' processes have. ``sched_groups`` records the groups a run had.

Under CPU confinement (bench/serve/confine.py) every attacker runs on the server's CPUs;
``hogs-ingroup`` also puts its hogs, as many as the server's CPUs, in the server's own cgroup
(its CPU quota, where the sweep made one): the contention inside a container (a tokenizer's
threads, data loaders) rather than beside it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from typing import Any

from .confine import join

try:
    import psutil
except ImportError:  # `rdmaq bench serve --help` works without it; a run checks for it first
    psutil = None  # type: ignore[assignment]

# name -> what runs beside the server
SETTINGS = {
    "idle": {"hogs": False, "tokenizer": False, "sched_idle": False, "tok_parallel": True},
    "hogs": {"hogs": True, "tokenizer": False, "sched_idle": False, "tok_parallel": True},
    "hogs-schedidle": {"hogs": True, "tokenizer": False, "sched_idle": True, "tok_parallel": True},
    "hogs-sessions": {"hogs": True, "tokenizer": False, "sched_idle": False, "tok_parallel": True,
                      "own_sessions": True},
    "hogs-ingroup": {"hogs": True, "tokenizer": False, "sched_idle": False, "tok_parallel": True,
                     "in_group": True},
    "tok": {"hogs": False, "tokenizer": True, "sched_idle": False, "tok_parallel": True},
    "tok-nopar": {"hogs": False, "tokenizer": True, "sched_idle": False, "tok_parallel": False},
    "tok-schedidle": {"hogs": False, "tokenizer": True, "sched_idle": True, "tok_parallel": True},
}
# hogs-ingroup differs from hogs only under confinement: a default only then (bench/serve/main.py)
DEFAULT_SETTINGS = [s for s in SETTINGS if not SETTINGS[s].get("in_group")]


def describe(name: str, n_hogs: int) -> str:
    s = SETTINGS[name]
    parts = []
    if s["hogs"]:
        parts.append(f"{n_hogs} CPU hogs" + (", each in a session of its own"
                                             if s.get("own_sessions") else "")
                     + (" in the server's cpuset and cgroup" if s.get("in_group") else ""))
    if s["tokenizer"]:
        parts.append("tokenizer attacker" + ("" if s["tok_parallel"] else ", TOKENIZERS_PARALLELISM=false"))
    if not parts:
        return "no attacker"
    return ", ".join(parts) + (", SCHED_IDLE" if s["sched_idle"] else "")


def sched_group(pid: int) -> str:
    """Where the scheduler puts a process: its autogroup (/proc/PID/autogroup, present where
    the kernel groups tasks by session) and its cgroup; '?' for what is unreadable."""
    parts = []
    for name in ("autogroup", "cgroup"):
        try:
            with open(f"/proc/{pid}/{name}") as f:
                parts.append(" ".join(f.read().split()))
        except OSError:
            parts.append("?")
    return " | ".join(parts)


def _sched_idle() -> None:
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def hog_main(conn, sched_idle: bool, own_session: bool = False, cpus=None, cgroup=None) -> None:
    join(cpus, cgroup)
    if sched_idle:
        _sched_idle()
    if own_session:
        os.setsid()  # its own autogroup where the kernel groups by session
    conn.send("ready")
    x = 0
    while True:
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF


def tokenizer_main(conn, sched_idle: bool, parallel: bool, cpus=None, cgroup=None) -> None:
    """HF tokenizers batch encoding; with parallel, its Rayon pool (as wide as its CPUs)."""
    join(cpus, cgroup)  # before Rayon's threads, which inherit it and size the pool by it
    # before the first import: tokenizers reads it when its pool is first used
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if parallel else "false"
    if sched_idle:
        _sched_idle()  # threads started later (Rayon's) inherit the policy
    from ..common.attackers import make_corpus, train_tokenizer

    corpus = make_corpus(4000)
    tok = train_tokenizer(corpus)
    batch = corpus[:512]
    tok.encode_batch(batch)  # the pool exists from here on
    conn.send("ready")
    while True:
        tok.encode_batch(batch)


@dataclass
class Attackers:
    setting: str
    n_hogs: int
    procs: list

    def cpu_seconds(self) -> float:
        total = 0.0
        for p in self.procs:
            try:
                t = psutil.Process(p.pid).cpu_times()
                total += t.user + t.system
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return total

    def sched_groups(self) -> list[str]:
        """The distinct scheduling groups of the attackers (sched_group of each)."""
        return sorted({sched_group(p.pid) for p in self.procs})

    def alive(self) -> bool:
        return all(p.is_alive() for p in self.procs)

    def stop(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)


def start(setting: str, n_hogs: int, timeout: float = 300, cpus: list[int] | None = None,
          cgroup: str | None = None) -> Attackers:
    """Start the setting's attackers and return once each says it is running: on ``cpus``
    (None: anywhere), and in ``cgroup`` for an in-group setting."""
    s = SETTINGS[setting]
    group = cgroup if s.get("in_group") else None
    ctx = mp.get_context("spawn")
    procs: list = []
    conns: list = []
    jobs: list[tuple[Any, tuple]] = []
    if s["hogs"]:
        jobs += [(hog_main, (s["sched_idle"], s.get("own_sessions", False), cpus, group))] * n_hogs
    if s["tokenizer"]:
        jobs.append((tokenizer_main, (s["sched_idle"], s["tok_parallel"], cpus, group)))
    att = Attackers(setting, n_hogs, procs)
    try:
        for target, args in jobs:
            parent, child = ctx.Pipe(duplex=False)
            p = ctx.Process(target=target, args=(child, *args), daemon=True,
                            name=f"rdmaq-serve-{target.__name__}")
            p.start()
            child.close()
            procs.append(p)
            conns.append(parent)
        deadline = time.monotonic() + timeout
        for p, c in zip(procs, conns):
            while not c.poll(0.5):
                if not p.is_alive():
                    raise RuntimeError(f"attacker {p.name} exited with {p.exitcode} before it ran")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"attacker {p.name} not running after {timeout:.0f} s")
            c.recv()
            c.close()
    except BaseException:
        att.stop()
        raise
    return att
