"""What crosses the wire in the verbs bootstrap, checked field by field.

The handle and the ATTACH/ATTACHED exchange (JSON over pyzmq, see
rdmaq._verbs) come from another process, maybe another host: nothing in
them is used before it is checked here.  Every check names the field
(``pool.qps[3][0]``) and what was wrong, and every value that reaches C
fits the C type it goes into.  The checkers return plain, typed values;
they never hand back the peer's containers.
"""
import json
import re

# A message above this is not ours: zmq drops the connection (MAXMSGSIZE).
MAX_MESSAGE = 64 * 1024
MAX_QPS = 64
U32 = (1 << 32) - 1
U64 = (1 << 64) - 1
U24 = (1 << 24) - 1
POOL_ID_MAX = (1 << 53) - 1  # pool ids fit a double (JSON) exactly

_PRINTABLE = re.compile(r"[\x20-\x7e]*\Z")
_HEX = re.compile(r"[0-9a-f]*\Z")
_ENDPOINT = re.compile(r"tcp://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})\Z")


class Bad(Exception):
    """One field of a peer's message is missing or wrong."""

    def __init__(self, field, why):
        super().__init__(field, why)
        self.field, self.why = field, why

    def __str__(self):
        return f"field {self.field!r} {self.why}"


def show(v):
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def loads(raw, what):
    """A JSON object from a peer's bytes."""
    try:
        msg = json.loads(raw)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise Bad(what, f"is not valid JSON ({type(e).__name__})") from None
    return obj(msg, what)


def obj(v, field):
    if not isinstance(v, dict):
        raise Bad(field, f"must be an object, got {show(v)}")
    return v


def get(d, key, field=None):
    field = field or key
    if key not in d:
        raise Bad(field, "is missing")
    return d[key]


def integer(v, field, lo, hi):
    if isinstance(v, bool) or not isinstance(v, int):
        raise Bad(field, f"must be an integer, got {show(v)}")
    if not lo <= v <= hi:
        raise Bad(field, f"must be in {lo}..{hi}, got {v}")
    return v


def text(v, field, max_len, pattern=_PRINTABLE):
    if not isinstance(v, str):
        raise Bad(field, f"must be a string, got {show(v)}")
    if len(v) > max_len:
        raise Bad(field, f"is longer than {max_len} characters")
    if not pattern.match(v):
        raise Bad(field, f"has characters it may not have: {show(v)}")
    return v


def hexbytes(v, field, n):
    text(v, field, 2 * n, _HEX)
    if len(v) != 2 * n:
        raise Bad(field, f"must be {n} bytes as {2 * n} lowercase hex digits, got {show(v)}")
    return bytes.fromhex(v)


def array(v, field, lo, hi):
    if not isinstance(v, list):
        raise Bad(field, f"must be a list, got {show(v)}")
    if not lo <= len(v) <= hi:
        raise Bad(field, f"must have {lo}..{hi} entries, got {len(v)}")
    return v


def flag(v, field):
    if not isinstance(v, bool):
        raise Bad(field, f"must be true or false, got {show(v)}")
    return v


# ---- the message parts ------------------------------------------------------

def port(v, field):
    """struct rdmaq_verbs_port, as the peer's QPs are addressed."""
    d = obj(v, field)
    return {
        "device": text(get(d, "device", f"{field}.device"), f"{field}.device", 63),
        "port": integer(get(d, "port", f"{field}.port"), f"{field}.port", 1, 255),
        "gid_index": integer(get(d, "gid_index", f"{field}.gid_index"), f"{field}.gid_index", 0, 65535),
        "gid": hexbytes(get(d, "gid", f"{field}.gid"), f"{field}.gid", 16).hex(),
        "lid": integer(get(d, "lid", f"{field}.lid"), f"{field}.lid", 0, 0xffff),
        "link_layer": integer(get(d, "link_layer", f"{field}.link_layer"), f"{field}.link_layer", 1, 2),
        "mtu": integer(get(d, "mtu", f"{field}.mtu"), f"{field}.mtu", 1, 5),  # enum ibv_mtu
    }


def endpoint_info(v, field):
    """struct rdmaq_verbs_ep_info: exposed memory (addr, rkey) and wake-up id."""
    d = obj(v, field)
    return {
        "ep_id": integer(get(d, "ep_id", f"{field}.ep_id"), f"{field}.ep_id", 0, U32),
        "rkey": integer(get(d, "rkey", f"{field}.rkey"), f"{field}.rkey", 0, U32),
        "addr": integer(get(d, "addr", f"{field}.addr"), f"{field}.addr", 1, U64),
        "key": integer(get(d, "key", f"{field}.key"), f"{field}.key", 0, U64),
    }


def qps(v, field):
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
    return out


def pool(v, field, qps_required=None):
    """{"id", "qps"}: qps is None when the pool exists already."""
    d = obj(v, field)
    pid = integer(get(d, "id", f"{field}.id"), f"{field}.id", 1, POOL_ID_MAX)
    raw = d.get("qps")
    if qps_required is False and raw:
        raise Bad(f"{field}.qps", "must be empty: the pool exists already")
    if qps_required and not raw:
        raise Bad(f"{field}.qps", "is missing: the pool is new")
    return pid, (qps(raw, f"{field}.qps") if raw else None)


def address(v, field):
    """[ip, port] of a TCP socket."""
    a = array(v, field, 2, 2)
    return text(a[0], f"{field}[0]", 64, re.compile(r"[0-9A-Fa-f:.]+\Z")), \
        integer(a[1], f"{field}[1]", 1, 65535)


def geometry(v, field):
    d = obj(v, field)
    return {
        "n_readers": integer(get(d, "n_readers", f"{field}.n_readers"), f"{field}.n_readers", 1, 256),
        "slot_bytes": integer(get(d, "slot_bytes", f"{field}.slot_bytes"), f"{field}.slot_bytes",
                              128, 1 << 30),
        "slots": integer(get(d, "slots", f"{field}.slots"), f"{field}.slots", 2, 1 << 24),
    }


def host(v, field):
    return text(v, field, 255)


def pid(v, field):
    return integer(v, field, 1, (1 << 31) - 1)


def queue_id(v, field):
    return text(v, field, 64, _HEX)


def endpoint(v, field):
    """A zmq endpoint we may connect to: tcp://host:port and nothing else."""
    text(v, field, 300)
    m = _ENDPOINT.match(v)
    if not m or not 1 <= int(m.group(2)) <= 65535:
        raise Bad(field, f"must be tcp://HOST:PORT, got {show(v)}")
    return v


def error_reply(d):
    """A refusal: {"ok": false, "error", and maybe "errno", "value_error", "stale_pool"}."""
    err = d.get("error", "?")
    out = {"error": err[:1000] if isinstance(err, str) else "?"}
    e = d.get("errno")
    out["errno"] = e if isinstance(e, int) and not isinstance(e, bool) and 0 < e < 4096 else None
    out["value_error"] = d.get("value_error") is True
    out["stale_pool"] = d.get("stale_pool") is True
    return out
