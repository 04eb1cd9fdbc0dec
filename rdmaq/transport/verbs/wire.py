"""The values the verbs bootstrap exchanges, and their checks.

The handle and the ATTACH/ATTACHED exchange (rdmaq/transport/verbs/protocol.py)
come from another process, maybe another host.  Each value below is built
only by its checker, which names the field that is wrong (``pool.qps[3][0]``)
and makes sure every number fits the C field it goes into.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..._rdmaq import lib as _core  # the limits of rdmaq.h
from ...fields import U24, U32, U64, Bad, array, attr, get, hexbytes, integer, obj, raw_bytes, show, text
from ...handle import VerbsInfo

# A message above this is not ours: zmq drops the connection (MAXMSGSIZE).
MAX_MESSAGE = 64 * 1024
MAX_QPS = 64
POOL_ID_MAX = (1 << 53) - 1  # pool ids fit a double (JSON) exactly

_IP = re.compile(r"[0-9A-Fa-f:.]+\Z")
_ENDPOINT = re.compile(r"tcp://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})\Z")
_HEX = re.compile(r"[0-9a-f]*\Z")


@dataclass(frozen=True)
class Geometry:
    """A queue's rings: both ends must agree on it."""

    n_readers: int
    slot_bytes: int
    slots: int


@dataclass(frozen=True)
class Port:
    """struct rdmaq_verbs_port: how the peer's QPs are addressed."""

    device: str
    port: int
    gid_index: int
    gid: bytes  # 16 bytes
    lid: int
    link_layer: int  # IBV_LINK_LAYER_*: 1 InfiniBand, 2 Ethernet
    mtu: int  # enum ibv_mtu


@dataclass(frozen=True)
class Exposed:
    """struct rdmaq_verbs_ep_info: an endpoint's exposed memory and wake-up id."""

    ep_id: int
    rkey: int
    addr: int
    key: int  # writer: the trailer key; reader: unused


QpInfo = tuple[int, int]  # (qpn, psn)


@dataclass(frozen=True)
class Pool:
    """A QP pool between two processes: its id, and its QPs when it is new."""

    id: int
    qps: tuple[QpInfo, ...] | None  # None: the pool exists already


Address = tuple[str, int]  # a TCP socket's (ip, port)


def port(v: object, field: str) -> Port:
    d = obj(v, field)
    return Port(
        device=text(get(d, "device", f"{field}.device"), f"{field}.device", 63),
        port=integer(get(d, "port", f"{field}.port"), f"{field}.port", 1, 255),
        gid_index=integer(get(d, "gid_index", f"{field}.gid_index"), f"{field}.gid_index", 0, 65535),
        gid=hexbytes(get(d, "gid", f"{field}.gid"), f"{field}.gid", 16),
        lid=integer(get(d, "lid", f"{field}.lid"), f"{field}.lid", 0, 0xffff),
        link_layer=integer(get(d, "link_layer", f"{field}.link_layer"), f"{field}.link_layer", 1, 2),
        mtu=integer(get(d, "mtu", f"{field}.mtu"), f"{field}.mtu", 1, 5),
    )


def exposed(v: object, field: str) -> Exposed:
    d = obj(v, field)
    return Exposed(
        ep_id=integer(get(d, "ep_id", f"{field}.ep_id"), f"{field}.ep_id", 0, U32),
        rkey=integer(get(d, "rkey", f"{field}.rkey"), f"{field}.rkey", 0, U32),
        addr=integer(get(d, "addr", f"{field}.addr"), f"{field}.addr", 1, U64),
        key=integer(get(d, "key", f"{field}.key"), f"{field}.key", 0, U64),
    )


def qps(v: object, field: str) -> tuple[QpInfo, ...]:
    """A pool's [qpn, psn] pairs: 24-bit numbers, distinct QPs (0 and 1 are special)."""
    out, seen = [], set()
    for i, pair in enumerate(array(v, field, 1, MAX_QPS)):
        f = f"{field}[{i}]"
        if not isinstance(pair, list) or len(pair) != 2:
            raise Bad(f, f"must be a [qpn, psn] pair, got {show(pair)}")
        qpn = integer(pair[0], f"{f}[0]", 2, U24)
        psn = integer(pair[1], f"{f}[1]", 0, U24)
        if qpn in seen:
            raise Bad(f"{f}[0]", f"repeats QP number {qpn}")
        seen.add(qpn)
        out.append((qpn, psn))
    return tuple(out)


def pool(v: object, field: str, qps_required: bool | None = None) -> Pool:
    """{"id", "qps"}; ``qps_required``: True a new pool's, False an existing one's, None either."""
    d = obj(v, field)
    pid = integer(get(d, "id", f"{field}.id"), f"{field}.id", 1, POOL_ID_MAX)
    raw = d.get("qps")
    if qps_required is False and raw:
        raise Bad(f"{field}.qps", "must be empty: the pool exists already")
    if qps_required and not raw:
        raise Bad(f"{field}.qps", "is missing: the pool is new")
    return Pool(pid, qps(raw, f"{field}.qps") if raw else None)


def address(v: object, field: str) -> Address:
    """[ip, port] of a TCP socket."""
    a = array(v, field, 2, 2)
    return text(a[0], f"{field}[0]", 64, _IP), integer(a[1], f"{field}[1]", 1, 65535)


def geometry(v: object, field: str) -> Geometry:
    """Within the C core's limits (rdmaq_config_check checks the rest again)."""
    d = obj(v, field)
    return Geometry(
        n_readers=integer(get(d, "n_readers", f"{field}.n_readers"), f"{field}.n_readers", 1,
                          _core.RDMAQ_MAX_READERS),
        slot_bytes=integer(get(d, "slot_bytes", f"{field}.slot_bytes"), f"{field}.slot_bytes",
                           _core.RDMAQ_MIN_SLOT_BYTES, _core.RDMAQ_MAX_SLOT_BYTES),
        slots=integer(get(d, "slots", f"{field}.slots"), f"{field}.slots", _core.RDMAQ_MIN_SLOTS,
                      _core.RDMAQ_MAX_SLOTS),
    )


def host(v: object, field: str) -> str:
    return text(v, field, 255)


def pid(v: object, field: str) -> int:
    return integer(v, field, 1, (1 << 31) - 1)


def queue_id(v: object, field: str) -> str:
    return text(v, field, 64, _HEX)


def process_id(v: object, field: str) -> bytes:
    """A process's id, 16 bytes as hex (C reads 16 bytes from it)."""
    return hexbytes(v, field, 16)


def endpoint(v: object, field: str) -> str:
    """A zmq endpoint we may connect to: tcp://host:port and nothing else."""
    s = text(v, field, 300)
    m = _ENDPOINT.match(s)
    if not m or not 1 <= int(m.group(2)) <= 65535:
        raise Bad(field, f"must be tcp://HOST:PORT, got {show(s)}")
    return s


def handle_info(info: VerbsInfo, n_readers: int) -> tuple[VerbsInfo, Geometry]:
    """A handle's info with every field checked, and the geometry it describes."""
    def f(name: str) -> Any:
        return attr(info, name, f"info.{name}")

    checked = VerbsInfo(
        proto=integer(f("proto"), "info.proto", 0, U32),
        endpoint=endpoint(f("endpoint"), "info.endpoint"),
        live=address(f("live"), "info.live"),
        queue=queue_id(f("queue"), "info.queue"),
        writer=raw_bytes(f("writer"), "info.writer", 16),
        pid=pid(f("pid"), "info.pid"),
        host=host(f("host"), "info.host"),
        device=text(f("device"), "info.device", 63),
        gid=hexbytes(f("gid"), "info.gid", 16).hex(),
        slot_bytes=f("slot_bytes"),
        slots=f("slots"),
        max_message=integer(f("max_message"), "info.max_message", 1, 1 << 62),
    )
    geo = geometry({"n_readers": n_readers, "slot_bytes": checked.slot_bytes,
                    "slots": checked.slots}, "info")
    return checked, geo
