"""``rdmaq softroce up --netdev IF`` / ``down`` / ``status``: SoftRoCE (rdma_rxe) devices.

``up`` loads rdma_rxe and runs ``rdma link add NAME type rxe netdev IF``,
then waits for the port to become ACTIVE with a RoCEv2 GID; ``down``
removes the device.  Both need root and a kernel that ships rdma_rxe;
otherwise they say what is missing instead of failing obscurely.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence

from . import sysfs
from .command import ArgumentParser, fail
from .doctor import rxe_status


class SoftRoceError(Exception):
    pass


def _run(cmd: list[str]) -> tuple[int, str]:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise SoftRoceError(f"{cmd[0]} not found (apt-get install iproute2 kmod)") from None
    except subprocess.TimeoutExpired:
        raise SoftRoceError(f"{' '.join(cmd)} did not finish in 30 s") from None
    return r.returncode, (r.stdout + r.stderr).strip()


def _rxe_devices() -> dict[str, str]:
    """name -> netdev of the RDMA links (`rdma link show`)."""
    if not shutil.which("rdma"):
        return {}
    rc, out = _run(["rdma", "link", "show"])
    devs: dict[str, str] = {}
    if rc != 0:
        return devs
    for line in out.splitlines():
        # "link rxe0/1 state ACTIVE physical_state LINK_UP netdev veth0"
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "link" and "netdev" in parts:
            # Every link with a netdev; `rdma link delete` refuses non-software ones.
            devs[parts[1].split("/")[0]] = parts[parts.index("netdev") + 1]
    return devs


def _require_kernel() -> None:
    st = rxe_status()
    if st["loaded"]:
        return
    if not os.path.isdir(sysfs.ROOT) and not st["module_file"]:
        raise SoftRoceError(
            f"kernel {st['kernel']} has no RDMA support and no rdma_rxe module: SoftRoCE cannot run "
            "here. Use a kernel with CONFIG_RDMA_RXE (e.g. Debian's linux-image-amd64), or the VM "
            "harness: tests/rxe/vm-run")
    if not st["module_file"]:
        raise SoftRoceError(f"no rdma_rxe module for kernel {st['kernel']} (CONFIG_RDMA_RXE is off)")
    if os.geteuid() != 0:
        raise SoftRoceError("loading rdma_rxe needs root")
    rc, out = _run(["modprobe", "rdma_rxe"])
    if rc != 0:
        raise SoftRoceError(f"modprobe rdma_rxe failed: {out}")


def _wait_active(name: str, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if sysfs.port_state(name, 1) == "ACTIVE":
            return True
        time.sleep(0.1)  # the kernel offers nothing to wait on
    return False


def up(netdev: str, name: str, timeout: float = 10.0) -> int:
    if not os.path.exists(f"/sys/class/net/{netdev}"):
        raise SoftRoceError(f"no network interface {netdev!r} (see `ip link`)")
    _require_kernel()
    if not shutil.which("rdma"):
        raise SoftRoceError("the `rdma` tool is missing (apt-get install iproute2)")
    existing = _rxe_devices()
    if name in existing:
        if existing[name] == netdev:
            print(f"{name} already exists on {netdev}")
            return 0
        raise SoftRoceError(f"{name} already exists on {existing[name]}; `rdmaq softroce down --name {name}` first")
    for dev, nd in existing.items():
        if nd == netdev:
            raise SoftRoceError(f"{netdev} already has SoftRoCE device {dev}")
    if os.geteuid() != 0:
        raise SoftRoceError("`rdma link add` needs root")
    rc, out = _run(["rdma", "link", "add", name, "type", "rxe", "netdev", netdev])
    if rc != 0:
        raise SoftRoceError(f"rdma link add {name} type rxe netdev {netdev} failed: {out}")
    if not _wait_active(name, timeout):
        raise SoftRoceError(f"{name} was created but port 1 is not ACTIVE after {timeout:g} s "
                            f"(is {netdev} up? `ip link set {netdev} up`)")
    print(f"{name}: SoftRoCE on {netdev}, port 1 ACTIVE")
    for g in sysfs.gids(name, 1):
        print(f"  GID[{g.index}] {g.gid}")
    return 0


def down(name: str) -> int:
    if not shutil.which("rdma"):
        raise SoftRoceError("the `rdma` tool is missing (apt-get install iproute2)")
    existing = _rxe_devices()
    if name not in existing:
        raise SoftRoceError(f"no SoftRoCE device {name!r} (have: {', '.join(existing) or 'none'})")
    if os.geteuid() != 0:
        raise SoftRoceError("`rdma link delete` needs root")
    rc, out = _run(["rdma", "link", "delete", name])
    if rc != 0:
        raise SoftRoceError(f"rdma link delete {name} failed: {out}")
    print(f"{name} removed")
    return 0


def status() -> int:
    devs = _rxe_devices()
    st = rxe_status()
    print(f"rdma_rxe: {'loaded' if st['loaded'] else ('available' if st['module_file'] else 'not available')}"
          f" (kernel {st['kernel']})")
    if not devs:
        print("no SoftRoCE devices")
    for name, nd in sorted(devs.items()):
        print(f"{name} on {nd}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = ArgumentParser(prog="rdmaq softroce", description="Create or remove SoftRoCE (rxe) devices.")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    u = sub.add_parser("up", help="create an rxe device on a network interface")
    u.add_argument("--netdev", required=True, help="Ethernet interface (with an IPv4 address for RoCEv2)")
    u.add_argument("--name", default="rxe0", help="the device's name")
    u.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for ACTIVE")
    d = sub.add_parser("down", help="remove an rxe device")
    d.add_argument("--name", default="rxe0", help="the device's name")
    sub.add_parser("status", help="list rxe devices")
    args = ap.parse_args(argv)
    if args.cmd is None:
        ap.error("missing COMMAND: up, down or status")
    try:
        if args.cmd == "up":
            return up(args.netdev, args.name, args.timeout)
        if args.cmd == "down":
            return down(args.name)
        return status()
    except SoftRoceError as e:
        return fail(f"rdmaq softroce {args.cmd}", str(e))

if __name__ == "__main__":
    sys.exit(main())
