"""verbs transport backend: rings written with RDMA WRITE over per-CPU RC QPs.

The data path is C (``rdmaq._rdmaq_verbs``); this module is the bootstrap.
The writer binds a pyzmq ROUTER and a plain TCP listener on its RDMA
network's address and puts both in the handle.  A reader

1. connects a TCP *liveness* socket to the listener (never carries a byte:
   the kernel closes it when either process dies, which wakes the other
   side's C wait at once), then, in ``before_ready``,
2. finds its process's QP pool to the writer's process, or prepares a new
   one (QPs in INIT), and sends ATTACH: pool, port/GID, ring address/rkey,
   ring geometry, the liveness socket's local address;
3. gets the writer's answer (its QPs for a new pool, the address/rkey of
   this reader's credit slot, trailer key), connects, and sends ATTACHED;
   the writer then hands the ring and the liveness fd to C, and answers.

Every field of the handle and of both sides' messages is checked before
use (rdmaq._verbs_wire): a forged or corrupt one is an error naming the
field.  A reader in the writer's own process attaches directly (loopback
pool, socketpair for liveness), so single-threaded code works as with shm.
"""
import errno
import json
import os
import secrets
import select
import socket
import threading
import time
import weakref

import zmq

from . import _verbs_wire as wire
from . import errors
from ._rdmaq_verbs import ffi, lib
from .handle import Handle

NAME = "verbs"
PROTO = 2  # 2: per-reader credit slots (each its own MR), geometry in ATTACH
_MAX_QPS = wire.MAX_QPS
_POLL_S = 0.1
U32_MAX = wire.U32

# queue id -> WriterBackend, for readers in the writer's own process
_writers = weakref.WeakValueDictionary()
_writers_lock = threading.Lock()


def available():
    """An ACTIVE RDMA port exists (sysfs only: opening a device costs more)."""
    root = "/sys/class/infiniband"
    try:
        devices = os.listdir(root)
    except OSError:
        return False
    for dev in devices:
        try:
            ports = os.listdir(os.path.join(root, dev, "ports"))
        except OSError:
            continue
        for p in ports:
            try:
                with open(os.path.join(root, dev, "ports", p, "state")) as f:
                    if "ACTIVE" in f.read():
                        return True
            except OSError:
                continue
    return False


def process_stats():
    """Process-wide verbs counters: QPs created/reused, pools, CQ events..."""
    s = ffi.new("struct rdmaq_verbs_stats *")
    lib.rdmaq_verbs_stats(s)
    return {k: getattr(s, k) for k in (
        "contexts", "pools_created", "pools_reused", "qps_created", "qps_reused", "qps_live",
        "cq_events", "imm_received", "graves")}


def _check(rc, what):
    errors.raise_for(rc, what, lib, ffi)


def _proc_id():
    b = ffi.new("uint8_t[16]")
    lib.rdmaq_verbs_process_id(b)
    return bytes(b)


def _env_int(name, default):
    v = os.environ.get(name, "")
    if not v:
        return default
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {v!r}") from None


def _open_ctx(device=None, port=None, gid_index=None):
    if device is None:
        device = os.environ.get("RDMAQ_DEVICE") or None
    if port is None:
        port = _env_int("RDMAQ_PORT", 0)
    if gid_index is None:
        gid_index = _env_int("RDMAQ_GID_INDEX", -1)
    out = ffi.new("struct rdmaq_verbs_ctx **")
    _check(lib.rdmaq_verbs_ctx_open(out, device.encode() if device else ffi.NULL, port, gid_index),
           "open RDMA device")
    info = ffi.new("struct rdmaq_verbs_port *")
    _check(lib.rdmaq_verbs_ctx_port(out[0], info), "RDMA port")
    return out[0], info


def _port_dict(p):
    return {
        "device": ffi.string(p.device).decode(),
        "port": p.port,
        "gid_index": p.gid_index,
        "gid": bytes(ffi.buffer(p.gid, 16)).hex(),
        "lid": p.lid,
        "link_layer": p.link_layer,
        "mtu": p.mtu,
    }


def _port_struct(d):
    """d: a port dict checked by wire.port (every value fits its C field)."""
    p = ffi.new("struct rdmaq_verbs_port *")
    p.device = d["device"].encode()
    p.port = d["port"]
    p.gid_index = d["gid_index"]
    ffi.memmove(p.gid, bytes.fromhex(d["gid"]), 16)
    p.lid = d["lid"]
    p.link_layer = d["link_layer"]
    p.mtu = d["mtu"]
    return p


def _ep_dict(e):
    return {"ep_id": e.ep_id, "rkey": e.rkey, "addr": e.addr, "key": e.key}


def _ep_struct(d):
    """d: checked by wire.endpoint_info."""
    e = ffi.new("struct rdmaq_verbs_ep_info *")
    e.ep_id, e.rkey, e.addr, e.key = d["ep_id"], d["rkey"], d["addr"], d["key"]
    return e


def _qp_array(pairs):
    """pairs: checked by wire.qps."""
    return ffi.new("struct rdmaq_verbs_qp_info[]", [{"qpn": a, "psn": b} for a, b in pairs])


def _writer_info(ptr, index):
    e = ffi.new("struct rdmaq_verbs_ep_info *")
    _check(lib.rdmaq_verbs_writer_info(ptr, index, e), f"credit slot of reader {index}")
    return _ep_dict(e)


def _gid_ipv4(port):
    gid = bytes(ffi.buffer(port.gid, 16))
    if gid[:12] == b"\0" * 10 + b"\xff\xff":
        return socket.inet_ntoa(gid[12:])
    return None


def _bootstrap_ip(port, address):
    """Where readers reach the writer: the RoCE address, unless told otherwise."""
    ip = address or os.environ.get("RDMAQ_VERBS_ADDR") or _gid_ipv4(port)
    if ip:
        return ip
    try:  # InfiniBand: GIDs carry no IP
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _zmq_addr(ip, port=None):
    host = f"[{ip}]" if ":" in ip else ip
    return f"tcp://{host}" + (f":{port}" if port is not None else "")


def _remaining(deadline):
    return None if deadline is None else deadline - time.monotonic()


def _poll_s(deadline):
    rem = _remaining(deadline)
    if rem is not None and rem <= 0:
        return None
    return _POLL_S if rem is None else min(_POLL_S, rem)


def _liveness_s():
    """How long a silent network path may last before its peer is declared unreachable."""
    v = _env_int("RDMAQ_VERBS_LIVENESS_S", 5)
    if not 2 <= v <= 3600:
        raise ValueError(f"RDMAQ_VERBS_LIVENESS_S must be in 2..3600 seconds, got {v}")
    return v


def _keepalive(sock):
    """A host that vanishes sends no FIN, a cut link delivers nothing: let TCP
    notice within RDMAQ_VERBS_LIVENESS_S (default 5 s: probes after 2 s of
    silence, then every second).  A shorter outage is ridden out."""
    t = _liveness_s()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, val in (("TCP_KEEPIDLE", max(1, round(t * 0.4))), ("TCP_KEEPINTVL", max(1, round(t * 0.2))),
                     ("TCP_KEEPCNT", 3), ("TCP_USER_TIMEOUT", t * 1000)):
        if hasattr(socket, opt):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), val)
            except OSError:
                pass


def _desc(pid, host):
    return f"pid {pid}" if host == socket.gethostname() else f"pid {pid} on {host}"


def _zsocket(kind):
    s = zmq.Context.instance().socket(kind)
    s.linger = 0
    s.setsockopt(zmq.MAXMSGSIZE, wire.MAX_MESSAGE)  # a larger message is not ours
    return s


class WriterBackend:
    """Owns the C writer and answers readers' ATTACH until all are in."""

    ffi = ffi
    lib = lib

    def __init__(self, config, *, device=None, port=None, gid_index=None, address=None):
        self._ctx, self._port = _open_ctx(device, port, gid_index)
        cfg = ffi.new("struct rdmaq_config *", config)
        out = ffi.new("struct rdmaq_writer **")
        _check(lib.rdmaq_verbs_writer_create(out, self._ctx, cfg), "verbs writer")
        self.ptr = out[0]
        self._n = config["n_readers"]
        self._lock = threading.Lock()  # C attach calls; same-process readers use other threads
        self._queue = secrets.token_hex(8)
        self._proc = _proc_id()
        self._geometry = {k: config[k] for k in ("n_readers", "slot_bytes", "slots")}
        self._pending = {}  # index -> ATTACH details and liveness socket, until ATTACHED
        self._live = {}  # (ip, port) of a reader's liveness socket -> accepted socket
        self._fds = {}  # index -> liveness fd now owned by C (watched until ready)
        self._descs = {}  # index -> "pid N [on host]"
        self._router = self._listener = None
        try:
            ip = _bootstrap_ip(self._port, address)
            self._router = _zsocket(zmq.ROUTER)
            if ":" in ip:
                self._router.ipv6 = True
            zport = self._router.bind_to_random_port(_zmq_addr(ip))
            family = socket.AF_INET6 if ":" in ip else socket.AF_INET
            self._listener = socket.create_server((ip, 0), family=family, backlog=256)
            self._listener.setblocking(False)
        except (OSError, zmq.ZMQError) as e:
            self.close()
            lib.rdmaq_writer_destroy(self.ptr)
            raise OSError(errno.EADDRNOTAVAIL,
                          f"verbs writer: cannot listen for readers on {ip!r}: {e} "
                          "(set address= or RDMAQ_VERBS_ADDR to this host's address)") from e
        self.handle = Handle(NAME, self._n, {
            "proto": PROTO,
            "endpoint": _zmq_addr(ip, zport),
            "live": [ip, self._listener.getsockname()[1]],
            "queue": self._queue,
            "writer": self._proc.hex(),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "device": ffi.string(self._port.device).decode(),
            "gid": bytes(ffi.buffer(self._port.gid, 16)).hex(),
            "slot_bytes": config["slot_bytes"],
            "slots": config["slots"],
            "max_message": config["max_message"],
        })
        with _writers_lock:
            _writers[self._queue] = self

    # -- readers in this process ----------------------------------------------
    def _attach_local(self, reader, index, geometry):
        if geometry != self._geometry:
            raise ValueError(f"reader {index}'s handle describes rings of {geometry}, this writer's "
                             f"are {self._geometry}")
        with self._lock:
            pool = ffi.new("uint64_t *")
            _check(lib.rdmaq_verbs_pool_find(self._ctx, self._proc, pool), "loopback QP pool")
            mine, theirs = socket.socketpair()
            rinfo = ffi.new("struct rdmaq_verbs_ep_info *")
            lib.rdmaq_verbs_reader_info(reader.ptr, rinfo)
            desc = f"pid {os.getpid()}".encode()
            # Reader first: if the writer then refuses, closing `mine`
            # tells the reader's ring it may be freed.
            rc = lib.rdmaq_verbs_reader_connect(reader.ptr, pool[0], _ep_struct(_writer_info(self.ptr, index)),
                                                theirs.fileno(), desc)
            if rc < 0:
                mine.close()
                theirs.close()
                _check(rc, f"attach reader {index}")
            theirs.detach()
            rc = lib.rdmaq_verbs_writer_attach(self.ptr, index, pool[0], rinfo, mine.fileno(), desc)
            if rc < 0:
                mine.close()
                _check(rc, f"attach reader {index}")
            self._fds[index] = mine.detach()
            self._descs[index] = desc.decode()

    # -- rendezvous ------------------------------------------------------------
    def before_ready(self, deadline):
        """Serve ATTACH/ATTACHED until every reader is attached, or time out."""
        while lib.rdmaq_verbs_writer_attached(self.ptr) < self._n:
            self._check_attached_alive()
            wait = _poll_s(deadline)
            if wait is None:
                have = sorted(self._fds)
                raise TimeoutError(
                    f"verbs writer wait_ready: timed out with {len(have)} of {self._n} readers "
                    f"attached (missing: {sorted(set(range(self._n)) - set(have))})")
            if self._router is None:
                raise errors.Error("verbs writer: no longer accepting readers")
            poller = zmq.Poller()
            poller.register(self._router, zmq.POLLIN)
            poller.register(self._listener, zmq.POLLIN)
            events = dict(poller.poll(wait * 1000))
            self._accept()
            if self._router in events:
                self._serve()
        self._check_attached_alive()
        self._stop_listening()

    def _check_attached_alive(self):
        for index, fd in list(self._fds.items()):
            if lib.rdmaq_verbs_live_gone(fd):
                desc = self._descs.get(index, "?")
                raise errors.PeerDeadError(
                    f"verbs writer wait_ready: reader {index} ({desc}) died (or closed) before the "
                    "queue was ready")

    def _accept(self):
        while True:
            try:
                s, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            _keepalive(s)
            self._live[(addr[0], addr[1])] = s

    def _serve(self):
        while True:
            try:
                frames = self._router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 2:
                continue  # not [identity, payload]: not one of ours
            ident, raw = frames
            try:
                reply = self._request(ident, raw)
            except wire.Bad as e:  # a bad field: the sender's mistake, or a forgery
                reply = {"ok": False, "value_error": True, "error": f"bad request: {e}"}
            except ValueError as e:  # the reader's mistake: bad index, stale handle
                reply = {"ok": False, "value_error": True, "error": str(e)}
            except OSError as e:
                reply = {"ok": False, "errno": e.errno, "error": e.strerror or str(e)}
            except errors.Error as e:
                reply = {"ok": False, "error": str(e)}
            self._router.send_multipart([ident, json.dumps(reply).encode()])

    def _request(self, ident, raw):
        msg = wire.loads(raw, "request")
        op = wire.get(msg, "op")
        if op not in ("attach", "attached"):
            raise wire.Bad("op", f"must be 'attach' or 'attached', got {wire.show(op)}")
        proto = wire.get(msg, "proto")
        if proto != PROTO:
            raise ValueError(f"reader speaks verbs protocol {wire.show(proto)}, this writer {PROTO}: "
                             "run the same rdmaq release on both ends")
        if wire.queue_id(wire.get(msg, "queue"), "queue") != self._queue:
            raise ValueError("the handle belongs to another queue (a stale handle?)")
        index = wire.integer(wire.get(msg, "index"), "index", 0, U32_MAX)
        if index >= self._n:
            raise ValueError(f"reader index {index} out of range: queue has {self._n} readers")
        if index in self._fds:
            raise OSError(errno.EBUSY, f"reader index {index} is already attached")
        if op == "attach":
            return self._on_attach(ident, index, msg)
        return self._on_attached(ident, index)

    def _on_attach(self, ident, index, msg):
        geometry = wire.geometry(wire.get(msg, "geometry"), "geometry")
        if geometry != self._geometry:
            raise ValueError(f"reader {index}'s handle describes rings of {geometry}, this writer's "
                             f"are {self._geometry}")
        peer = wire.hexbytes(wire.get(msg, "proc"), "proc", 16)
        if peer == self._proc:  # readers in this process attach without a request
            raise wire.Bad("proc", "is this writer's own process id")
        desc = _desc(wire.pid(wire.get(msg, "pid"), "pid"), wire.host(wire.get(msg, "host"), "host"))
        remote = wire.port(wire.get(msg, "port"), "port")
        pool_id, qps = wire.pool(wire.get(msg, "pool"), "pool")
        ring = wire.endpoint_info(wire.get(msg, "ring"), "ring")
        live = wire.address(wire.get(msg, "live"), "live")
        old = self._pending.get(index)
        if old is not None and old["ident"] != ident:
            if not lib.rdmaq_verbs_live_gone(old["sock"].fileno()):
                raise OSError(errno.EBUSY, f"reader index {index} is already being attached by "
                                           f"another reader ({old['desc']})")
            old["sock"].close()  # that one left half-way: this one takes the index
            del self._pending[index]
        elif old is not None:
            raise ValueError(f"reader {index} sent ATTACH twice")
        # The reader connected its liveness socket before sending ATTACH.
        sock = self._liveness_socket(live)
        if sock is None:
            raise errors.Error(f"reader {index}: its liveness connection from {live[0]}:{live[1]} "
                               "never arrived")
        reply_pool = {"id": pool_id}
        try:
            if qps:
                out = ffi.new("struct rdmaq_verbs_qp_info[]", len(qps))
                _check(lib.rdmaq_verbs_pool_accept(self._ctx, peer, pool_id, _port_struct(remote),
                                                   _qp_array(qps), len(qps), out),
                       f"connect QPs of reader {index}")
                reply_pool["qps"] = [[out[i].qpn, out[i].psn] for i in range(len(qps))]
            elif not lib.rdmaq_verbs_pool_ok(self._ctx, peer, pool_id):
                self._live[live] = sock  # the reader tries again with a new pool
                return {"ok": False, "stale_pool": True,
                        "error": f"writer has no QP pool {pool_id} for reader {index}'s process"}
            winfo = _writer_info(self.ptr, index)
        except BaseException:
            self._live[live] = sock  # still that reader's, if it tries again
            raise
        self._pending[index] = {"ident": ident, "pool": pool_id, "ring": ring, "sock": sock,
                                "desc": desc}
        return {"ok": True, "port": _port_dict(self._port), "writer": winfo, "pool": reply_pool,
                "geometry": self._geometry}

    def _liveness_socket(self, live):
        sock = self._live.pop(live, None)
        end = time.monotonic() + 2
        while sock is None and time.monotonic() < end:  # it may still sit in the backlog
            select.select([self._listener], [], [], 0.05)
            self._accept()
            sock = self._live.pop(live, None)
        return sock

    def _on_attached(self, ident, index):
        st = self._pending.get(index)
        if st is None or st["ident"] != ident:
            raise ValueError(f"reader {index} sent ATTACHED without ATTACH")
        del self._pending[index]
        sock = st["sock"]
        with self._lock:
            rc = lib.rdmaq_verbs_writer_attach(self.ptr, index, st["pool"], _ep_struct(st["ring"]),
                                               sock.fileno(), st["desc"].encode())
            if rc < 0:
                sock.close()
                _check(rc, f"attach reader {index}")
            self._fds[index] = sock.detach()
        self._descs[index] = st["desc"]
        return {"ok": True}

    def _stop_listening(self):
        # Late readers now get "connection refused" at once, not a hang.
        if self._router is not None:
            self._router.close()
            self._router = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for s in self._live.values():
            s.close()
        self._live.clear()
        for st in self._pending.values():
            st["sock"].close()
        self._pending.clear()

    def extra_stats(self):
        return process_stats()

    def close(self):
        self._stop_listening()
        with _writers_lock:
            if _writers.get(self._queue) is self:
                del _writers[self._queue]


class ReaderBackend:
    """Owns the C reader (and its ring); attaches in before_ready."""

    ffi = ffi
    lib = lib

    def __init__(self, handle, index, spin_ns):
        try:
            info = wire.obj(handle.info, "info")
            proto = wire.get(info, "proto")
            if proto != PROTO:
                raise ValueError(f"verbs handle protocol {wire.show(proto)}, this rdmaq speaks {PROTO}: "
                                 "run the same rdmaq release on both ends")
            self._queue = wire.queue_id(wire.get(info, "queue"), "queue")
            self._writer_proc = wire.hexbytes(wire.get(info, "writer"), "writer", 16)
            self._endpoint = wire.endpoint(wire.get(info, "endpoint"), "endpoint")
            live = wire.address(wire.get(info, "live"), "live")
            self._writer_desc = _desc(wire.pid(wire.get(info, "pid"), "pid"),
                                      wire.host(wire.get(info, "host"), "host"))
            # They only describe the writer, in messages: checked all the same.
            if "device" in info:
                wire.text(info["device"], "device", 63)
            if "gid" in info:
                wire.hexbytes(info["gid"], "gid", 16)
            self._geometry = wire.geometry({
                "n_readers": handle.n_readers,
                "slot_bytes": wire.get(info, "slot_bytes"),
                "slots": wire.get(info, "slots"),
            }, "handle")
            cfg = dict(self._geometry, spin_ns=spin_ns,
                       max_message=wire.integer(wire.get(info, "max_message"), "max_message", 1, 1 << 62))
        except wire.Bad as e:
            raise ValueError(f"corrupt verbs handle: {e}") from None
        self._index = index
        self._ctx, self._port = _open_ctx()
        out = ffi.new("struct rdmaq_reader **")
        _check(lib.rdmaq_verbs_reader_create(out, self._ctx, ffi.new("struct rdmaq_config *", cfg), index),
               f"verbs reader {index}")
        self.ptr = out[0]
        self._dealer = None
        self._live = None
        self._stage = "new"
        self._pool = None
        self._new_qps = None  # our half of a pending pool
        self._connected = False
        with _writers_lock:
            local = _writers.get(self._queue) if self._writer_proc == _proc_id() else None
        if local is not None:
            try:
                local._attach_local(self, index, self._geometry)
            except BaseException:
                lib.rdmaq_reader_destroy(self.ptr)
                raise
            self._stage = "done"
            self._connected = True
            return
        try:
            self._live = socket.create_connection(live, timeout=10)
        except OSError as e:
            lib.rdmaq_reader_destroy(self.ptr)
            raise errors.PeerDeadError(
                f"verbs reader {index}: cannot reach writer ({self._writer_desc}) at "
                f"{live[0]}:{live[1]}: {e} (it died, or already has all its readers)") from e
        self._live.setblocking(False)
        self._live_fd = self._live.fileno()  # still valid once C owns it
        _keepalive(self._live)
        self._dealer = _zsocket(zmq.DEALER)
        if ":" in live[0]:
            self._dealer.ipv6 = True
        self._dealer.connect(self._endpoint)

    # -- rendezvous ------------------------------------------------------------
    def before_ready(self, deadline):
        try:
            self._attach(deadline)
        except TimeoutError:
            raise  # resumable: the next wait_ready/get continues where this stopped
        except BaseException:
            if self._new_qps is not None and self._pool is not None:
                # Do not leave a pending pool that other readers here wait on.
                lib.rdmaq_verbs_pool_abort(self._ctx, self._pool)
                self._new_qps = self._pool = None
            raise

    def _attach(self, deadline):
        while self._stage != "done":
            if self._stage == "new":
                self._get_pool(deadline)
                self._send({
                    "op": "attach",
                    "proto": PROTO,
                    "queue": self._queue,
                    "index": self._index,
                    "geometry": {k: self._geometry[k] for k in ("n_readers", "slot_bytes", "slots")},
                    "proc": _proc_id().hex(),
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "port": _port_dict(self._port),
                    "pool": {"id": self._pool, "qps": self._new_qps},
                    "ring": self._ring_info(),
                    "live": list(self._live.getsockname()[:2]),
                })
                self._stage = "attach"
            elif self._stage == "attach":
                reply = self._recv(deadline, self._attach_reply)
                if not reply["ok"] and reply["stale_pool"]:
                    lib.rdmaq_verbs_pool_abort(self._ctx, self._pool)  # we had it, they do not
                    self._pool, self._stage = None, "new"
                    continue
                self._reply_ok(reply)
                self._connect(reply)
                self._send({"op": "attached", "proto": PROTO, "queue": self._queue, "index": self._index})
                self._stage = "attached"
            elif self._stage == "attached":
                self._reply_ok(self._recv(deadline, lambda d: {"ok": True}))
                self._stage = "done"
                self._dealer.close()
                self._dealer = None

    def _ring_info(self):
        e = ffi.new("struct rdmaq_verbs_ep_info *")
        lib.rdmaq_verbs_reader_info(self.ptr, e)
        return _ep_dict(e)

    def _get_pool(self, deadline):
        """This process's pool to the writer's process: reuse, or prepare one."""
        pool = ffi.new("uint64_t *")
        while True:
            rc = lib.rdmaq_verbs_pool_find(self._ctx, self._writer_proc, pool)
            if rc == 0:
                self._pool, self._new_qps = pool[0], None
                return
            if rc == -errno.ENOENT:
                qps = ffi.new("struct rdmaq_verbs_qp_info[]", _MAX_QPS)
                n = ffi.new("uint32_t *")
                rc = lib.rdmaq_verbs_pool_prepare(self._ctx, self._writer_proc, pool, qps, _MAX_QPS, n)
                if rc == 0:
                    self._pool = pool[0]
                    self._new_qps = [[qps[i].qpn, qps[i].psn] for i in range(n[0])]
                    return
            if rc != -errno.EINPROGRESS:
                _check(rc, f"verbs reader {self._index}: QP pool")
            # Another thread of ours is connecting a pool to the same writer.
            if _poll_s(deadline) is None:
                raise TimeoutError(f"verbs reader {self._index} wait_ready: timed out waiting for "
                                   "another reader of this process to connect to the writer")
            time.sleep(0.002)

    def _send(self, msg):
        self._dealer.send(json.dumps(msg).encode())

    def _attach_reply(self, d):
        """The writer's answer to ATTACH, every field checked (d["ok"] is true)."""
        offered = self._new_qps
        pool_id, qps = wire.pool(wire.get(d, "pool"), "pool", qps_required=offered is not None)
        if pool_id != self._pool:
            raise wire.Bad("pool.id", f"must be {self._pool}, the pool this reader named, got {pool_id}")
        if offered is not None and len(qps) != len(offered):
            raise wire.Bad("pool.qps", f"must have {len(offered)} entries, one per QP offered, "
                                       f"got {len(qps)}")
        geometry = wire.geometry(wire.get(d, "geometry"), "geometry")
        if geometry != self._geometry:
            raise wire.Bad("geometry", f"must be the handle's {self._geometry}, got {geometry}")
        return {"ok": True, "port": wire.port(wire.get(d, "port"), "port"), "qps": qps,
                "writer": wire.endpoint_info(wire.get(d, "writer"), "writer")}

    def _parse_reply(self, raw, parse_ok):
        try:
            d = wire.loads(raw, "reply")
            if not wire.flag(wire.get(d, "ok"), "ok"):
                return dict(wire.error_reply(d), ok=False)
            return parse_ok(d)
        except wire.Bad as e:
            raise errors.ProtocolError(f"verbs reader {self._index}: the writer ({self._writer_desc}) "
                                       f"sent a bad reply: {e}") from None

    def _recv(self, deadline, parse_ok):
        poller = zmq.Poller()
        poller.register(self._dealer, zmq.POLLIN)
        poller.register(self._live_fd, zmq.POLLIN)
        while True:
            wait = _poll_s(deadline)
            if wait is None:
                raise TimeoutError(f"verbs reader {self._index} wait_ready: the writer "
                                   f"({self._writer_desc}) did not answer in time")
            events = dict(poller.poll(wait * 1000))
            if self._dealer in events:
                return self._parse_reply(self._dealer.recv(), parse_ok)
            if self._live_fd in events and lib.rdmaq_verbs_live_gone(self._live_fd):
                raise errors.PeerDeadError(
                    f"verbs reader {self._index}: writer ({self._writer_desc}) died or closed "
                    "before attaching this reader")

    def _reply_ok(self, reply):
        if not reply["ok"]:
            msg = f"verbs reader {self._index}: writer refused: {reply['error']}"
            if reply["value_error"]:
                raise ValueError(msg)
            if reply["errno"]:
                raise OSError(reply["errno"], msg)
            raise errors.Error(msg)

    def _connect(self, reply):
        if self._new_qps is not None:
            qps = reply["qps"]
            rc = lib.rdmaq_verbs_pool_complete(self._ctx, self._pool, _port_struct(reply["port"]),
                                               _qp_array(qps), len(qps))
            self._new_qps = None  # completed, or freed by the failure
            _check(rc, f"verbs reader {self._index}: connect QPs")
        fd = self._live.fileno()
        _check(lib.rdmaq_verbs_reader_connect(self.ptr, self._pool, _ep_struct(reply["writer"]), fd,
                                              self._writer_desc.encode()),
               f"verbs reader {self._index}: connect")
        self._live.detach()  # C owns it now
        self._live = None
        self._connected = True

    def extra_stats(self):
        return process_stats()

    def close(self):
        if self._new_qps is not None and self._pool is not None:
            lib.rdmaq_verbs_pool_abort(self._ctx, self._pool)
            self._new_qps = None
        if self._dealer is not None:
            self._dealer.close()
            self._dealer = None
        if self._live is not None:
            self._live.close()
            self._live = None
