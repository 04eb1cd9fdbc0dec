"""``rdmaq doctor``: what RDMA this machine has, and which transports work.

Lists RDMA devices, ports, GIDs and link layers (through pyverbs when it
imports, else /sys/class/infiniband), checks the memlock limit that memory
registration needs, whether SoftRoCE (rdma_rxe) could be loaded, and which
rdmaq transports are usable, with advice for each gap.
"""
import json
import os
import platform
import resource
import shutil
import subprocess
import sys

SYSFS = "/sys/class/infiniband"
DEBIAN_DIST = "/usr/lib/python3/dist-packages"
# Rings are registered (pinned): a few MiB per queue.  Below this, advise.
MEMLOCK_MIN = 64 << 20
# enum ibv_gid_type, spelled as sysfs spells it (gid_attrs/types/N)
GID_TYPES = {0: "IB/RoCE v1", 1: "RoCE v1", 2: "RoCE v2"}


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def import_pyverbs():
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


def _gid_text(raw):
    return ":".join(raw[i:i + 4] for i in range(0, 32, 4)) if len(raw) == 32 else raw


def devices_from_sysfs():
    devs = []
    try:
        names = sorted(os.listdir(SYSFS))
    except OSError:
        return devs
    for name in names:
        base = os.path.join(SYSFS, name)
        d = {"name": name, "node_type": _read(os.path.join(base, "node_type")), "ports": []}
        try:
            ports = sorted(os.listdir(os.path.join(base, "ports")), key=int)
        except (OSError, ValueError):
            ports = []
        for p in ports:
            pb = os.path.join(base, "ports", p)
            port = {
                "port": int(p),
                "state": (_read(os.path.join(pb, "state")) or "?").split(":")[-1].strip(),
                "phys_state": (_read(os.path.join(pb, "phys_state")) or "?").split(":")[-1].strip(),
                "link_layer": _read(os.path.join(pb, "link_layer")) or "?",
                "gids": [],
            }
            try:
                idxs = sorted(os.listdir(os.path.join(pb, "gids")), key=int)
            except (OSError, ValueError):
                idxs = []
            for i in idxs:
                gid = _read(os.path.join(pb, "gids", i)) or ""
                if not gid.replace(":", "").strip("0"):
                    continue
                port["gids"].append({
                    "index": int(i),
                    "gid": gid,
                    "type": _read(os.path.join(pb, "gid_attrs", "types", i)),
                    "netdev": _read(os.path.join(pb, "gid_attrs", "ndevs", i)),
                })
            d["ports"].append(port)
        devs.append(d)
    return devs


def devices_from_pyverbs(dev):
    """Same shape as devices_from_sysfs, from the verbs API itself."""
    from pyverbs import enums as e

    states = {e.IBV_PORT_ACTIVE: "ACTIVE", e.IBV_PORT_DOWN: "DOWN", e.IBV_PORT_INIT: "INIT",
              e.IBV_PORT_ARMED: "ARMED"}
    lls = {e.IBV_LINK_LAYER_ETHERNET: "Ethernet", e.IBV_LINK_LAYER_INFINIBAND: "InfiniBand"}
    out = []
    for d in dev.get_device_list():
        name = d.name.decode() if isinstance(d.name, bytes) else str(d.name)
        entry = {"name": name, "ports": []}
        with dev.Context(name=name) as ctx:
            attr = ctx.query_device()
            for p in range(1, attr.phys_port_cnt + 1):
                pa = ctx.query_port(p)
                port = {
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


def _ifname(ifindex):
    if not ifindex:
        return None
    try:
        import socket

        return socket.if_indextoname(ifindex)
    except OSError:
        return str(ifindex)


def memlock():
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    fmt = lambda v: "unlimited" if v == resource.RLIM_INFINITY else f"{v // 1024} KiB"  # noqa: E731
    ok = soft == resource.RLIM_INFINITY or soft >= MEMLOCK_MIN
    return {"soft": fmt(soft), "hard": fmt(hard), "ok": ok}


def rxe_status():
    kver = platform.release()
    moddir = f"/lib/modules/{kver}"
    st = {
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


def verbs_extension():
    """(None, None) when rdmaq's verbs extension imports, else (why, the fix)."""
    try:
        import rdmaq._verbs  # noqa: F401

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


def transports(devices):
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


def collect():
    rep = {"kernel_rdma": os.path.isdir(SYSFS), "source": None, "devices": [], "notes": []}
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
    rep["advice"] = advice(rep)
    return rep


def advice(rep):
    out = []
    _, ext_fix = verbs_extension()
    if ext_fix:  # first: without the extension no device helps
        out.append(f"For the verbs transport, {ext_fix}")
    if not rep["kernel_rdma"]:
        out.append("This kernel has no RDMA support (no /sys/class/infiniband): transport='verbs' "
                   "cannot work here. Use transport='shm' on one host, or run the verbs tests in the "
                   "SoftRoCE VM: tests/rxe/vm-run -- python -m pytest --transport verbs tests/core tests/verbs")
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
    return out


def render(rep):
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
    lines.append("Transports:")
    for name, t in rep["transports"].items():
        lines.append(f"  {name}: {'usable' if t['usable'] else 'NOT usable: ' + (t['why'] or '?')}")
    for n in rep["notes"]:
        lines.append(f"note: {n}")
    if rep["advice"]:
        lines.append("Advice:")
        lines.extend(f"  - {a}" for a in rep["advice"])
    return "\n".join(lines)


def main(argv=None):
    from rdmaq.cli import ArgumentParser

    ap = ArgumentParser(prog="rdmaq doctor",
                        description="What RDMA this machine has, and which rdmaq transports work.")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    args = ap.parse_args(argv)
    rep = collect()
    print(json.dumps(rep, indent=2) if args.json else render(rep))
    # 0 when some transport works; 1 when none does.
    return 0 if any(t["usable"] for t in rep["transports"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
