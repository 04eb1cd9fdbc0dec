"""The RDMA device this process uses, and the C structs that describe it.

A device context is opened once per (device, port, GID) and shared by every
queue of the process (the C side keeps it).  Which device: ``device=`` /
``RDMAQ_DEVICE``, else the first with an ACTIVE port; ``port=`` /
``RDMAQ_PORT``; ``gid_index=`` / ``RDMAQ_GID_INDEX``, else the port's RoCEv2
IPv4 GID.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

from ... import errors, settings, sysfs
from ..._rdmaq_verbs import ffi, lib
from .wire import Exposed, Port, QpInfo

STATS = ("contexts", "pools_created", "pools_reused", "qps_created", "qps_reused", "qps_live",
         "cq_events", "imm_received", "graves")


def check(rc: int, what: str) -> None:
    errors.raise_for(rc, what, lib, ffi)


def available() -> bool:
    """An ACTIVE RDMA port exists (sysfs only: opening a device costs more)."""
    return sysfs.active_port_exists()


def process_stats() -> dict[str, int]:
    """Process-wide verbs counters: QPs created/reused, pools, CQ events..."""
    s = ffi.new("struct rdmaq_verbs_stats *")
    lib.rdmaq_verbs_stats(s)
    return {k: getattr(s, k) for k in STATS}


def process_id() -> bytes:
    """This process's identity (16 random bytes; a fork()ed child gets its own)."""
    b = ffi.new("uint8_t[16]")
    lib.rdmaq_verbs_process_id(b)
    return bytes(b)


@dataclass(frozen=True)
class Context:
    """An open device context (struct rdmaq_verbs_ctx *) and its port."""

    ptr: Any
    port: Port
    gid_ipv4: str | None  # the IPv4 address in the port's GID (RoCEv2), if any


def open_context(device: str | None = None, port: int | None = None,
                 gid_index: int | None = None) -> Context:
    """The device context of this process (opened on first use); arguments left
    None come from RDMAQ_DEVICE, RDMAQ_PORT and RDMAQ_GID_INDEX."""
    if device is None:
        device = settings.value("RDMAQ_DEVICE")
    if port is None:
        port = settings.value("RDMAQ_PORT")
    if gid_index is None:
        gid_index = settings.value("RDMAQ_GID_INDEX")
    out = ffi.new("struct rdmaq_verbs_ctx **")
    check(lib.rdmaq_verbs_ctx_open(out, device.encode() if device else ffi.NULL, port, gid_index),
          "open RDMA device")
    info = ffi.new("struct rdmaq_verbs_port *")
    check(lib.rdmaq_verbs_ctx_port(out[0], info), "RDMA port")
    p = port_of(info)
    ipv4 = socket.inet_ntoa(p.gid[12:]) if p.gid[:12] == b"\0" * 10 + b"\xff\xff" else None
    return Context(out[0], p, ipv4)


# ---- the C structs -------------------------------------------------------------

def port_of(c: Any) -> Port:
    return Port(device=ffi.string(c.device).decode(), port=c.port, gid_index=c.gid_index,
                gid=bytes(ffi.buffer(c.gid, 16)), lid=c.lid, link_layer=c.link_layer, mtu=c.mtu)


def port_struct(p: Port) -> Any:
    """struct rdmaq_verbs_port * of a checked Port (every value fits its C field)."""
    c = ffi.new("struct rdmaq_verbs_port *")
    c.device = p.device.encode()
    c.port = p.port
    c.gid_index = p.gid_index
    ffi.memmove(c.gid, p.gid, 16)
    c.lid = p.lid
    c.link_layer = p.link_layer
    c.mtu = p.mtu
    return c


def exposed_of(c: Any) -> Exposed:
    return Exposed(ep_id=c.ep_id, rkey=c.rkey, addr=c.addr, key=c.key)


def exposed_struct(e: Exposed) -> Any:
    """struct rdmaq_verbs_ep_info * of a checked Exposed."""
    c = ffi.new("struct rdmaq_verbs_ep_info *")
    c.ep_id, c.rkey, c.addr, c.key = e.ep_id, e.rkey, e.addr, e.key
    return c


def qp_array(qps: tuple[QpInfo, ...]) -> Any:
    """struct rdmaq_verbs_qp_info[] of checked (qpn, psn) pairs."""
    return ffi.new("struct rdmaq_verbs_qp_info[]", [{"qpn": a, "psn": b} for a, b in qps])


def qps_of(c: Any, n: int) -> tuple[QpInfo, ...]:
    return tuple((c[i].qpn, c[i].psn) for i in range(n))
