"""The verbs reader: owns the C reader (and its ring) and attaches it to the writer.

At creation it connects its TCP liveness socket to the writer; in
``before_ready`` it finds its process's QP pool to the writer's process, or
prepares a new one (QPs in INIT), sends ATTACH, connects with the writer's
answer and sends ATTACHED.  A timeout leaves it where it was: the next
``wait_ready``/``get`` continues from there.
"""
from __future__ import annotations

import enum
import errno
import functools
import os
import socket
import time
from collections.abc import Callable
from typing import TypeVar, cast

import zmq

from ... import errors
from ..._rdmaq_verbs import ffi, lib
from ...fields import U32, Bad, attr, integer
from ...handle import Handle, VerbsInfo
from . import device, net, protocol, wire
from .protocol import Accepted, Attach, Attached, Done, Refused
from .wire import MAX_QPS, Exposed, Pool
from .writer import local_writer

_R = TypeVar("_R")


class _Stage(enum.Enum):
    ATTACH = enum.auto()  # find or prepare a pool, send Attach
    AWAIT_ACCEPTED = enum.auto()  # connect with the writer's answer, send Attached
    AWAIT_DONE = enum.auto()
    READY = enum.auto()


class ReaderBackend:
    """The C reader, and its side of the rendezvous."""

    def __init__(self, handle: Handle, index: int, spin_ns: int) -> None:
        try:
            proto = integer(attr(handle.info, "proto", "info.proto"), "info.proto", 0, U32)
            if proto != protocol.PROTO:
                raise ValueError(f"verbs handle protocol {proto}, this rdmaq speaks "
                                 f"{protocol.PROTO}: run the same rdmaq release on both ends")
            # Handle.check saw to the info's type
            info, self._geometry = wire.handle_info(cast(VerbsInfo, handle.info), handle.n_readers)
        except Bad as e:
            raise ValueError(f"corrupt verbs handle: {e}") from None
        self._queue = info.queue
        self._writer_proc = info.writer
        self._writer_desc = net.describe(info.pid, info.host)
        self._index = index
        self._ctx = device.open_context()
        cfg = ffi.new("struct rdmaq_config *", {
            "n_readers": self._geometry.n_readers, "slot_bytes": self._geometry.slot_bytes,
            "slots": self._geometry.slots, "max_message": info.max_message, "spin_ns": spin_ns})
        out = ffi.new("struct rdmaq_reader **")
        device.check(lib.rdmaq_verbs_reader_create(out, self._ctx.ptr, cfg, index), f"verbs reader {index}")
        self.ptr = out[0]
        self._dealer: zmq.Socket[bytes] | None = None
        self._live: socket.socket | None = None
        self._live_fd = -1
        self._stage = _Stage.ATTACH
        self._pool: int | None = None
        self._new_qps: tuple[wire.QpInfo, ...] | None = None  # our half of a pending pool
        local = local_writer(self._queue) if self._writer_proc == device.process_id() else None
        if local is not None:
            try:
                local.attach_local(self.ptr, index, self._geometry)
            except BaseException:
                lib.rdmaq_reader_destroy(self.ptr)
                raise
            self._stage = _Stage.READY
            return
        try:
            self._live = socket.create_connection(info.live, timeout=10)
        except OSError as e:
            lib.rdmaq_reader_destroy(self.ptr)
            raise errors.PeerDeadError(
                f"verbs reader {index}: cannot reach writer ({self._writer_desc}) at "
                f"{info.live[0]}:{info.live[1]}: {e} (it died, or already has all its readers)") from e
        self._live.setblocking(False)
        self._live_fd = self._live.fileno()  # still valid once C owns it
        net.keepalive(self._live)
        self._dealer = net.zsocket(zmq.DEALER)
        if ":" in info.live[0]:
            self._dealer.ipv6 = True
        self._dealer.connect(info.endpoint)

    # -- rendezvous ------------------------------------------------------------
    def before_ready(self, deadline: float | None) -> None:
        try:
            self._attach(deadline)
        except TimeoutError:
            raise  # resumable: the next wait_ready/get continues where this stopped
        except BaseException:
            self._abort_pool()  # other readers of this process may wait on it
            raise

    def _attach(self, deadline: float | None) -> None:
        while self._stage is not _Stage.READY:
            match self._stage:
                case _Stage.ATTACH:
                    self._send_attach(deadline)
                    self._stage = _Stage.AWAIT_ACCEPTED
                case _Stage.AWAIT_ACCEPTED:
                    reply = self._recv(deadline, functools.partial(
                        protocol.decode_accepted, qps_required=self._new_qps is not None))
                    if isinstance(reply, Refused) and reply.stale_pool:
                        lib.rdmaq_verbs_pool_abort(self._ctx.ptr, self._pool)  # we had it, they do not
                        self._pool, self._stage = None, _Stage.ATTACH
                        continue
                    self._connect(self._accepted(reply))
                    self._send(Attached(self._queue, self._index))
                    self._stage = _Stage.AWAIT_DONE
                case _Stage.AWAIT_DONE:
                    self._raise_refusal(self._recv(deadline, protocol.decode_done))
                    self._stage = _Stage.READY
                    self._close_dealer()

    def _send_attach(self, deadline: float | None) -> None:
        pool = self._find_pool(deadline)
        assert self._live is not None
        ip, port = self._live.getsockname()[:2]
        self._send(Attach(
            queue=self._queue,
            index=self._index,
            geometry=self._geometry,
            proc=device.process_id(),
            pid=os.getpid(),
            host=socket.gethostname(),
            port=self._ctx.port,
            pool=pool,
            ring=self._ring(),
            live=(ip, port),
        ))

    def _ring(self) -> Exposed:
        e = ffi.new("struct rdmaq_verbs_ep_info *")
        lib.rdmaq_verbs_reader_info(self.ptr, e)
        return device.exposed_of(e)

    def _find_pool(self, deadline: float | None) -> Pool:
        """This process's pool to the writer's process: reuse, or prepare one."""
        pool = ffi.new("uint64_t *")
        while True:
            rc = lib.rdmaq_verbs_pool_find(self._ctx.ptr, self._writer_proc, pool)
            if rc == 0:
                self._pool, self._new_qps = pool[0], None
                return Pool(pool[0], None)
            if rc == -errno.ENOENT:
                qps = ffi.new("struct rdmaq_verbs_qp_info[]", MAX_QPS)
                n = ffi.new("uint32_t *")
                rc = lib.rdmaq_verbs_pool_prepare(self._ctx.ptr, self._writer_proc, pool, qps,
                                                  MAX_QPS, n)
                if rc == 0:
                    self._pool, self._new_qps = pool[0], device.qps_of(qps, n[0])
                    return Pool(pool[0], self._new_qps)
            if rc != -errno.EINPROGRESS:
                device.check(rc, f"verbs reader {self._index}: QP pool")
            # Another thread of ours is connecting a pool to the same writer.
            if net.poll_s(deadline) is None:
                raise TimeoutError(f"verbs reader {self._index} wait_ready: timed out waiting for "
                                   "another reader of this process to connect to the writer")
            time.sleep(0.002)

    def _send(self, msg: Attach | Attached) -> None:
        assert self._dealer is not None
        self._dealer.send(protocol.encode(msg))

    def _recv(self, deadline: float | None, decode: Callable[[bytes], _R]) -> _R:
        """The writer's next reply, decoded; a bad one is a ProtocolError naming the field."""
        assert self._dealer is not None
        poller = zmq.Poller()
        poller.register(self._dealer, zmq.POLLIN)
        poller.register(self._live_fd, zmq.POLLIN)
        while True:
            # A deadline that has passed still looks once: a caller polling with short
            # timeouts learns of a reply, or of the writer's death, as one that waits.
            wait = net.poll_s(deadline)
            events = dict(poller.poll(0 if wait is None else int(wait * 1000)))
            if self._dealer in events:
                try:
                    return decode(self._dealer.recv())
                except Bad as e:
                    raise errors.ProtocolError(f"verbs reader {self._index}: the writer "
                                               f"({self._writer_desc}) sent a bad reply: {e}") from None
            if self._live_fd in events and lib.rdmaq_verbs_live_gone(self._live_fd):
                raise errors.PeerDeadError(
                    f"verbs reader {self._index}: writer ({self._writer_desc}) died or closed "
                    "before attaching this reader")
            if wait is None:
                raise TimeoutError(f"verbs reader {self._index} wait_ready: the writer "
                                   f"({self._writer_desc}) did not answer in time")

    def _accepted(self, reply: Accepted | Refused) -> Accepted:
        """The writer's Accepted, checked against what this reader asked for."""
        self._raise_refusal(reply)
        assert isinstance(reply, Accepted)
        try:
            if reply.pool.id != self._pool:
                raise Bad("pool.id", f"must be {self._pool}, the pool this reader named, got "
                                     f"{reply.pool.id}")
            offered, got = self._new_qps, reply.pool.qps
            if offered is not None and got is not None and len(got) != len(offered):
                raise Bad("pool.qps", f"must have {len(offered)} entries, one per QP offered, "
                                      f"got {len(got)}")
            if reply.geometry != self._geometry:
                raise Bad("geometry", f"must be the handle's {self._geometry}, got {reply.geometry}")
        except Bad as e:
            raise errors.ProtocolError(f"verbs reader {self._index}: the writer "
                                       f"({self._writer_desc}) sent a bad reply: {e}") from None
        return reply

    def _raise_refusal(self, reply: Accepted | Done | Refused) -> None:
        """Raise what a refusal says: ValueError (our mistake), IndexInUseError (another
        reader has the index: EBUSY, as over shm), OSError, or rdmaq.Error."""
        if not isinstance(reply, Refused):
            return
        msg = f"verbs reader {self._index}: writer refused: {reply.error}"
        if reply.value_error:
            raise ValueError(msg)
        if reply.errno == errno.EBUSY:
            raise errors.IndexInUseError(msg, errno.EBUSY)
        if reply.errno:
            raise OSError(reply.errno, msg)
        raise errors.Error(msg)

    def _connect(self, reply: Accepted) -> None:
        assert self._pool is not None and self._live is not None
        if self._new_qps is not None:
            qps = reply.pool.qps or ()
            rc = lib.rdmaq_verbs_pool_complete(self._ctx.ptr, self._pool, device.port_struct(reply.port),
                                               device.qp_array(qps), len(qps))
            self._new_qps = None  # completed, or freed by the failure
            device.check(rc, f"verbs reader {self._index}: connect QPs")
        device.check(lib.rdmaq_verbs_reader_connect(self.ptr, self._pool, device.exposed_struct(reply.writer),
                                             self._live.fileno(), self._writer_desc.encode()),
              f"verbs reader {self._index}: connect")
        self._live.detach()  # C owns it now
        self._live = None

    def _abort_pool(self) -> None:
        if self._new_qps is not None and self._pool is not None:
            lib.rdmaq_verbs_pool_abort(self._ctx.ptr, self._pool)
            self._new_qps = self._pool = None

    def _close_dealer(self) -> None:
        if self._dealer is not None:
            self._dealer.close()
            self._dealer = None

    def extra_stats(self) -> dict[str, int]:
        return device.process_stats()

    def close(self) -> None:
        self._abort_pool()
        self._close_dealer()
        if self._live is not None:
            self._live.close()
            self._live = None
