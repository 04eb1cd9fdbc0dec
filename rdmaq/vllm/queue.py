"""A drop-in for vLLM's shared-memory broadcast ``MessageQueue`` built on rdmaq.

One writer (EngineCore, or a worker for its response queue), N readers.  Local
readers read an rdmaq ring (``rdmaq.Writer``/``rdmaq.Reader``, transport "auto":
verbs where an active RDMA device exists, shared memory otherwise).  Readers on
other hosts are served by the same ring over RDMA when the verbs transport is
usable and their reader slots are known, and otherwise by vLLM's own ZMQ TCP
XPUB/SUB path with vLLM's wire format.

Contract kept (vLLM 0.26, 0.32, 0.33 and 0.34 ``shm_broadcast.MessageQueue``): constructor,
``export_handle``/``create_from_handle``, ``wait_until_ready``,
``readable``/``spin_until_readable`` (0.34's EngineCore polls its response queues with them),
``enqueue``/``dequeue`` (pickle protocol 5, CPU tensors and numpy arrays as
out-of-band buffers the reader owns, ``TimeoutError``), ``shutdown()`` from
another thread (a blocked ``dequeue`` raises ``RuntimeError("cancelled")``),
``broadcast_object`` and the process-group factories.  A vLLM ``Handle`` passed
to ``create_from_handle`` goes to vLLM's own implementation.

Not kept: chunk-level access (``acquire_read``/``acquire_write``), the
``SpinCondition`` internals and the shm tensor arena (the
``enable_shm_tensor_arena`` flag is accepted and ignored with a log line).
"""

from __future__ import annotations

import logging
import os
import pickle
import threading
import time
import weakref
from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist
from torch.distributed import ProcessGroup
from vllm.distributed.device_communicators import shm_broadcast as _sb
from vllm.distributed.utils import StatelessProcessGroup

import rdmaq
from rdmaq import serialize, settings
from rdmaq.queue import _timeout_ns

from . import _stats
from ._geometry import ring_geometry
from ._remote import RemoteReader, RemoteWriter, rdma_device_active
from .placement import place, seat

logger = logging.getLogger("vllm.rdmaq")

# vLLM's class, captured before any plugin patch replaces the module attribute.
# (vLLM ships no types: both are Any to the type checker.)
VllmMessageQueue: Any = getattr(_sb, "_rdmaq_original_MessageQueue", _sb.MessageQueue)
VllmHandle: Any = _sb.Handle

# Same threshold as vLLM: buffers of 1 MiB and more travel out of band.
OOB_MIN_BYTES = 1024 * 1024
# The longest spin_until_readable() blocks before it looks at the caller's input queue
# again (vLLM's remote readers wait 1 ms on their socket between two looks).
READABLE_WAIT_S = 0.001


@dataclass
class RdmaqHandle(VllmHandle):  # type: ignore[misc]
    """vLLM's ``Handle`` plus the rdmaq ring.  ``local_reader_ranks`` and
    ``remote_subscribe_addr`` keep vLLM's meanings (the executor reads both)."""

    ring: Any = None  # rdmaq.Handle for the ring readers, or None
    # Ranks of remote readers that read the ring over RDMA (slot n_local + i).
    ring_remote_ranks: list[int] | None = None
    n_remote_reader: int = 0


def _built_by_vllm(self: Any) -> bool:
    """An instance that vLLM's code built (a vLLM ``Handle`` given to ``create_from_handle``
    while the module attribute points here) holds vLLM's state, not ours: each override
    hands it to vLLM's own method.  Checked first thing in the override itself, not in a
    wrapper around it: a wrapper's frame would outlive the work, and a signal handler's
    exception raised there, after an enqueue delivered or a dequeue handed over, would
    make the call look failed (README, Errors)."""
    return not self._rdmaq


def _cancelled() -> RuntimeError:
    return RuntimeError("cancelled")


def _serializer() -> serialize.Serializer:
    """vLLM's choices: its out-of-band threshold and its tensor reducer, looked up
    at each call so a patched reducer is honoured (a vLLM without one: torch's own).
    The last one made is kept: making a frozen dataclass costs ~1 µs an enqueue."""
    global _last_serializer
    reducer = getattr(_sb, "_reduce_tensor", None)
    s = _last_serializer
    if s is None or s.reduce_tensor is not reducer:
        s = _last_serializer = serialize.Serializer(OOB_MIN_BYTES, reducer)
    return s


_last_serializer: serialize.Serializer | None = None


def _close_endpoints(pid: int, endpoints: list[Any]) -> None:
    # A forked child inherits the parent's queues; it must not close them.
    if os.getpid() != pid:
        return
    for ep in endpoints:
        try:
            ep.close()
        except Exception as e:  # finalizer: report, never raise
            logger.debug("rdmaq: closing %r failed: %s", ep, e)


class RdmaqMessageQueue(VllmMessageQueue):  # type: ignore[misc]
    # False on instances built by vLLM's own code paths: see _built_by_vllm.
    _rdmaq = False
    _writer: rdmaq.Writer | None
    _reader: rdmaq.Reader | None
    _remote: Any  # RemoteWriter (the writer's) or RemoteReader (a remote reader's), or None
    remote_socket: Any

    def __init__(
        self,
        n_reader: int,
        n_local_reader: int,
        local_reader_ranks: list[int] | None = None,
        max_chunk_bytes: int = 1024 * 1024 * 24,
        max_chunks: int = 10,
        connect_ip: str | None = None,
        enable_shm_tensor_arena: bool = False,
        *,
        remote_reader_ranks: list[int] | None = None,
    ):
        placement = place(
            n_reader,
            n_local_reader,
            local_reader_ranks,
            remote_reader_ranks,
            # a blank value is unset (rdmaq/settings.py); place() names a bad one
            remote_mode=settings.stripped("RDMAQ_VLLM_REMOTE") or "auto",
            transport=settings.stripped("RDMAQ_VLLM_TRANSPORT") or "auto",
            rdma_active=rdma_device_active,
        )
        if enable_shm_tensor_arena:
            logger.info(
                "rdmaq MessageQueue ignores enable_shm_tensor_arena: large tensors "
                "travel through the rdmaq ring as out-of-band pickle buffers"
            )
        n_remote = n_reader - n_local_reader
        self._init_state(n_local_reader, n_remote, is_writer=True)
        self._is_local_reader = False
        self._is_remote_reader = False
        self.local_reader_rank = -1
        self.current_idx = -1

        if placement.note:
            logger.info("rdmaq: %s", placement.note)
        n_ring = placement.n_ring
        slot_bytes, slots = ring_geometry(max_chunk_bytes, max_chunks)
        if n_ring > 0:
            self._writer = rdmaq.Writer(
                n_ring, slot_bytes=slot_bytes, slots=slots, transport=placement.transport
            )
        remote_subscribe_addr, remote_addr_ipv6 = None, False
        if placement.n_zmq:
            self._remote = RemoteWriter(placement.n_zmq, connect_ip)
            self.remote_socket = self._remote.socket
            remote_subscribe_addr = self._remote.addr
            remote_addr_ipv6 = self._remote.ipv6

        ring_handle = self._writer.handle if self._writer is not None else None
        self.handle = RdmaqHandle(
            local_reader_ranks=placement.local_reader_ranks,
            remote_subscribe_addr=remote_subscribe_addr,
            remote_addr_ipv6=remote_addr_ipv6,
            ring=ring_handle,
            ring_remote_ranks=placement.ring_remote_ranks,
            n_remote_reader=n_remote,
        )
        self._transport = getattr(ring_handle, "transport", None)
        self._stats = _stats.QueueStats(
            self,
            "writer",
            n_reader=n_reader,
            n_local_reader=n_local_reader,
            transport=self._transport,
            remote="ring" if placement.ring_remote_ranks else ("zmq" if placement.n_zmq else None),
            slot_bytes=slot_bytes if n_ring else None,
            slots=slots if n_ring else None,
        )
        self._finalizer_for([self._writer, self._remote])
        logger.info(
            "rdmaq MessageQueue writer: %d readers (%d local), ring transport=%s "
            "%s x %d B, remote=%s",
            n_reader,
            n_local_reader,
            self._transport,
            slots if n_ring else 0,
            slot_bytes if n_ring else 0,
            self._stats.info["remote"],
        )

    def _init_state(self, n_local_reader: int, n_remote_reader: int, *, is_writer: bool) -> None:
        """What the writer (__init__) and a reader (create_from_handle) both
        start with: our bookkeeping, and the attributes of vLLM's queue that
        its callers may read but the rdmaq path leaves unused."""
        self._rdmaq = True
        self._pid = os.getpid()
        self._close_lock = threading.Lock()
        self.n_local_reader = n_local_reader
        self.n_remote_reader = n_remote_reader
        self.shutting_down = False
        self._is_writer = is_writer
        self.buffer = None
        self.local_socket = None
        self.remote_socket = None
        self._spin_condition = None
        self.tensor_arena = None
        self._writer = None
        self._reader = None
        self._remote = None
        # The next message, taken off the ring (or the remote socket) and not yet handed
        # over: a dequeue() that raised, or a readable(), left it for the next dequeue().
        self._head: Any = None

    def _finalizer_for(self, endpoints: list[Any]) -> None:
        eps = [e for e in endpoints if e is not None]
        fin = weakref.finalize(self, _close_endpoints, self._pid, eps)
        fin.atexit = False
        _stats.track(self)

    # ------------------------------------------------------------------ handle
    def export_handle(self) -> RdmaqHandle:
        return self.handle

    @staticmethod
    def create_from_handle(handle: Any, rank: int) -> Any:
        if not isinstance(handle, RdmaqHandle):
            # A handle from vLLM's own queue: vLLM's own reader.
            return VllmMessageQueue.create_from_handle(handle, rank)
        self = RdmaqMessageQueue.__new__(RdmaqMessageQueue)
        self._init_state(len(handle.local_reader_ranks), handle.n_remote_reader, is_writer=False)
        self.handle = handle
        self.current_idx = 0
        self._transport = getattr(handle.ring, "transport", None)

        where = seat(
            rank,
            handle.local_reader_ranks,
            handle.ring_remote_ranks,
            has_zmq=handle.remote_subscribe_addr is not None,
        )
        role = where.role
        self._is_local_reader = where.kind == "local"
        self._is_remote_reader = not self._is_local_reader
        self.local_reader_rank = where.index if where.index is not None and where.kind == "local" else -1
        if where.index is not None:
            self._reader = rdmaq.Reader(handle.ring, where.index)
        else:
            self._remote = RemoteReader(handle.remote_subscribe_addr, handle.remote_addr_ipv6)
            self.remote_socket = self._remote.socket
        self._stats = _stats.QueueStats(
            self, role, transport=self._transport, rank=rank
        )
        self._finalizer_for([self._reader, self._remote])
        logger.debug("rdmaq MessageQueue %s attached (rank %s)", role, rank)
        return self

    # ------------------------------------------------------------------ setup
    def wait_until_ready(self) -> None:
        """Collective: the writer and every reader call it once."""
        if _built_by_vllm(self):
            VllmMessageQueue.wait_until_ready(self)
            return
        try:
            if self._is_writer:
                if self._writer is not None:
                    self._writer.wait_ready()
                if self._remote is not None:
                    self._remote.wait_ready()
            elif self._reader is not None:
                self._reader.wait_ready()
            else:
                self._remote.wait_ready()
        except rdmaq.ClosedError:
            raise _cancelled() from None

    def shutdown(self) -> None:
        """Wake a ``dequeue``/``enqueue`` blocked in another thread; it raises
        ``RuntimeError("cancelled")``.  Safe to call from any thread, twice."""
        if _built_by_vllm(self):
            VllmMessageQueue.shutdown(self)
            return
        if self.shutting_down:
            return
        self.shutting_down = True
        _stats.final(self)
        if os.getpid() != self._pid:
            return
        with self._close_lock:
            for ep in (self._reader, self._writer, self._remote):
                if ep is not None:
                    ep.close()

    # ------------------------------------------------------------------ data
    # How a call keeps the core endpoints' promise (README, Errors) through the
    # adapter: the work is one step that cannot be split.  An enqueue has
    # delivered once the ring writer's count of messages moved: an exception
    # that comes after that, wherever it comes from, is held for the writer's
    # next call and the enqueue returns.  A dequeue's message moves from the ring
    # into ``_head`` in one step (the reader's get returns it into the
    # attribute), is unpickled from there and leaves it just before the return:
    # a dequeue that raises, whatever raised, leaves it for the next one.

    def enqueue(self, obj: Any, timeout: float | None = None) -> None:
        """Write to message queue with optional timeout (in seconds)"""
        if _built_by_vllm(self):
            VllmMessageQueue.enqueue(self, obj, timeout)
            return
        if not self._is_writer:
            raise RuntimeError("Only writers can enqueue")
        if self.shutting_down:
            raise _cancelled()
        pickled = _serializer().pickle(obj)
        writer = self._writer
        if writer is None:
            self._send_remote(pickled)
            return
        sent_before = writer._done  # the ring writer's count of messages put
        try:
            writer.put(serialize.frame(pickled), timeout=timeout)
            self._send_remote(pickled)
        except BaseException as e:
            if writer._done == sent_before:  # the ring's readers have nothing: the enqueue did nothing
                if isinstance(e, rdmaq.ClosedError):
                    raise _cancelled() from None
                raise
            # They have it: an enqueue that raised would be enqueued again.  As the
            # writer does, its next call raises it.
            if writer._held is None:
                writer._held = e

    def _send_remote(self, pickled: serialize.Pickled) -> None:
        if self._remote is not None:
            # vLLM's wire format: the pickle, then each out-of-band buffer
            self._remote.send([b"".join(pickled.stream), *pickled.buffers])
        nbytes = pickled.stream_bytes
        if pickled.buffers:
            nbytes += sum(b.nbytes for b in pickled.buffers)
        self._stats.count(nbytes)

    def dequeue(self, timeout: float | None = None, indefinite: bool = False) -> Any:
        """Read from message queue with optional timeout (in seconds)"""
        if _built_by_vllm(self):
            return VllmMessageQueue.dequeue(self, timeout, indefinite)
        if self._is_writer:
            raise RuntimeError("Only readers can dequeue")
        if self.shutting_down:
            raise _cancelled()
        if self._head is None:
            self._wait(self._fetch, timeout, indefinite)
        obj = self._unpickle(self._head)  # raises: the message stays first
        self._head = None
        return obj

    def readable(self) -> bool:
        """Whether a dequeue() would find a message at once; never blocks.  A message that
        arrived is taken off the ring now and kept for that dequeue(), which unpickles it
        (and raises what unpickling it raises: a message is readable whatever it holds)."""
        if _built_by_vllm(self):
            readable: bool = VllmMessageQueue.readable(self)
            return readable
        return self._take(0.0)

    def spin_until_readable(self, pending: Sized, deadline: float) -> None:
        """Wait until a message is readable, ``pending`` (the caller's input queue) is
        non-empty or time.monotonic() reaches ``deadline``, as vLLM's does; where vLLM's
        reader spins, this one blocks, in waits of at most READABLE_WAIT_S between which
        it looks at ``pending``."""
        if _built_by_vllm(self):
            VllmMessageQueue.spin_until_readable(self, pending, deadline)
            return
        while not pending:
            left = deadline - time.monotonic()
            if self._take(max(0.0, min(READABLE_WAIT_S, left))) or left <= 0:
                return

    def _take(self, timeout: float | None) -> bool:
        """Move the next message into ``_head`` (True), waiting up to ``timeout``; False
        when none came."""
        try:
            self._fetch(timeout)
        except TimeoutError:
            return False
        return True

    def _fetch(self, timeout: float | None) -> None:
        """Move the next message into ``_head`` unless one is there, waiting up to
        ``timeout`` (TimeoutError).  A message is in ``_head`` or in the ring, never in
        between: the reader's get hands it over as it returns into the attribute."""
        if self._is_writer:
            raise RuntimeError("Only readers can check readability")
        if self.shutting_down:
            raise _cancelled()
        if self._head is not None:
            return
        try:
            if self._reader is not None:
                self._head = self._reader.get(timeout)
            else:
                self._head = self._remote.recv(timeout=timeout)
        except rdmaq.ClosedError:
            raise _cancelled() from None

    def _unpickle(self, msg: Any) -> Any:
        """A message of ``_head``: the ring's bytes, or a remote reader's frames."""
        if self._reader is not None:
            obj = serialize.loads(msg)
            self._stats.count(len(msg))
        else:
            obj = pickle.loads(msg[0], buffers=msg[1:])
            self._stats.count(sum(len(f) for f in msg))
        return obj

    def _wait(self, get: Callable[..., Any], timeout: float | None, indefinite: bool) -> Any:
        """Call ``get`` in slices so that, like vLLM, a reader waiting longer
        than VLLM_RINGBUFFER_WARNING_INTERVAL logs it unless ``indefinite``."""
        start = time.monotonic()
        # rdmaq's reading of a timeout: one beyond the clock's range (10**400, inf) is for ever
        ns = _timeout_ns(None if timeout is None else max(0, timeout))
        deadline = None if ns < 0 else start + ns / 1e9
        n_warning = 1
        while True:
            interval = _sb.VLLM_RINGBUFFER_WARNING_INTERVAL
            wait = None
            if not indefinite:
                wait = max(0.0, start + interval * n_warning - time.monotonic())
            if deadline is not None:
                left = max(0.0, deadline - time.monotonic())
                wait = left if wait is None else min(wait, left)
            try:
                return get(timeout=wait)
            except TimeoutError:
                if self.shutting_down:
                    raise _cancelled() from None
                now = time.monotonic()
                # logged before the deadline is checked, as vLLM does: a wait that overran
                # both (a loaded machine) still says so
                if not indefinite and now >= start + interval * n_warning:
                    _sb.logger.info(_sb.LONG_WAIT_TIME_LOG_MSG, interval)
                    n_warning += 1
                if deadline is not None and now >= deadline:
                    raise

    def broadcast_object(self, obj: Any = None) -> Any:
        if self._is_writer:
            self.enqueue(obj)
            return obj
        return self.dequeue()

    # ------------------------------------------------------------ not offered
    def acquire_write(self, timeout: float | None = None) -> Any:
        if _built_by_vllm(self):
            return VllmMessageQueue.acquire_write(self, timeout)
        raise NotImplementedError(
            "rdmaq MessageQueue has no chunk-level access; use enqueue()"
        )

    def acquire_read(self, timeout: float | None = None, indefinite: bool = False) -> Any:
        if _built_by_vllm(self):
            return VllmMessageQueue.acquire_read(self, timeout, indefinite)
        raise NotImplementedError(
            "rdmaq MessageQueue has no chunk-level access; use dequeue()"
        )

    def rdmaq_stats(self) -> dict[str, Any]:
        """Counters of this endpoint: ours plus the rdmaq ring's."""
        return _stats.snapshot(self)

    # --------------------------------------------------------- process groups
    @staticmethod
    def create_from_process_group_single_reader(
        pg: ProcessGroup,
        max_chunk_bytes: int,
        max_chunks: int,
        reader_rank: int = 0,
        blocking: bool = False,
    ) -> tuple[RdmaqMessageQueue, list[Any]]:
        """Every rank writes its own queue with one reader, ``reader_rank``;
        the handles are gathered there (same as vLLM)."""
        from vllm.platforms import current_platform
        from vllm.platforms.interface import get_assigned_physical_gpu_ids

        assigned = get_assigned_physical_gpu_ids()
        local_size = (
            len(assigned) if assigned is not None else current_platform.device_count()
        )
        rank = dist.get_rank()
        same_node = rank // local_size == reader_rank // local_size
        buffer_io = RdmaqMessageQueue(
            n_reader=1,
            n_local_reader=1 if same_node else 0,
            max_chunk_bytes=max_chunk_bytes,
            max_chunks=max_chunks,
        )
        handle = buffer_io.export_handle()
        handles = [None] * dist.get_world_size(pg) if rank == reader_rank else None
        dist.gather_object(handle, handles, dst=reader_rank, group=pg)
        if blocking:
            buffer_io.wait_until_ready()
        return buffer_io, list(handles or [])

    @staticmethod
    def create_from_process_group(
        pg: ProcessGroup | StatelessProcessGroup,
        max_chunk_bytes: int,
        max_chunks: int,
        writer_rank: int = 0,
        external_writer_handle: Any = None,
        blocking: bool = True,
    ) -> Any:
        """One writer (``writer_rank``), every other rank of ``pg`` a reader:
        same-node ranks read locally, the others remotely (same as vLLM)."""
        if isinstance(pg, ProcessGroup):
            group_rank = dist.get_rank(pg)
            group_world_size = dist.get_world_size(pg)
            global_ranks = dist.get_process_group_ranks(pg)
        else:
            group_rank = pg.rank
            group_world_size = pg.world_size
        from vllm.distributed.parallel_state import in_the_same_node_as

        status = in_the_same_node_as(pg, source_rank=writer_rank)
        if group_rank == writer_rank:
            if external_writer_handle is not None:
                buffer_io = RdmaqMessageQueue.create_from_handle(
                    external_writer_handle, group_rank
                )
            else:
                same_node = [i for i, s in enumerate(status) if s]
                remote = [
                    i
                    for i, s in enumerate(status)
                    if not s and i != writer_rank
                ]
                buffer_io = RdmaqMessageQueue(
                    n_reader=group_world_size - 1,
                    n_local_reader=len(same_node) - 1,
                    local_reader_ranks=[i for i in same_node if i != writer_rank],
                    max_chunk_bytes=max_chunk_bytes,
                    max_chunks=max_chunks,
                    remote_reader_ranks=remote,
                )
            handle = buffer_io.export_handle()
            if isinstance(pg, ProcessGroup):
                dist.broadcast_object_list(
                    [handle], src=global_ranks[writer_rank], group=pg
                )
            else:
                pg.broadcast_obj(handle, writer_rank)
        else:
            if isinstance(pg, ProcessGroup):
                recv = [None]
                dist.broadcast_object_list(
                    recv, src=global_ranks[writer_rank], group=pg
                )
                handle = recv[0]
            else:
                handle = pg.broadcast_obj(None, writer_rank)
            buffer_io = RdmaqMessageQueue.create_from_handle(handle, group_rank)
        if blocking:
            buffer_io.wait_until_ready()
        return buffer_io


# Keep the vLLM name available for ``from rdmaq.vllm.queue import MessageQueue``.
MessageQueue = RdmaqMessageQueue
Handle = RdmaqHandle

__all__ = ["MessageQueue", "Handle", "RdmaqMessageQueue", "RdmaqHandle"]
