"""RDMA devices as the kernel lists them in /sys/class/infiniband.

Reading sysfs opens no device, so it is cheap enough for ``transport="auto"``
to ask before every writer, and it works without libibverbs.  One reader of
that tree serves the verbs transport's availability, ``rdmaq doctor``,
``rdmaq softroce`` and the benchmark's machine record.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

ROOT = "/sys/class/infiniband"


@dataclass(frozen=True)
class Gid:
    index: int
    gid: str  # as sysfs writes it: eight groups of four hex digits
    type: str | None  # "IB/RoCE v1", "RoCE v2"
    netdev: str | None


@dataclass(frozen=True)
class Port:
    port: int
    state: str  # "ACTIVE", "DOWN", ... ("?" when unreadable)
    phys_state: str
    link_layer: str  # "Ethernet", "InfiniBand"
    gids: list[Gid] = field(default_factory=list)  # the non-zero entries


@dataclass(frozen=True)
class Device:
    name: str
    node_type: str | None
    ports: list[Port]


def read(path: str) -> str | None:
    """A sysfs file's one value, stripped; None if it cannot be read."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _numbers(path: str) -> list[int]:
    """The numbered entries of a directory (ports, GID indexes), sorted; none if unreadable."""
    try:
        return sorted(int(n) for n in os.listdir(path))
    except (OSError, ValueError):
        return []


def _state(raw: str | None) -> str:
    # sysfs writes "4: ACTIVE"; the name is what a reader wants
    return (raw or "?").split(":")[-1].strip()


def device_names(root: str = ROOT) -> list[str]:
    """The RDMA devices' names, sorted; none where the kernel has no RDMA."""
    try:
        return sorted(os.listdir(root))
    except OSError:
        return []


def port_state(device: str, port: int, root: str = ROOT) -> str | None:
    """A port's state ("ACTIVE", "DOWN", ...), or None if there is no such port."""
    raw = read(os.path.join(root, device, "ports", str(port), "state"))
    return None if raw is None else _state(raw)


def active_port_exists(root: str = ROOT) -> bool:
    """Some RDMA port is ACTIVE (reads only the ports' states)."""
    return any(port_state(dev, p, root) == "ACTIVE"
               for dev in device_names(root)
               for p in _numbers(os.path.join(root, dev, "ports")))


def gids(device: str, port: int, root: str = ROOT) -> list[Gid]:
    """A port's non-zero GID table entries, with their types and network devices."""
    base = os.path.join(root, device, "ports", str(port))
    out = []
    for i in _numbers(os.path.join(base, "gids")):
        gid = read(os.path.join(base, "gids", str(i))) or ""
        if not gid.replace(":", "").strip("0"):
            continue
        out.append(Gid(i, gid, read(os.path.join(base, "gid_attrs", "types", str(i))),
                       read(os.path.join(base, "gid_attrs", "ndevs", str(i)))))
    return out


def devices(root: str = ROOT) -> list[Device]:
    """Every RDMA device with its ports and their GIDs."""
    out = []
    for name in device_names(root):
        base = os.path.join(root, name)
        ports = [Port(p, _state(read(os.path.join(base, "ports", str(p), "state"))),
                      _state(read(os.path.join(base, "ports", str(p), "phys_state"))),
                      read(os.path.join(base, "ports", str(p), "link_layer")) or "?",
                      gids(name, p, root))
                 for p in _numbers(os.path.join(base, "ports"))]
        out.append(Device(name, read(os.path.join(base, "node_type")), ports))
    return out
