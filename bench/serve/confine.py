"""The server's CPUs as a container confines them, for ``rdmaq bench serve``.

Two ways a container limits CPU, each as the benchmark sets it up:

* a cpuset (``--server-cpus N``): the server and the attackers run on the first N CPUs this
  process may use, the client on the others where some remain. Each process is put there before
  it starts a thread (an affinity mask is per thread, and threads inherit it): the servers and
  the client through ``prefix()``, a few lines of Python that set it and exec the command; the
  attackers as their first statement.
* a CPU quota (``--server-quota CPUS``): a cgroup v2 group with ``cpu.max`` = CPUS periods of
  100 ms per 100 ms, the servers in it (``prefix()`` moves the process in before the exec, so
  every child is born there), and the in-group attackers. The servers share the group (the
  idle ones block; each run records their CPU time); its quota is set once they are up, so
  that starting them (imports, CUDA graph capture) is not throttled. Only where this process may make
  one: cgroup v2 mounted at /sys/fs/cgroup with the cpu controller given to its children, and
  write access (root); elsewhere the sweep goes on without it and says why.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000

# Run by `python -c` before the command: no import of rdmaq (its C extension), no thread.
# argv: CPUS (comma list, or empty) CGROUP_PROCS (path, or empty) -- COMMAND...
_EXEC_CODE = """\
import os, sys
cpus, procs, sep, *cmd = sys.argv[1:]
if cpus:
    os.sched_setaffinity(0, [int(c) for c in cpus.split(",")])
if procs:
    with open(procs, "w") as f:
        f.write("0")
os.execvp(cmd[0], cmd)
"""


@dataclass
class Confinement:
    """Where the servers, the attackers and the client run. ``server_cpus`` None: anywhere;
    ``cgroup`` None: no group of their own (``quota_skipped`` says why when one was asked)."""

    server_cpus: list[int] | None = None
    client_cpus: list[int] | None = None
    quota_cpus: float | None = None
    cgroup: str | None = None
    quota_skipped: str | None = None
    cgroup_made: bool = field(default=False, repr=False)

    def prefix(self, cpus: list[int] | None, cgroup: bool) -> list[str]:
        """The command prefix that runs a command on ``cpus`` and, with ``cgroup``, in the group."""
        procs = str(Path(self.cgroup) / "cgroup.procs") if cgroup and self.cgroup else ""
        if not cpus and not procs:
            return []
        return [sys.executable, "-c", _EXEC_CODE, ",".join(map(str, cpus or [])), procs, "--"]

    def server_prefix(self) -> list[str]:
        return self.prefix(self.server_cpus, cgroup=True)

    def client_prefix(self) -> list[str]:
        return self.prefix(self.client_cpus, cgroup=False)

    def record(self) -> dict:
        return {"server_cpus": self.server_cpus, "client_cpus": self.client_cpus,
                "quota_cpus": self.quota_cpus, "cgroup": self.cgroup,
                "quota_skipped": self.quota_skipped}

    @classmethod
    def from_record(cls, rec: dict | None) -> Confinement:
        rec = rec or {}
        return cls(server_cpus=rec.get("server_cpus"), client_cpus=rec.get("client_cpus"),
                   quota_cpus=rec.get("quota_cpus"), cgroup=rec.get("cgroup"),
                   quota_skipped=rec.get("quota_skipped"))

    def describe(self) -> str:
        parts = []
        if self.server_cpus:
            parts.append(f"server and attackers on CPUs {cpu_list(self.server_cpus)}, client on "
                         + (cpu_list(self.client_cpus) if self.client_cpus else "the same CPUs"))
        if self.quota_cpus is not None:
            parts.append(f"server cgroup cpu.max {quota_line(self.quota_cpus)}" if self.cgroup
                         else f"no CPU quota ({self.quota_skipped})")
        return "; ".join(parts) or "no CPU confinement"


def cpu_list(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    out, run = [], [cpus[0]]
    for c in cpus[1:]:
        if c == run[-1] + 1:
            run.append(c)
        else:
            out.append(run)
            run = [c]
    out.append(run)
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in out)


def quota_line(cpus: float) -> str:
    """cpu.max for ``cpus`` CPUs' worth of time per period."""
    return f"{max(1000, round(cpus * PERIOD_US))} {PERIOD_US}"


def split_cpus(n: int, allowed: list[int]) -> tuple[list[int], list[int] | None]:
    """The server's first ``n`` of the allowed CPUs, and the rest for the client (None when no
    CPU is left: the client shares the server's)."""
    if not 1 <= n <= len(allowed):
        raise ValueError(f"--server-cpus {n}: this process may use {len(allowed)} CPU(s) "
                         f"({cpu_list(allowed)})")
    return allowed[:n], allowed[n:] or None


def cgroup_unusable(root: Path = CGROUP_ROOT) -> str | None:
    """Why no CPU-quota group can be made under ``root`` (None: it can)."""
    if not (root / "cgroup.controllers").exists():
        return f"{root} is not a cgroup v2 mount"
    try:
        controllers = (root / "cgroup.controllers").read_text().split()
    except OSError as e:
        return f"{root}/cgroup.controllers unreadable: {e.strerror}"
    if "cpu" not in controllers:
        return f"the cpu controller is not available in {root}"
    if not os.access(root, os.W_OK) or not os.access(root / "cgroup.subtree_control", os.W_OK):
        return f"{root} is not writable here (needs root)"
    return None


def make_cgroup(name: str, cpus: float | None, root: Path = CGROUP_ROOT
                ) -> tuple[str | None, str | None]:
    """A group ``root/name`` with ``cpu.max`` for ``cpus`` CPUs (None: no limit yet): (its path,
    None), or (None, why not). An existing one (a part of the sweep before) is reused."""
    why = cgroup_unusable(root)
    if why:
        return None, why
    path = root / name
    try:
        subtree = (root / "cgroup.subtree_control").read_text().split()
        if "cpu" not in subtree:
            (root / "cgroup.subtree_control").write_text("+cpu")
        path.mkdir(exist_ok=True)
        set_quota(str(path), cpus)
    except OSError as e:
        try:
            path.rmdir()
        except OSError:
            pass
        return None, f"making {path} with cpu.max failed: {e.strerror or e}"
    return str(path), None


def set_quota(path: str, cpus: float | None) -> None:
    """The group's cpu.max: ``cpus`` CPUs' worth per period, or no limit."""
    (Path(path) / "cpu.max").write_text(quota_line(cpus) if cpus is not None else f"max {PERIOD_US}")


def remove_cgroup(path: str | None) -> str | None:
    """Remove the group once its processes are gone; what was wrong, or None."""
    if not path or not os.path.isdir(path):
        return None
    try:
        os.rmdir(path)
    except OSError as e:
        return f"{path} not removed: {e.strerror or e}"
    return None


def join(cpus: list[int] | None, cgroup: str | None) -> None:
    """Move the calling process (before it starts threads) onto ``cpus`` and into ``cgroup``."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    if cgroup:
        with open(Path(cgroup) / "cgroup.procs", "w") as f:
            f.write("0")
