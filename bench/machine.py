"""What the benchmark ran on: recorded in every JSON file next to the figures."""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
from importlib import metadata

from rdmaq import sysfs

PACKAGES = ["rdmaq", "vllm", "torch", "pyzmq", "numpy", "psutil", "tokenizers", "cffi"]


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _hypervisor() -> bool | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return " hypervisor" in line
    except OSError:
        pass
    return None


def _mem_total_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def versions() -> dict:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    if out.get("rdmaq") is None:  # run from a source tree
        try:
            import rdmaq

            out["rdmaq"] = getattr(rdmaq, "__version__", None)
        except Exception:
            pass
    if out.get("vllm") is None:  # a copy without dist-info
        try:
            from vllm import _version

            out["vllm"] = getattr(_version, "__version__", None) or getattr(_version, "version", None)
        except Exception:
            pass
    return out


def _git_commit() -> str | None:
    """The rdmaq source tree's commit, when it is a git checkout (best effort)."""
    try:
        import subprocess

        import rdmaq

        root = os.path.dirname(os.path.dirname(os.path.abspath(rdmaq.__file__)))
        r = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, timeout=5)
        if r.returncode == 0:
            dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=5).stdout.strip()
            return r.stdout.strip() + ("+dirty" if dirty else "")
    except Exception:
        pass
    return None


def recorded_argv(argv: list[str]) -> list[str]:
    """The command line as a results file records it: a path keeps only its last
    component, so a file meant to be shared says nothing of the machine's directories."""
    out = []
    for a in argv:
        flag, eq, value = a.partition("=") if a.startswith("--") else ("", "", a)
        if "/" in value:
            value = os.path.basename(value.rstrip("/")) or value
        out.append(flag + eq + value)
    return out


def describe(label: str | None = None) -> dict:
    uname = platform.uname()
    return {
        "label": label,
        "hostname": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "cpus_allowed": len(os.sched_getaffinity(0)),
        "hypervisor_flag": _hypervisor(),
        "mem_total_gib": _mem_total_gib(),
        "kernel": uname.release,
        "os": platform.platform(),
        "machine": uname.machine,
        "python": sys.version.split()[0],
        "python_impl": platform.python_implementation(),
        "rdma_devices": sysfs.device_names(),
        "versions": versions(),
        "rdmaq_git": _git_commit(),
        "loadavg_start": list(os.getloadavg()),
        "time_start": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
