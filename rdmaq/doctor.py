"""``rdmaq doctor``: what RDMA this machine has, and which transports work.

Lists RDMA devices, ports, GIDs and link layers (through pyverbs when it
imports, else /sys/class/infiniband), checks the memlock limit that memory
registration needs, whether SoftRoCE (rdma_rxe) could be loaded, which
rdmaq transports are usable, and what the scheduler gives a waiting reader
(short slices, tick rate, the idle driver), with advice for each gap.
``--clean`` removes queues left in /dev/shm by writers killed early, and vLLM's
``vllm_dist_*`` files whose owner is gone (rdmaq/vllm/leftovers.py).
"""
import dataclasses
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from . import policy, sysfs
from .vllm import leftovers as vllm_leftovers

SYSFS = sysfs.ROOT
DEBIAN_DIST = "/usr/lib/python3/dist-packages"
# Rings are registered (pinned): a few MiB per queue.  Below this, advise.
MEMLOCK_MIN = 64 << 20
# enum ibv_gid_type, spelled as sysfs spells it (gid_attrs/types/N)
GID_TYPES = {0: "IB/RoCE v1", 1: "RoCE v1", 2: "RoCE v2"}


def import_pyverbs() -> tuple[Any, str | None]:
    """pyverbs, from Debian's python3-pyverbs if pip has none; or (None, why)."""
    try:
        import pyverbs.device as dev

        return dev, None
    except ImportError:
        pass
    if os.path.isdir(os.path.join(DEBIAN_DIST, "pyverbs")) and DEBIAN_DIST not in sys.path:
        sys.path.append(DEBIAN_DIST)  # last: never shadow the venv's packages
        try:
            import pyverbs.device as dev

            return dev, None
        except ImportError as e:
            return None, f"pyverbs in {DEBIAN_DIST} does not import: {e}"
    return None, "pyverbs is not installed (apt-get install python3-pyverbs)"


def _gid_text(raw: str) -> str:
    return ":".join(raw[i:i + 4] for i in range(0, 32, 4)) if len(raw) == 32 else raw


def devices_from_sysfs() -> list[dict[str, Any]]:
    """The RDMA devices as /sys/class/infiniband lists them (see rdmaq.sysfs)."""
    return [dataclasses.asdict(d) for d in sysfs.devices()]


def devices_from_pyverbs(dev: Any) -> list[dict[str, Any]]:
    """Same shape as devices_from_sysfs, from the verbs API itself."""
    from pyverbs import enums as e

    states = {e.IBV_PORT_ACTIVE: "ACTIVE", e.IBV_PORT_DOWN: "DOWN", e.IBV_PORT_INIT: "INIT",
              e.IBV_PORT_ARMED: "ARMED"}
    lls = {e.IBV_LINK_LAYER_ETHERNET: "Ethernet", e.IBV_LINK_LAYER_INFINIBAND: "InfiniBand"}
    out: list[dict[str, Any]] = []
    for d in dev.get_device_list():
        name = d.name.decode() if isinstance(d.name, bytes) else str(d.name)
        entry: dict[str, Any] = {"name": name, "ports": []}
        with dev.Context(name=name) as ctx:
            attr = ctx.query_device()
            for p in range(1, attr.phys_port_cnt + 1):
                pa = ctx.query_port(p)
                port: dict[str, Any] = {
                    "port": p,
                    "state": states.get(pa.state, str(pa.state)),
                    "link_layer": lls.get(pa.link_layer, str(pa.link_layer)),
                    "active_mtu": dev.translate_mtu(pa.active_mtu),
                    "gids": [],
                }
                for i in range(pa.gid_tbl_len):
                    try:
                        g = ctx.query_gid_ex(p, i)
                    except Exception:  # empty entries raise ENODATA
                        continue
                    gid = g.gid_str() if callable(getattr(g, "gid_str", None)) else str(g.gid)
                    if not gid.replace(":", "").strip("0"):
                        continue
                    port["gids"].append({"index": i, "gid": gid,
                                         "type": GID_TYPES.get(g.gid_type, str(g.gid_type)),
                                         "netdev": _ifname(getattr(g, "ndev_ifindex", 0))})
                entry["ports"].append(port)
        out.append(entry)
    return out


def _ifname(ifindex: int) -> str | None:
    if not ifindex:
        return None
    try:
        import socket

        return socket.if_indextoname(ifindex)
    except OSError:
        return str(ifindex)


def memlock() -> dict[str, Any]:
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)

    def fmt(v: int) -> str:
        return "unlimited" if v == resource.RLIM_INFINITY else f"{v // 1024} KiB"

    ok = soft == resource.RLIM_INFINITY or soft >= MEMLOCK_MIN
    return {"soft": fmt(soft), "hard": fmt(hard), "ok": ok}


def rxe_status() -> dict[str, Any]:
    kver = platform.release()
    moddir = f"/lib/modules/{kver}"
    st: dict[str, Any] = {
        "kernel": kver,
        "loaded": os.path.isdir("/sys/module/rdma_rxe"),
        "module_file": None,
        "modules_supported": os.path.exists("/proc/modules"),
        "rdma_tool": shutil.which("rdma"),
    }
    if shutil.which("modinfo"):
        try:
            r = subprocess.run(["modinfo", "-n", "rdma_rxe"], capture_output=True, text=True, timeout=10)
            if r.returncode == 0 and r.stdout.strip():
                st["module_file"] = r.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    if not st["module_file"] and os.path.isdir(moddir):
        for root, _, files in os.walk(moddir):
            hit = [f for f in files if f.startswith("rdma_rxe.ko")]
            if hit:
                st["module_file"] = os.path.join(root, hit[0])
                break
    return st


def verbs_extension() -> tuple[str | None, str | None]:
    """(None, None) when rdmaq's verbs extension imports, else (why, the fix)."""
    try:
        import rdmaq.transport.verbs  # noqa: F401

        return None, None
    except ModuleNotFoundError as e:
        if e.name != "rdmaq._rdmaq_verbs":
            raise
        # setup.py builds it only where libibverbs' headers exist, and says so when it skips it.
        return ("rdmaq was built without its verbs extension (rdmaq._rdmaq_verbs): libibverbs "
                "headers were missing (or RDMAQ_NO_VERBS=1 was set) when it was built",
                "install libibverbs-dev (Debian/Ubuntu; rdma-core-devel on Fedora/RHEL), then "
                "reinstall rdmaq so that it builds the extension: pip install --force-reinstall "
                "--no-deps --no-cache-dir rdmaq (from a checkout: pip install --force-reinstall "
                "--no-deps .)")
    except ImportError as e:  # built, but libibverbs itself does not load
        return (f"rdmaq's verbs extension does not load: {e}",
                "install the libibverbs runtime and its providers (Debian/Ubuntu: libibverbs1 "
                "ibverbs-providers; Fedora/RHEL: rdma-core libibverbs)")


def transports(devices: list[dict[str, Any]]) -> dict[str, Any]:
    active = [(d["name"], p["port"]) for d in devices for p in d["ports"] if p["state"] == "ACTIVE"]
    shm_ok = os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)
    ext_why, _ = verbs_extension()
    verbs_why = None
    if ext_why:
        verbs_why = ext_why
    elif not active:
        verbs_why = "no ACTIVE RDMA port"
    return {
        "shm": {"usable": shm_ok, "why": None if shm_ok else "/dev/shm is missing or read-only"},
        "verbs": {"usable": verbs_why is None, "why": verbs_why, "active_ports": active},
    }


def _kernel_config(option: str) -> str | None:
    """CONFIG_<option> of the running kernel from /proc/config.gz or /boot; None if unknown."""
    import gzip

    rel = platform.release()
    for path, opener in (("/proc/config.gz", gzip.open), (f"/boot/config-{rel}", open)):
        try:
            with opener(path, "rt") as f:
                for line in f:
                    if line.startswith(f"CONFIG_{option}="):
                        return line.split("=", 1)[1].strip()
            return None
        except OSError:
            continue
    return None


def _in_vm() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " hypervisor" in line for line in f)
    except OSError:
        return False


def scheduler() -> dict[str, Any]:
    """What the kernel gives a waiting reader: custom slices, tick rate, idle driver, load."""
    from rdmaq._rdmaq import ffi, lib

    slice_ok = lib.rdmaq_sched_slice_probe(100_000) == 1
    why = None if slice_ok else ffi.string(lib.rdmaq_errmsg()).decode(errors="replace")
    try:
        with open("/proc/loadavg") as f:
            runnable = int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        runnable = None
    return {
        "short_slice": slice_ok,
        "short_slice_why": why,
        "hz": _kernel_config("HZ"),
        "preempt_dynamic": _kernel_config("PREEMPT_DYNAMIC") == "y",
        "cpuidle_driver": sysfs.read("/sys/devices/system/cpu/cpuidle/current_driver"),
        "guest_halt_poll_ns": sysfs.read("/sys/module/haltpoll/parameters/guest_halt_poll_ns"),
        "vm": _in_vm(),
        "cpus": len(os.sched_getaffinity(0)),
        "runnable_now": runnable,
    }


# The queue sizes the report gives the waiting policy for: one reader, and eight.
POLICY_READERS = (1, 8)


def waiting_policy() -> dict[str, Any]:
    """What a reader of a queue of each of POLICY_READERS readers decides here, and why:
    rdmaq.policy's decision, the one every Reader makes (Reader.waiting_policy)."""
    machine = policy.this_machine()
    out: dict[str, Any] = {"cpus": machine.cpus, "cpu_quota": machine.quota,
                           "schedstat": machine.schedstat, "by_readers": {}}
    try:
        for n in POLICY_READERS:
            d = policy.for_reader(None, n, machine=machine)
            out["by_readers"][str(n)] = {"policy": d.policy, "free_spin_us": d.free_spin_ns // 1000,
                                         "reason": d.reason, "slice_us": d.slice_us}
    except ValueError as e:  # a bad RDMAQ_POLICY or RDMAQ_FREE_SPIN_US: say so
        out["error"] = str(e)
    return out


def collect() -> dict[str, Any]:
    rep: dict[str, Any] = {"kernel_rdma": os.path.isdir(SYSFS), "source": None, "devices": [], "notes": []}
    dev, why = import_pyverbs()
    rep["pyverbs"] = why or "ok"
    if dev is not None and rep["kernel_rdma"]:
        try:
            rep["devices"] = devices_from_pyverbs(dev)
            rep["source"] = "pyverbs"
        except Exception as e:  # fall back to sysfs, and say why
            rep["notes"].append(f"pyverbs failed ({e}); read sysfs instead")
    if rep["source"] is None:
        rep["devices"] = devices_from_sysfs()
        rep["source"] = "sysfs"
    rep["memlock"] = memlock()
    rep["rxe"] = rxe_status()
    rep["transports"] = transports(rep["devices"])
    rep["scheduler"] = scheduler()
    rep["waiting_policy"] = waiting_policy()
    rep["vllm_leftovers"] = [dataclasses.asdict(lo) for lo in vllm_leftovers.survey()]
    rep["vllm_leftovers_searched"] = vllm_leftovers.places()
    rep["advice"] = advice(rep)
    return rep


def advice(rep: dict[str, Any]) -> list[str]:
    out = []
    _, ext_fix = verbs_extension()
    if ext_fix:  # first: without the extension no device helps
        out.append(f"For the verbs transport, {ext_fix}")
    if not rep["kernel_rdma"]:
        out.append("This kernel has no RDMA support (no /sys/class/infiniband): transport='verbs' "
                   "cannot work here. Use transport='shm' on one host, or run the verbs tests in the "
                   "SoftRoCE VM: tests/rxe/vm-run -- python -m pytest --transport verbs "
                   "tests/core tests/verbs tests/doctor")
    elif not rep["devices"]:
        if rep["rxe"]["loaded"] or rep["rxe"]["module_file"]:
            out.append("No RDMA device yet: create a SoftRoCE one with "
                       "`rdmaq softroce up --netdev IF` (IF: an Ethernet interface with an IPv4 address)")
        else:
            out.append("No RDMA device and no rdma_rxe module for this kernel: install an RDMA NIC "
                       "driver, or a kernel with CONFIG_RDMA_RXE")
    elif not rep["transports"]["verbs"]["active_ports"]:
        out.append("RDMA devices exist but no port is ACTIVE: check the link (and `rdma link`)")
    for d in rep["devices"]:
        for p in d["ports"]:
            if p["state"] == "ACTIVE" and p["link_layer"] == "Ethernet" and not any(
                    g.get("type") == "RoCE v2" and g["gid"].startswith("0000:0000:0000:0000:0000:ffff:")
                    for g in p["gids"]):
                out.append(f"{d['name']} port {p['port']} has no RoCEv2 IPv4 GID: give its netdev an "
                           "IPv4 address, or pass gid_index= / RDMAQ_GID_INDEX")
    if not rep["memlock"]["ok"] and rep["devices"]:
        out.append(f"RLIMIT_MEMLOCK is {rep['memlock']['soft']}: memory registration pins every ring; "
                   "raise it (ulimit -l unlimited; containers: --ulimit memlock=-1)")
    if rep["pyverbs"] != "ok":
        out.append(f"pyverbs: {rep['pyverbs']} (only needed for this report; sysfs was used)")
    sch = rep["scheduler"]
    if not sch["short_slice"]:
        out.append("Readers cannot ask for a short scheduler slice here "
                   f"({sch['short_slice_why']}): under CPU contention a woken reader waits for the "
                   "running task's slice (milliseconds). Linux 6.12 or later gives them one.")
    if sch["vm"] and sch["cpuidle_driver"] == "haltpoll" and sch["guest_halt_poll_ns"] == "0":
        out.append("The haltpoll cpuidle driver is loaded but polls for 0 ns "
                   "(/sys/module/haltpoll/parameters/guest_halt_poll_ns): set it (e.g. 200000) to cut "
                   "the ~100 µs wake-up of an idle vCPU")
    elif sch["vm"] and sch["cpuidle_driver"] != "haltpoll":
        out.append("Inside a VM, waking a reader on an idle vCPU costs ~100 µs; the guest's haltpoll "
                   "cpuidle driver (boot with cpuidle_haltpoll.force=1) polls briefly before halting "
                   "and cuts that (readers that anticipate a steady writer avoid it anyway)")
    wp = rep.get("waiting_policy")
    if wp and wp.get("error"):
        out.append(f"Readers will not start here: {wp['error']}")
    orphans = [lo for lo in rep.get("vllm_leftovers", []) if lo["why_kept"] is None]
    if orphans:
        out.append(f"{len(orphans)} vLLM file(s) left by a server stopped before its cleanup "
                   "(vllm_dist_* and ZMQ socket files, listed above; vLLM's own, whichever queue it used): "
                   "`rdmaq doctor --clean` removes them")
    out.append("Run CPU-heavy neighbours you control (tokenizers, data loaders) as SCHED_IDLE "
               "(`chrt --idle 0 CMD`, or os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))) "
               "or in a cgroup with cpu.idle=1: a waking reader or writer then preempts them at once; "
               "`rdmaq bench --attacker-policy idle` measures it")
    return out


def render(rep: dict[str, Any]) -> str:
    lines = []
    lines.append(f"Kernel RDMA support: {'yes' if rep['kernel_rdma'] else 'NO (no /sys/class/infiniband)'}")
    lines.append(f"RDMA devices ({rep['source']}): {len(rep['devices']) or 'none'}")
    for d in rep["devices"]:
        lines.append(f"  {d['name']}")
        for p in d["ports"]:
            mtu = f", MTU {p['active_mtu']}" if p.get("active_mtu") else ""
            lines.append(f"    port {p['port']}: {p['state']}, {p['link_layer']}{mtu}")
            for g in p["gids"]:
                extra = ", ".join(x for x in (g.get("type"), g.get("netdev")) if x)
                lines.append(f"      GID[{g['index']}] {_gid_text(g['gid'])}{f'  ({extra})' if extra else ''}")
    m = rep["memlock"]
    lines.append(f"memlock limit: {m['soft']} (hard {m['hard']}){'' if m['ok'] else '  <- low'}")
    r = rep["rxe"]
    if r["loaded"]:
        rxe = "loaded"
    elif r["module_file"]:
        rxe = f"available ({r['module_file']})"
    else:
        rxe = f"not available for kernel {r['kernel']}"
    lines.append(f"SoftRoCE (rdma_rxe): {rxe}")
    sch = rep["scheduler"]
    lines.append("Waiting (scheduler):")
    lines.append(f"  short slice for blocked readers: "
                 f"{'yes' if sch['short_slice'] else 'no (' + (sch['short_slice_why'] or '?') + ')'}")
    lines.append(f"  tick: HZ={sch['hz'] or 'unknown'}; cpuidle driver: {sch['cpuidle_driver'] or 'none'}"
                 + (f" (guest_halt_poll_ns {sch['guest_halt_poll_ns']})"
                    if sch["cpuidle_driver"] == "haltpoll" else "")
                 + ("; in a VM" if sch["vm"] else ""))
    if sch["runnable_now"] is not None:
        lines.append(f"  runnable tasks now: {sch['runnable_now']} on {sch['cpus']} CPUs"
                     + ("  (the machine's count; a reader judges its CPU busy by its own run delay "
                        "while more tasks are runnable than CPUs)"
                        if sch["runnable_now"] - 1 >= sch["cpus"] else ""))
    wp = rep.get("waiting_policy")
    if wp:
        for n, d in wp["by_readers"].items():
            lines.append(f"  waiting, {n} reader{'' if n == '1' else 's'}: {d['reason']}")
            lines.append(f"  slice while blocked, {n} reader{'' if n == '1' else 's'}: "
                         f"{d['slice_us']} µs" + ("" if d["slice_us"] else " (off)"))
    lines.append("Transports:")
    for name, t in rep["transports"].items():
        lines.append(f"  {name}: {'usable' if t['usable'] else 'NOT usable: ' + (t['why'] or '?')}")
    left = rep.get("vllm_leftovers", [])
    searched = rep.get("vllm_leftovers_searched") or vllm_leftovers.places()
    lines.append(f"vLLM leftovers (vllm_dist_* and ZMQ socket files in {', '.join(searched)}): "
                 f"{len(left) or 'none'}")
    for lo in left:
        lines.append(f"  {lo['path']} ({lo['size']} B): "
                     + (f"kept, {lo['why_kept']}" if lo["why_kept"] else "its owner is gone"))
    for n in rep["notes"]:
        lines.append(f"note: {n}")
    if rep["advice"]:
        lines.append("Advice:")
        lines.extend(f"  - {a}" for a in rep["advice"])
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from rdmaq.command import ArgumentParser

    ap = ArgumentParser(prog="rdmaq doctor",
                        description="What RDMA this machine has, and which rdmaq transports work.")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--clean", action="store_true",
                    help="first remove shm queues in /dev/shm whose writer died before its readers "
                         "attached (a live writer's queue is never touched), and vLLM's vllm_dist_* "
                         "files in /dev/shm and the temporary directory whose owner is gone (no "
                         "process uses them, no vLLM runs, this user's) and its ZMQ socket files "
                         "no live socket is bound to")
    args = ap.parse_args(argv)
    if args.clean:
        from rdmaq.transport.shm import sweep_stale

        removed = sweep_stale()
        print(f"removed {len(removed)} stale queue segment(s)"
              + (": " + ", ".join(removed) if removed else ""), file=sys.stderr)
        gone = vllm_leftovers.remove_orphans(vllm_leftovers.survey())
        if gone:
            print(f"removed {len(gone)} vLLM leftover(s) whose owner is gone: {', '.join(gone)}",
                  file=sys.stderr)
    rep = collect()
    print(json.dumps(rep, indent=2) if args.json else render(rep))
    # 0 when some transport works; 1 when none does.
    return 0 if any(t["usable"] for t in rep["transports"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
