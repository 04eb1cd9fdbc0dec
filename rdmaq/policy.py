"""How a reader waits: the one decision, with its reason, for the library and `rdmaq doctor`.

Policy "efficient" naps until the window the writer's rhythm predicts and blocks; policy
"auto" (the default) also spins for a message that is due, up to RDMAQ_FREE_SPIN_US, in
place of the nap, where that costs nobody a CPU: where the queue's readers and its writer
fit the CPUs this process may use, no cgroup quota counts the spin against the server's
other threads, and the reader can tell a free CPU from a contended one (its schedstat;
csrc/busy.h).  Elsewhere "auto" waits as "efficient" does: a spinning reader would take
the CPU its writer or another reader needs (measured: docs/benchmarks/hotpath-h200.md).
Both policies block with a short scheduler slice (csrc/slice.h): RDMAQ_SLICE_US, 300 µs by
default, but the kernel's least, 100 µs, where the queue's readers and writer outnumber the
CPUs (for the writer too: ``slice_us``): readers woken together then share a CPU, and there
the longer slice doubled the 10 ms pace's p99 (docs/benchmarks/waiting.md); where each has
a CPU, 100 µs gained nothing and its p50 was no better.
``decide`` is pure, so a test can ask it about any machine; ``for_reader`` asks it about
this one, as every Reader does and as `rdmaq doctor` reports it.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from . import settings, sysfs

POLICIES = settings.POLICIES
CROWDED_SLICE_US = settings.MIN_SLICE_US  # the slice where readers and writer outnumber the CPUs


@dataclass(frozen=True)
class Machine:
    """What the decision depends on, of the machine a reader runs on."""

    cpus: int  # CPUs this process may use (sched_getaffinity)
    quota: float | None  # its cgroup's CPU quota in CPUs (cpu.max), None: none
    schedstat: bool  # /proc/thread-self/schedstat can be read


@dataclass(frozen=True)
class Decision:
    policy: str  # the policy asked for: "auto" or "efficient"
    free_spin_ns: int  # the longest spin for a due message; 0: none (waits as "efficient")
    reason: str  # why, in one line
    slice_us: int  # the scheduler slice a blocked reader asks for, unless slice_us= says otherwise


def cpu_quota() -> float | None:
    """This process's cgroup v2 CPU quota in CPUs (cpu.max), None when it has none."""
    try:
        with open("/proc/self/cgroup") as f:
            path = next((line.strip()[3:] for line in f if line.startswith("0::")), None)
    except OSError:
        return None
    if path is None:
        return None
    quota = sysfs.read(f"/sys/fs/cgroup{path.rstrip('/')}/cpu.max")
    if not quota:
        return None
    parts = quota.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        return int(parts[0]) / int(parts[1])
    except (ValueError, ZeroDivisionError):
        return None


def this_machine() -> Machine:
    return Machine(len(os.sched_getaffinity(0)), cpu_quota(),
                   os.path.exists("/proc/thread-self/schedstat"))


def slice_for(n_readers: int, machine: Machine) -> int:
    """RDMAQ_SLICE_US's default for an endpoint of a queue of ``n_readers`` on ``machine``."""
    return CROWDED_SLICE_US if n_readers + 1 > machine.cpus else settings.default("RDMAQ_SLICE_US")


def slice_us(n_readers: int, environ: Mapping[str, str] | None = None,
             machine: Machine | None = None) -> int:
    """The slice an endpoint (the writer, a reader) of a queue of ``n_readers`` asks for while
    blocked: RDMAQ_SLICE_US where it is set, else its default for this machine."""
    if settings.stripped("RDMAQ_SLICE_US", environ) is not None:
        return settings.value("RDMAQ_SLICE_US", environ)  # type: ignore[no-any-return]
    return slice_for(n_readers, machine or this_machine())


def decide(policy: str, n_readers: int, free_spin_us: int, machine: Machine,
           slice_us: int | None = None) -> Decision:
    """The decision for a reader of a queue of ``n_readers`` under ``policy``; ``slice_us``:
    RDMAQ_SLICE_US where it is set (None: its default for this queue and machine)."""
    efficient = "waits as policy efficient does"
    readers = f"{n_readers} reader{'' if n_readers == 1 else 's'} and their writer"
    sl = slice_for(n_readers, machine) if slice_us is None else slice_us
    if policy == "efficient":
        return Decision(policy, 0, "policy efficient: a reader naps until the predicted window, "
                                   "then blocks; it never spins for a due message", sl)
    if free_spin_us == 0:
        return Decision(policy, 0, f"policy auto with RDMAQ_FREE_SPIN_US=0: a reader {efficient}", sl)
    if machine.quota is not None:
        return Decision(policy, 0, f"policy auto under a CPU quota of {machine.quota:g} CPUs "
                                   f"(cgroup cpu.max): a spin burns quota the server's other "
                                   f"threads need, so a reader {efficient}", sl)
    if not machine.schedstat:
        return Decision(policy, 0, "policy auto without /proc/thread-self/schedstat: a reader "
                                   f"cannot tell a free CPU from a contended one, so it {efficient}", sl)
    if n_readers + 1 > machine.cpus:
        return Decision(policy, 0, f"policy auto, {readers} on "
                                   f"{machine.cpus} CPUs: they outnumber them, and a spinning "
                                   f"reader takes the CPU its writer needs, so a reader {efficient}", sl)
    return Decision(policy, free_spin_us * 1000,
                    f"policy auto, {readers} fit {machine.cpus} CPUs, "
                    f"no quota: a reader spins up to {free_spin_us} µs for a due message while "
                    f"its CPU is free", sl)


def for_reader(policy: str | None, n_readers: int, environ: Mapping[str, str] | None = None,
               machine: Machine | None = None) -> Decision:
    """The decision for a reader of a queue of ``n_readers`` on this machine: ``policy`` (an
    argument), else RDMAQ_POLICY; RDMAQ_FREE_SPIN_US, RDMAQ_SLICE_US.  Raises on a bad value,
    naming it."""
    if policy is None:
        policy = settings.value("RDMAQ_POLICY", environ)
    elif not isinstance(policy, str):
        raise TypeError(f"policy must be a str, got {type(policy).__name__}")
    elif policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    free_spin_us = settings.value("RDMAQ_FREE_SPIN_US", environ)
    machine = machine or this_machine()
    return decide(policy, n_readers, free_spin_us, machine, slice_us(n_readers, environ, machine))
