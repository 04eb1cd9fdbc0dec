"""verbs transport backend: rings written with RDMA WRITE over per-CPU RC QPs.

The data path is C (``rdmaq._rdmaq_verbs``); this module is the bootstrap.
The writer binds a pyzmq ROUTER and a plain TCP listener on its RDMA
network's address and puts both in the handle.  A reader

1. connects a TCP *liveness* socket to the listener (never carries a byte:
   the kernel closes it when either process dies, which wakes the other
   side's C wait at once), then, in ``before_ready``,
2. finds its process's QP pool to the writer's process, or prepares a new
   one (QPs in INIT), and sends ATTACH: pool, port/GID, ring address/rkey,
   the liveness socket's local address;
3. gets the writer's answer (its QPs for a new pool, credit address/rkey,
   trailer key), connects, and sends ATTACHED; the writer then hands the
   ring and the liveness fd to C, and answers.

A reader in the writer's own process attaches directly (loopback pool,
socketpair for liveness), so single-threaded code works as with shm.
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

from . import errors
from ._rdmaq_verbs import ffi, lib
from .handle import Handle

NAME = "verbs"
PROTO = 1
_MAX_QPS = 64
_POLL_S = 0.1

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
    p = ffi.new("struct rdmaq_verbs_port *")
    p.device = str(d["device"]).encode()[:63]
    p.port = int(d["port"])
    p.gid_index = int(d["gid_index"])
    gid = bytes.fromhex(d["gid"])
    if len(gid) != 16:
        raise ValueError(f"bad GID {d['gid']!r}")
    ffi.memmove(p.gid, gid, 16)
    p.lid = int(d["lid"])
    p.link_layer = int(d["link_layer"])
    p.mtu = int(d["mtu"])
    return p


def _ep_dict(e):
    return {"ep_id": e.ep_id, "rkey": e.rkey, "addr": e.addr, "key": e.key}


def _ep_struct(d):
    e = ffi.new("struct rdmaq_verbs_ep_info *")
    e.ep_id, e.rkey, e.addr, e.key = int(d["ep_id"]), int(d["rkey"]), int(d["addr"]), int(d["key"])
    return e


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


def _keepalive(sock):
    """A host that vanishes sends no FIN: let TCP notice within seconds."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, val in (("TCP_KEEPIDLE", 2), ("TCP_KEEPINTVL", 1), ("TCP_KEEPCNT", 3),
                     ("TCP_USER_TIMEOUT", 5000)):
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
        winfo = ffi.new("struct rdmaq_verbs_ep_info *")
        lib.rdmaq_verbs_writer_info(self.ptr, winfo)
        self._winfo = _ep_dict(winfo)
        self._pending = {}  # index -> ATTACH details, until ATTACHED
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
    def _attach_local(self, reader, index):
        with self._lock:
            pool = ffi.new("uint64_t *")
            _check(lib.rdmaq_verbs_pool_find(self._ctx, self._proc, pool), "loopback QP pool")
            mine, theirs = socket.socketpair()
            rinfo = ffi.new("struct rdmaq_verbs_ep_info *")
            lib.rdmaq_verbs_reader_info(reader.ptr, rinfo)
            desc = f"pid {os.getpid()}".encode()
            # Reader first: if the writer then refuses, closing `mine`
            # tells the reader's ring it may be freed.
            rc = lib.rdmaq_verbs_reader_connect(reader.ptr, pool[0], _ep_struct(self._winfo),
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
                ident, raw = self._router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except ValueError:
                continue  # not [identity, payload]: not one of ours
            try:
                msg = json.loads(raw)
                op = msg.get("op")
                if op == "attach":
                    reply = self._on_attach(ident, msg)
                elif op == "attached":
                    reply = self._on_attached(ident, msg)
                else:
                    reply = {"ok": False, "error": f"unknown request {op!r}"}
            except ValueError as e:  # the reader's mistake: bad index, stale handle
                reply = {"ok": False, "value_error": True, "error": str(e)}
            except (KeyError, TypeError) as e:
                reply = {"ok": False, "error": f"bad request: {e!r}"}
            except OSError as e:
                reply = {"ok": False, "errno": e.errno, "error": e.strerror or str(e)}
            except errors.Error as e:
                reply = {"ok": False, "error": str(e)}
            self._router.send_multipart([ident, json.dumps(reply).encode()])

    def _index(self, msg):
        index = msg["index"]
        if msg.get("queue") != self._queue:
            raise ValueError("the handle belongs to another queue (a stale handle?)")
        if not isinstance(index, int) or not 0 <= index < self._n:
            raise ValueError(f"reader index {index!r} out of range: queue has {self._n} readers")
        if index in self._fds:
            raise OSError(errno.EBUSY, f"reader index {index} is already attached")
        return index

    def _on_attach(self, ident, msg):
        index = self._index(msg)
        old = self._pending.get(index)
        if old is not None and old["ident"] != ident:
            raise OSError(errno.EBUSY, f"reader index {index} is already being attached by another reader")
        remote = _port_struct(msg["port"])
        peer = bytes.fromhex(msg["proc"])
        pool = msg["pool"]
        pool_id = int(pool["id"])
        reply_pool = {"id": pool_id}
        if pool.get("qps"):
            qps = pool["qps"]
            if not 1 <= len(qps) <= _MAX_QPS:
                raise ValueError(f"pool of {len(qps)} QPs")
            rq = ffi.new("struct rdmaq_verbs_qp_info[]", [{"qpn": a, "psn": b} for a, b in qps])
            out = ffi.new("struct rdmaq_verbs_qp_info[]", len(qps))
            _check(lib.rdmaq_verbs_pool_accept(self._ctx, peer, pool_id, remote, rq, len(qps), out),
                   f"connect QPs of reader {index}")
            reply_pool["qps"] = [[out[i].qpn, out[i].psn] for i in range(len(qps))]
        elif not lib.rdmaq_verbs_pool_ok(self._ctx, pool_id):
            return {"ok": False, "stale_pool": True,
                    "error": f"writer has no QP pool {pool_id} for reader {index}'s process"}
        self._pending[index] = {
            "ident": ident,
            "pool": pool_id,
            "ring": msg["ring"],
            "live": (msg["live"][0], int(msg["live"][1])),
            "desc": _desc(msg["pid"], msg["host"]),
        }
        return {"ok": True, "port": _port_dict(self._port), "writer": self._winfo, "pool": reply_pool}

    def _on_attached(self, ident, msg):
        index = self._index(msg)
        st = self._pending.get(index)
        if st is None or st["ident"] != ident:
            raise ValueError(f"reader {index} sent ATTACHED without ATTACH")
        sock = self._live.pop(st["live"], None)
        if sock is None:  # its connection may still sit in the backlog
            end = time.monotonic() + 2
            while sock is None and time.monotonic() < end:
                select.select([self._listener], [], [], 0.05)
                self._accept()
                sock = self._live.pop(st["live"], None)
        if sock is None:
            raise errors.Error(f"reader {index}: its liveness connection from {st['live']} never arrived")
        del self._pending[index]
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
        info = handle.info
        try:
            if info.get("proto") != PROTO:
                raise ValueError(f"verbs handle protocol {info.get('proto')!r}, this rdmaq speaks {PROTO}")
            self._queue = str(info["queue"])
            self._writer_proc = bytes.fromhex(info["writer"])
            self._endpoint = str(info["endpoint"])
            live = (str(info["live"][0]), int(info["live"][1]))
            self._writer_desc = _desc(int(info["pid"]), str(info["host"]))
            cfg = {
                "n_readers": handle.n_readers,
                "slot_bytes": int(info["slot_bytes"]),
                "slots": int(info["slots"]),
                "max_message": int(info["max_message"]),
                "spin_ns": spin_ns,
            }
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise ValueError(f"corrupt verbs handle ({e}): {info!r}") from None
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
                local._attach_local(self, index)
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
                    "queue": self._queue,
                    "index": self._index,
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
                reply = self._recv(deadline)
                if not reply.get("ok") and reply.get("stale_pool"):
                    lib.rdmaq_verbs_pool_abort(self._ctx, self._pool)  # we had it, they do not
                    self._pool, self._stage = None, "new"
                    continue
                self._reply_ok(reply)
                self._connect(reply)
                self._send({"op": "attached", "queue": self._queue, "index": self._index})
                self._stage = "attached"
            elif self._stage == "attached":
                self._reply_ok(self._recv(deadline))
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

    def _recv(self, deadline):
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
                return json.loads(self._dealer.recv())
            if self._live_fd in events and lib.rdmaq_verbs_live_gone(self._live_fd):
                raise errors.PeerDeadError(
                    f"verbs reader {self._index}: writer ({self._writer_desc}) died or closed "
                    "before attaching this reader")

    def _reply_ok(self, reply):
        if not reply.get("ok"):
            msg = f"verbs reader {self._index}: writer refused: {reply.get('error', '?')}"
            if reply.get("value_error"):
                raise ValueError(msg)
            if reply.get("errno"):
                raise OSError(reply["errno"], msg)
            raise errors.Error(msg)

    def _connect(self, reply):
        pool = reply["pool"]
        if self._new_qps is not None:
            qps = pool.get("qps") or []
            rq = ffi.new("struct rdmaq_verbs_qp_info[]", [{"qpn": a, "psn": b} for a, b in qps] or 1)
            rc = lib.rdmaq_verbs_pool_complete(self._ctx, self._pool, _port_struct(reply["port"]), rq, len(qps))
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
