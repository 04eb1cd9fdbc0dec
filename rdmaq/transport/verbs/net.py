"""The bootstrap's sockets: where readers reach a writer, and noticing a peer is gone.

Each reader keeps a plain TCP *liveness* connection to its writer that never
carries a byte: the kernel closes it when either process dies, which wakes
the other side's C wait at once; TCP keep-alive covers a host that vanishes.
"""
from __future__ import annotations

import socket
import time

import zmq

from ... import settings
from .wire import MAX_MESSAGE

POLL_S = 0.1  # longest wait between checks of a deadline and the liveness socket


def liveness_s() -> int:
    """How long a silent network path may last before its peer is declared unreachable."""
    return int(settings.value("RDMAQ_VERBS_LIVENESS_S"))


def keepalive(sock: socket.socket) -> None:
    """A host that vanishes sends no FIN, a cut link delivers nothing: let TCP
    notice within RDMAQ_VERBS_LIVENESS_S (default 5 s: probes after 2 s of
    silence, then every second).  A shorter outage is ridden out."""
    t = liveness_s()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, val in (("TCP_KEEPIDLE", max(1, round(t * 0.4))), ("TCP_KEEPINTVL", max(1, round(t * 0.2))),
                     ("TCP_KEEPCNT", 3), ("TCP_USER_TIMEOUT", t * 1000)):
        if hasattr(socket, opt):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), val)
            except OSError:
                pass


def bootstrap_ip(gid_ipv4: str | None, address: str | None) -> str:
    """Where readers reach the writer: the RoCE address, unless told otherwise."""
    ip = address or settings.value("RDMAQ_VERBS_ADDR") or gid_ipv4
    if ip:
        return ip
    try:  # InfiniBand: GIDs carry no IP
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def zmq_addr(ip: str, port: int | None = None) -> str:
    host = f"[{ip}]" if ":" in ip else ip
    return f"tcp://{host}" + (f":{port}" if port is not None else "")


def zsocket(kind: int) -> zmq.Socket[bytes]:
    s: zmq.Socket[bytes] = zmq.Context.instance().socket(kind)
    s.linger = 0
    s.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)  # a larger message is not ours
    return s


def poll_s(deadline: float | None) -> float | None:
    """How long to wait before looking again; None once ``deadline`` has passed."""
    if deadline is None:
        return POLL_S
    rem = deadline - time.monotonic()
    return None if rem <= 0 else min(POLL_S, rem)


def describe(pid: int, host: str) -> str:
    """A peer process for messages: "pid N", and its host when it is not this one."""
    return f"pid {pid}" if host == socket.gethostname() else f"pid {pid} on {host}"
