"""The verbs writer: owns the C writer and answers readers' ATTACH until all are in.

It binds a zmq ROUTER and a TCP liveness listener on its RDMA network's
address and puts both in the handle.  Readers in its own process attach
directly (the loopback pool, a socketpair for liveness), so single-threaded
code works as with shm.
"""
from __future__ import annotations

import errno
import os
import secrets
import select
import socket
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import zmq

from ... import errors
from ..._rdmaq_verbs import ffi, lib
from ...fields import Bad
from ...handle import Handle, VerbsInfo
from .. import RingConfig
from . import net, protocol
from .device import (
    check,
    exposed_of,
    exposed_struct,
    open_context,
    port_struct,
    process_id,
    process_stats,
    qp_array,
    qps_of,
)
from .protocol import Accepted, Attach, Attached, Done, Refused, Reply, Request
from .wire import Address, Exposed, Geometry, Pool

NAME = "verbs"

# queue id -> WriterBackend, for readers in the writer's own process
_writers: weakref.WeakValueDictionary[str, WriterBackend] = weakref.WeakValueDictionary()
_writers_lock = threading.Lock()


def local_writer(queue: str) -> WriterBackend | None:
    """The writer of ``queue`` when it lives in this process."""
    with _writers_lock:
        return _writers.get(queue)


@dataclass
class _Pending:
    """A reader between ATTACH and ATTACHED."""

    ident: bytes  # its zmq identity
    pool: int
    ring: Exposed
    sock: socket.socket  # its liveness connection
    desc: str


class WriterBackend:
    """The C writer, and the rendezvous that attaches its readers."""

    def __init__(self, config: RingConfig, *, device: str | None = None,
                 port: int | None = None, gid_index: int | None = None,
                 address: str | None = None) -> None:
        self._ctx = open_context(device, port, gid_index)
        cfg = ffi.new("struct rdmaq_config *", config)
        out = ffi.new("struct rdmaq_writer **")
        check(lib.rdmaq_verbs_writer_create(out, self._ctx.ptr, cfg), "verbs writer")
        self.ptr = out[0]
        self._n = config["n_readers"]
        self._lock = threading.Lock()  # C attach calls; same-process readers use other threads
        self._queue = secrets.token_hex(8)
        self._proc = process_id()
        self._geometry = Geometry(config["n_readers"], config["slot_bytes"], config["slots"])
        self._pending: dict[int, _Pending] = {}
        self._live: dict[Address, socket.socket] = {}  # a reader's liveness address -> accepted socket
        self._fds: dict[int, int] = {}  # index -> liveness fd now owned by C (watched until ready)
        self._descs: dict[int, str] = {}  # index -> "pid N [on host]"
        self._router: zmq.Socket[bytes] | None = None
        self._listener: socket.socket | None = None
        ip = net.bootstrap_ip(self._ctx.gid_ipv4, address)
        try:
            self._router = net.zsocket(zmq.ROUTER)
            if ":" in ip:
                self._router.ipv6 = True
            zport = self._router.bind_to_random_port(net.zmq_addr(ip))
            family = socket.AF_INET6 if ":" in ip else socket.AF_INET
            self._listener = socket.create_server((ip, 0), family=family, backlog=256)
            self._listener.setblocking(False)
        except (OSError, zmq.ZMQError) as e:
            self.close()
            lib.rdmaq_writer_destroy(self.ptr)
            raise OSError(errno.EADDRNOTAVAIL,
                          f"verbs writer: cannot listen for readers on {ip!r}: {e} "
                          "(set address= or RDMAQ_VERBS_ADDR to this host's address)") from e
        self.handle = Handle(NAME, self._n, VerbsInfo(
            proto=protocol.PROTO,
            endpoint=net.zmq_addr(ip, zport),
            live=(ip, self._listener.getsockname()[1]),
            queue=self._queue,
            writer=self._proc,
            pid=os.getpid(),
            host=socket.gethostname(),
            device=self._ctx.port.device,
            gid=self._ctx.port.gid.hex(),
            slot_bytes=config["slot_bytes"],
            slots=config["slots"],
            max_message=config["max_message"],
        ))
        with _writers_lock:
            _writers[self._queue] = self

    def _credit_slot(self, index: int) -> Exposed:
        e = ffi.new("struct rdmaq_verbs_ep_info *")
        check(lib.rdmaq_verbs_writer_info(self.ptr, index, e), f"credit slot of reader {index}")
        return exposed_of(e)

    # -- readers in this process ----------------------------------------------
    def attach_local(self, reader: Any, index: int, geometry: Geometry) -> None:
        """Connect ``reader`` (a struct rdmaq_reader * of this process): the loopback pool,
        a socketpair for liveness."""
        if index >= self._n:  # as _answer checks a remote reader's
            raise ValueError(f"reader index {index} out of range: queue has {self._n} readers")
        if geometry != self._geometry:
            raise ValueError(f"reader {index}'s handle describes rings of {geometry}, this writer's "
                             f"are {self._geometry}")
        with self._lock:
            pool = ffi.new("uint64_t *")
            check(lib.rdmaq_verbs_pool_find(self._ctx.ptr, self._proc, pool), "loopback QP pool")
            mine, theirs = socket.socketpair()
            rinfo = ffi.new("struct rdmaq_verbs_ep_info *")
            lib.rdmaq_verbs_reader_info(reader, rinfo)
            desc = f"pid {os.getpid()}".encode()
            # Reader first: if the writer then refuses, closing `mine`
            # tells the reader's ring it may be freed.
            rc = lib.rdmaq_verbs_reader_connect(reader, pool[0],
                                                exposed_struct(self._credit_slot(index)),
                                                theirs.fileno(), desc)
            if rc < 0:
                mine.close()
                theirs.close()
                check(rc, f"attach reader {index}")
            theirs.detach()
            rc = lib.rdmaq_verbs_writer_attach(self.ptr, index, pool[0], rinfo, mine.fileno(), desc)
            if rc < 0:
                mine.close()
                check(rc, f"attach reader {index}")
            self._fds[index] = mine.detach()
            self._descs[index] = desc.decode()

    # -- rendezvous ------------------------------------------------------------
    def before_ready(self, deadline: float | None) -> None:
        """Serve ATTACH/ATTACHED until every reader is attached, or time out."""
        while lib.rdmaq_verbs_writer_attached(self.ptr) < self._n:
            self._check_attached_alive()
            wait = net.poll_s(deadline)
            if wait is None:
                have = sorted(self._fds)
                raise TimeoutError(
                    f"verbs writer wait_ready: timed out with {len(have)} of {self._n} readers "
                    f"attached (missing: {sorted(set(range(self._n)) - set(have))})")
            if self._router is None or self._listener is None:
                raise errors.Error("verbs writer: no longer accepting readers")
            poller = zmq.Poller()
            poller.register(self._router, zmq.POLLIN)
            poller.register(self._listener, zmq.POLLIN)
            events = dict(poller.poll(int(wait * 1000)))
            self._accept()
            if self._router in events:
                self._serve(self._router)
        self._check_attached_alive()
        self._stop_listening()

    def _check_attached_alive(self) -> None:
        for index, fd in list(self._fds.items()):
            if lib.rdmaq_verbs_live_gone(fd):
                desc = self._descs.get(index, "?")
                raise errors.PeerDeadError(
                    f"verbs writer wait_ready: reader {index} ({desc}) died (or closed) before the "
                    "queue was ready")

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                s, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            net.keepalive(s)
            self._live[(addr[0], addr[1])] = s

    def _serve(self, router: zmq.Socket[bytes]) -> None:
        while True:
            try:
                frames = router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 2:
                continue  # not [identity, payload]: not one of ours
            ident, raw = frames
            reply: Reply
            try:
                reply = self._answer(ident, protocol.decode_request(raw))
            except Bad as e:  # a bad field: the sender's mistake, or a forgery
                reply = Refused(f"bad request: {e}", value_error=True)
            except ValueError as e:  # the reader's mistake: bad index, stale handle, old release
                reply = Refused(str(e), value_error=True)
            except OSError as e:
                reply = Refused(e.strerror or str(e), errno=e.errno)
            except errors.Error as e:
                reply = Refused(str(e))
            router.send_multipart([ident, protocol.encode(reply)])

    def _answer(self, ident: bytes, request: Request) -> Reply:
        if request.queue != self._queue:
            raise ValueError("the handle belongs to another queue (a stale handle?)")
        index = request.index
        if index >= self._n:
            raise ValueError(f"reader index {index} out of range: queue has {self._n} readers")
        if index in self._fds:
            raise OSError(errno.EBUSY, f"reader index {index} is already attached")
        match request:
            case Attach():
                return self._on_attach(ident, request)
            case Attached():
                return self._on_attached(ident, index)

    def _on_attach(self, ident: bytes, req: Attach) -> Reply:
        index = req.index
        if req.geometry != self._geometry:
            raise ValueError(f"reader {index}'s handle describes rings of {req.geometry}, this "
                             f"writer's are {self._geometry}")
        if req.proc == self._proc:  # readers in this process attach without a request
            raise Bad("proc", "is this writer's own process id")
        desc = net.describe(req.pid, req.host)
        old = self._pending.get(index)
        if old is not None and old.ident != ident:
            if not lib.rdmaq_verbs_live_gone(old.sock.fileno()):
                raise OSError(errno.EBUSY, f"reader index {index} is already being attached by "
                                           f"another reader ({old.desc})")
            old.sock.close()  # that one left half-way: this one takes the index
            del self._pending[index]
        elif old is not None:
            raise ValueError(f"reader {index} sent ATTACH twice")
        # The reader connected its liveness socket before sending ATTACH.
        sock = self._liveness_socket(req.live)
        if sock is None:
            raise errors.Error(f"reader {index}: its liveness connection from {req.live[0]}:"
                               f"{req.live[1]} never arrived")
        qps = req.pool.qps
        try:
            if qps:
                out = ffi.new("struct rdmaq_verbs_qp_info[]", len(qps))
                check(lib.rdmaq_verbs_pool_accept(self._ctx.ptr, req.proc, req.pool.id,
                                                  port_struct(req.port),
                                                  qp_array(qps), len(qps), out),
                      f"connect QPs of reader {index}")
                ours = Pool(req.pool.id, qps_of(out, len(qps)))
            elif lib.rdmaq_verbs_pool_ok(self._ctx.ptr, req.proc, req.pool.id):
                ours = Pool(req.pool.id, None)
            else:
                self._live[req.live] = sock  # the reader tries again with a new pool
                return Refused(f"writer has no QP pool {req.pool.id} for reader {index}'s process",
                               stale_pool=True)
            credit = self._credit_slot(index)
        except BaseException:
            self._live[req.live] = sock  # still that reader's, if it tries again
            raise
        self._pending[index] = _Pending(ident, req.pool.id, req.ring, sock, desc)
        return Accepted(port=self._ctx.port, writer=credit, pool=ours, geometry=self._geometry)

    def _liveness_socket(self, live: Address) -> socket.socket | None:
        assert self._listener is not None  # listening until every reader is in
        sock = self._live.pop(live, None)
        end = time.monotonic() + 2
        while sock is None and time.monotonic() < end:  # it may still sit in the backlog
            select.select([self._listener], [], [], 0.05)
            self._accept()
            sock = self._live.pop(live, None)
        return sock

    def _on_attached(self, ident: bytes, index: int) -> Reply:
        st = self._pending.get(index)
        if st is None or st.ident != ident:
            raise ValueError(f"reader {index} sent ATTACHED without ATTACH")
        del self._pending[index]
        with self._lock:
            rc = lib.rdmaq_verbs_writer_attach(self.ptr, index, st.pool, exposed_struct(st.ring),
                                               st.sock.fileno(), st.desc.encode())
            if rc < 0:
                st.sock.close()
                check(rc, f"attach reader {index}")
            self._fds[index] = st.sock.detach()
        self._descs[index] = st.desc
        return Done()

    def _stop_listening(self) -> None:
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
            st.sock.close()
        self._pending.clear()

    def extra_stats(self) -> dict[str, int]:
        return process_stats()

    def close(self) -> None:
        self._stop_listening()
        with _writers_lock:
            if _writers.get(self._queue) is self:
                del _writers[self._queue]


def create_writer(config: RingConfig, **options: Any) -> WriterBackend:
    """options: device=, port=, gid_index=, address= (see WriterBackend)."""
    return WriterBackend(config, **options)
