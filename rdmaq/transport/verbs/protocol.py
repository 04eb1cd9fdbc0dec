"""The verbs bootstrap's messages: a reader's ATTACH and ATTACHED, the writer's answers.

JSON over a zmq DEALER (reader) / ROUTER (writer) pair, one request and one
reply at a time::

    reader                                   writer
    Attach(pool, port, ring, liveness) --->
                                       <---  Accepted(its QPs for a new pool, credit slot)
                                             | Refused(why; stale_pool: try a new pool)
    (connects its QPs and ring)
    Attached                           --->
                                       <---  Done | Refused
    (the writer hands the ring and the liveness socket to C)

Decoding checks every field (rdmaq/transport/verbs/wire.py) and raises
``fields.Bad`` naming the first one that is wrong; a request of another
protocol version is a ``VersionMismatch``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ...fields import U32, Bad, flag, get, integer, loads, show
from . import wire
from .wire import Address, Exposed, Geometry, Pool, Port

# The bootstrap's version, and the ring format's over verbs (csrc/format.h's RDMAQ_VERSION
# 2; verbs_writer.c refuses to compile with another until this changes): docs/format.md.
PROTO = 2  # 2: per-reader credit slots (each its own MR), geometry in ATTACH


class VersionMismatch(ValueError):
    """The peer speaks another version of this protocol."""


@dataclass(frozen=True)
class Attach:
    """Reader ``index`` asks to attach: its pool (with its QPs if new), its port,
    its ring, and its end of the liveness connection."""

    queue: str
    index: int
    geometry: Geometry
    proc: bytes  # the reader process's id
    pid: int
    host: str
    port: Port
    pool: Pool
    ring: Exposed
    live: Address


@dataclass(frozen=True)
class Attached:
    """Reader ``index`` has connected its QPs and ring to the writer's."""

    queue: str
    index: int


Request = Attach | Attached


@dataclass(frozen=True)
class Accepted:
    """The writer's answer to Attach: its port, its QPs for a new pool, the address
    of this reader's credit slot, the rings' geometry."""

    port: Port
    writer: Exposed
    pool: Pool
    geometry: Geometry


@dataclass(frozen=True)
class Done:
    """The writer's answer to Attached: the reader is in."""


@dataclass(frozen=True)
class Refused:
    """A refusal.  ``value_error``: the reader's mistake (bad index, stale handle);
    ``errno``: an OSError's; ``stale_pool``: the writer has no such pool, ask with a new one."""

    error: str
    errno: int | None = None
    value_error: bool = False
    stale_pool: bool = False


Reply = Accepted | Done | Refused


# ---- encoding ----------------------------------------------------------------

def _port(p: Port) -> dict[str, Any]:
    return {"device": p.device, "port": p.port, "gid_index": p.gid_index, "gid": p.gid.hex(),
            "lid": p.lid, "link_layer": p.link_layer, "mtu": p.mtu}


def _exposed(e: Exposed) -> dict[str, Any]:
    return {"ep_id": e.ep_id, "rkey": e.rkey, "addr": e.addr, "key": e.key}


def _pool(p: Pool) -> dict[str, Any]:
    d: dict[str, Any] = {"id": p.id}
    if p.qps is not None:
        d["qps"] = [list(q) for q in p.qps]
    return d


def _geometry(g: Geometry) -> dict[str, Any]:
    return {"n_readers": g.n_readers, "slot_bytes": g.slot_bytes, "slots": g.slots}


def encode(msg: Request | Reply) -> bytes:
    d: dict[str, Any]
    match msg:
        case Attach():
            d = {"op": "attach", "proto": PROTO, "queue": msg.queue, "index": msg.index,
                 "geometry": _geometry(msg.geometry), "proc": msg.proc.hex(), "pid": msg.pid,
                 "host": msg.host, "port": _port(msg.port), "pool": _pool(msg.pool),
                 "ring": _exposed(msg.ring), "live": list(msg.live)}
        case Attached():
            d = {"op": "attached", "proto": PROTO, "queue": msg.queue, "index": msg.index}
        case Accepted():
            d = {"ok": True, "port": _port(msg.port), "writer": _exposed(msg.writer),
                 "pool": _pool(msg.pool), "geometry": _geometry(msg.geometry)}
        case Done():
            d = {"ok": True}
        case Refused():
            d = {"ok": False, "error": msg.error}
            if msg.errno is not None:
                d["errno"] = msg.errno
            if msg.value_error:
                d["value_error"] = True
            if msg.stale_pool:
                d["stale_pool"] = True
    return json.dumps(d).encode()


# ---- decoding ----------------------------------------------------------------

def decode_request(raw: bytes) -> Request:
    """A reader's request, every field checked."""
    msg = loads(raw, "request")
    op = get(msg, "op")
    if op not in ("attach", "attached"):
        raise Bad("op", f"must be 'attach' or 'attached', got {show(op)}")
    proto = get(msg, "proto")
    if proto != PROTO:
        raise VersionMismatch(f"reader speaks verbs protocol {show(proto)}, this writer {PROTO}: "
                              "run the same rdmaq release on both ends")
    queue = wire.queue_id(get(msg, "queue"), "queue")
    index = integer(get(msg, "index"), "index", 0, U32)
    if op == "attached":
        return Attached(queue, index)
    return Attach(
        queue=queue,
        index=index,
        geometry=wire.geometry(get(msg, "geometry"), "geometry"),
        proc=wire.process_id(get(msg, "proc"), "proc"),
        pid=wire.pid(get(msg, "pid"), "pid"),
        host=wire.host(get(msg, "host"), "host"),
        port=wire.port(get(msg, "port"), "port"),
        pool=wire.pool(get(msg, "pool"), "pool"),
        ring=wire.exposed(get(msg, "ring"), "ring"),
        live=wire.address(get(msg, "live"), "live"),
    )


def _refused(d: dict[str, Any]) -> Refused:
    """A refusal, taken leniently: it only ever becomes an error message."""
    err = d.get("error", "?")
    e = d.get("errno")
    return Refused(
        error=err[:1000] if isinstance(err, str) else "?",
        errno=e if isinstance(e, int) and not isinstance(e, bool) and 0 < e < 4096 else None,
        value_error=d.get("value_error") is True,
        stale_pool=d.get("stale_pool") is True,
    )


def decode_accepted(raw: bytes, *, qps_required: bool) -> Accepted | Refused:
    """The writer's answer to Attach; ``qps_required``: the reader offered a new pool."""
    d = loads(raw, "reply")
    if not flag(get(d, "ok"), "ok"):
        return _refused(d)
    return Accepted(
        pool=wire.pool(get(d, "pool"), "pool", qps_required=qps_required),
        geometry=wire.geometry(get(d, "geometry"), "geometry"),
        port=wire.port(get(d, "port"), "port"),
        writer=wire.exposed(get(d, "writer"), "writer"),
    )


def decode_done(raw: bytes) -> Done | Refused:
    """The writer's answer to Attached."""
    d = loads(raw, "reply")
    if not flag(get(d, "ok"), "ok"):
        return _refused(d)
    return Done()
