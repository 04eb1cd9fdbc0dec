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


SCHED_DEBUG = "/sys/kernel/debug/sched"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def sched_settings() -> dict:
    """What the kernel's scheduler is set to, where this process may read it: its features
    (EEVDF's PLACE_LAG, DELAY_DEQUEUE, RUN_TO_PARITY, PREEMPT_SHORT...), base slice,
    preemption model."""
    out: dict = {}
    for name in ("features", "base_slice_ns", "preempt", "migration_cost_ns", "nr_migrate"):
        v = _read(os.path.join(SCHED_DEBUG, name))
        out[name] = v if v is not None else "unreadable"
    for name in ("sched_autogroup_enabled", "sched_child_runs_first", "sched_rt_runtime_us"):
        v = _read(os.path.join("/proc/sys/kernel", name))
        if v is not None:
            out[name] = v
    out["cmdline"] = _read("/proc/cmdline")
    cfg = _kernel_config(("CONFIG_HZ", "CONFIG_PREEMPT_DYNAMIC", "CONFIG_PREEMPT_LAZY",
                          "CONFIG_PREEMPT", "CONFIG_PREEMPT_VOLUNTARY", "CONFIG_PREEMPT_NONE",
                          "CONFIG_SCHED_AUTOGROUP", "CONFIG_NO_HZ_FULL", "CONFIG_NO_HZ_IDLE"))
    if cfg:
        out["config"] = cfg
    out["cpuidle_driver"] = _read("/sys/devices/system/cpu/cpuidle/current_driver")
    out["dynamic_preempt"] = _boot_line("Dynamic Preempt:")
    return out


def _boot_line(prefix: str) -> str | None:
    """The kernel log's line starting with `prefix` (e.g. the preemption model chosen at boot)."""
    import subprocess

    try:
        log = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in log.splitlines():
        i = line.find(prefix)
        if i >= 0:
            return line[i + len(prefix):].strip()
    return None


def _kernel_config(names) -> dict:
    """Options from /boot/config-$(uname -r) (or /proc/config.gz), where present."""
    import gzip

    text = None
    try:
        with open(f"/boot/config-{os.uname().release}") as f:
            text = f.read()
    except OSError:
        try:
            with gzip.open("/proc/config.gz", "rt") as f:
                text = f.read()
        except OSError:
            return {}
    out = {}
    for line in text.splitlines():
        k, eq, v = line.partition("=")
        if eq and k in names:
            out[k] = v
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
        "sched": sched_settings(),
        "versions": versions(),
        "rdmaq_git": _git_commit(),
        "loadavg_start": list(os.getloadavg()),
        "time_start": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
