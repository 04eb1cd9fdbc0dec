"""The public endpoints: Writer and Reader.

Both drive the C ring through their transport's cffi library; the transport
(rdmaq/transport) only creates the C object and connects it.
"""
from __future__ import annotations

import errno
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from . import _hold_gil, errors, serialize, settings
from . import policy as _policy
from ._rdmaq import lib as _core  # the limits of rdmaq.h
from .handle import Handle
from .transport import Backend, RingConfig, WriterBackend
from .transport import load as load_transport
from .transport import resolve as resolve_transport

if TYPE_CHECKING:
    from typing_extensions import Buffer

DEFAULT_SLOT_BYTES = 64 * 1024
DEFAULT_SLOTS = 64
DEFAULT_MAX_MESSAGE = 1 << 30
# The waiting settings' defaults are rdmaq/settings.py's, named here for callers.
DEFAULT_SPIN_US = settings.default("RDMAQ_SPIN_US")
DEFAULT_SLICE_US = settings.default("RDMAQ_SLICE_US")
POLICIES = _policy.POLICIES  # how a reader waits: rdmaq/policy.py
DEFAULT_FREE_SPIN_US = settings.default("RDMAQ_FREE_SPIN_US")
SCRATCH_BYTES = 256 * 1024  # per reader: messages up to this size take one C call
# The most a put copies without letting go of the GIL (_hold_gil): a longer copy costs more
# than the hand-off it saves, and would stop the process's other threads while it lasts.
HOLD_GIL_BYTES = SCRATCH_BYTES
_EINTR = -errno.EINTR
_EAGAIN = -errno.EAGAIN


_E = TypeVar("_E", bound="_Endpoint")
_NS_FOREVER = 1 << 62  # timeouts beyond this (~146 years) mean "no timeout"
_S_FOREVER = _NS_FOREVER // 10**9
_forks = 0  # os.fork()s that made this process, counted in each child


def _count_fork() -> None:
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_count_fork)


def _timeout_ns(timeout: float | None) -> int:
    """Seconds (None or inf: forever) as the C core's nanoseconds (-1: forever)."""
    if timeout is None:
        return -1
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, got {type(timeout).__name__}")
    if timeout < 0:  # before isnan, which cannot convert an int beyond a float's range
        raise ValueError(f"timeout must be >= 0, got {timeout}")
    if timeout >= _S_FOREVER:  # an int too large for a float (10**400) included
        return -1
    if math.isnan(timeout):
        raise ValueError("timeout must be a number of seconds or None, got nan")
    return int(timeout * 1e9)


def _remaining_ns(deadline: float | None) -> int:
    if deadline is None:
        return -1
    return max(0, int((deadline - time.monotonic()) * 1e9))


def _deadline(timeout: float | None) -> float | None:
    ns = _timeout_ns(timeout)
    return None if ns < 0 else time.monotonic() + ns / 1e9


def _lock_timeout(deadline: float | None) -> float:
    """Seconds left for Lock.acquire (-1: no limit)."""
    if deadline is None:
        return -1
    return min(max(0.0, deadline - time.monotonic()), threading.TIMEOUT_MAX)


def _unusable_buffer(p: Any, e: Exception) -> str:
    """Why ffi.from_buffer refused a buffer: a strided view gets no copy behind the
    caller's back (a message is copied once, into the ring)."""
    try:
        contiguous = memoryview(p).c_contiguous
    except (BufferError, ValueError):  # released, or exports nothing now
        contiguous = True
    if contiguous:
        return f"put() cannot use a {type(p).__name__}: {e}"
    return (f"put() needs C-contiguous buffers, got a non-contiguous {type(p).__name__}: "
            "copy it first (bytes(), numpy.ascontiguousarray)")


def _int_arg(name: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in {lo}..{hi}, got {value}")
    return value


def _wait_config(ffi: Any, spin_us: int | None, slice_us: int | None, anticipate: bool | None,
                 restore_slice: bool | None, free_spin_ns: int = 0) -> Any:
    """struct rdmaq_wait_config from arguments, falling back on RDMAQ_* variables
    (rdmaq/settings.py), then defaults; raises on a bad value before anything is made."""
    spin_us = _int_arg("spin_us", settings.value("RDMAQ_SPIN_US") if spin_us is None
                       else spin_us, 0, _core.RDMAQ_MAX_SPIN_NS // 1000)
    slice_min, slice_max = _core.RDMAQ_MIN_SLICE_NS // 1000, _core.RDMAQ_MAX_SLICE_NS // 1000
    slice_us = _int_arg("slice_us", settings.value("RDMAQ_SLICE_US") if slice_us is None
                        else slice_us, 0, slice_max)
    if 0 < slice_us < slice_min:
        raise ValueError(f"slice_us must be 0 (off) or {slice_min}..{slice_max}, got {slice_us}")
    if anticipate is None:
        anticipate = settings.value("RDMAQ_ANTICIPATE")
    if restore_slice is None:
        restore_slice = settings.value("RDMAQ_RESTORE_SLICE")
    if not isinstance(anticipate, bool):
        raise TypeError(f"anticipate must be a bool, got {type(anticipate).__name__}")
    if not isinstance(restore_slice, bool):
        raise TypeError(f"restore_slice must be a bool, got {type(restore_slice).__name__}")
    experiment = settings.value("RDMAQ_EXPERIMENT")
    return ffi.new("struct rdmaq_wait_config *", {
        "spin_ns": spin_us * 1000,
        "slice_ns": slice_us * 1000,
        "anticipate": int(anticipate),
        "restore_slice": int(restore_slice),
        "eintr_on_main_thread": 1,  # so signal handlers run while a call blocks (see _Endpoint._call)
        "free_spin_ns": free_spin_ns,
        "busy_spin_ns": experiment["busy_spin_us"] * 1000,
        "free_spin_busy": int(experiment["free_spin_busy"]),
        "settle_far_ns": settings.value("RDMAQ_SETTLE_FAR_US") * 1000,
    })


@dataclass(frozen=True)
class _CFunctions:
    """The ring's C functions one endpoint role uses (rdmaq_writer_* or rdmaq_reader_*)."""

    wait_ready: Callable[..., int]
    set_wait: Callable[..., int]
    stats: Callable[..., None]
    trace: Callable[..., None]
    cancel: Callable[..., None]
    close: Callable[..., int]
    destroy: Callable[..., None]


def _writer_c_functions(lib: Any) -> _CFunctions:
    return _CFunctions(lib.rdmaq_writer_wait_ready, lib.rdmaq_writer_set_wait, lib.rdmaq_writer_stats,
                       lib.rdmaq_writer_trace, lib.rdmaq_writer_cancel, lib.rdmaq_writer_close,
                       lib.rdmaq_writer_destroy)


def _reader_c_functions(lib: Any) -> _CFunctions:
    return _CFunctions(lib.rdmaq_reader_wait_ready, lib.rdmaq_reader_set_wait, lib.rdmaq_reader_stats,
                       lib.rdmaq_reader_trace, lib.rdmaq_reader_cancel, lib.rdmaq_reader_close,
                       lib.rdmaq_reader_destroy)


class _Endpoint:
    """Shared plumbing: one operation at a time, close() from any thread."""

    _kind = "endpoint"  # "writer" or "reader", for messages
    _closed = True  # until the backend exists, for __del__
    _final_stats: dict[str, int] = {}
    _final_trace: dict[str, Any] = {"start_ns": 0, "mid_ns": 0, "end_ns": 0, "how": "none"}
    _ptr: Any = None  # the C object, until close() frees it
    # What a signal handler raised once the call had done its work: the next call raises it.
    _held: BaseException | None = None
    _life = threading.RLock()  # (each endpoint gets its own in _start)

    def _start(self, backend: Backend, ffi: Any, lib: Any, c_functions: _CFunctions) -> None:
        self._backend = backend
        self._ffi, self._lib = ffi, lib
        self._c_functions = c_functions
        self._ptr: Any = backend.ptr
        self._addr = _hold_gil.address(ffi, backend.ptr)  # the same, for _hold_gil's calls
        # Held while C uses the object.  Reentrant only to tell whether this thread holds
        # it (_is_owned): a call from a signal handler that interrupted one on this
        # endpoint (_in_call) is refused; a lock left taken by a handler's exception as it
        # was taken (not _in_call) is let go by this thread's next call.
        self._call_lock: Any = threading.RLock()
        self._in_call = False  # set once _call_lock is taken, cleared just before it is let go
        # Held while the C object is read outside an operation (stats, last_trace) or freed:
        # reentrant, for a signal handler that reads stats while close() holds it.
        self._life = threading.RLock()
        self._closed = False
        self._ready = False
        self._pid = os.getpid()
        self._forks = _forks
        # The C object's count of messages put or got, and its mirror: after an exception,
        # a count above the mirror says the call had done its work before it came.  The
        # code between a call's work and its return makes no call that can raise but the
        # count's read, whose exception comes after it (a signal handler runs only after a
        # C function returns, as a Python function starts, or in a loop): see Writer.put.
        self._counts = ffi.new("struct rdmaq_stats *")
        c_functions.stats(self._ptr, self._counts)
        self._done: int = self._counts.messages

    def _check(self, rc: int, what: str) -> None:
        errors.raise_for(rc, f"{self._kind} {what}", self._lib, self._ffi)

    def _check_open(self) -> None:
        if self._closed:
            raise errors.ClosedError(f"{self._kind} is closed")

    def _enter(self, deadline: float | None, what: str) -> None:
        """Take the endpoint for one operation (``what``, for messages) by the deadline."""
        op = self._call_lock
        if self._closed or self._forks != _forks or op._is_owned():
            self._enter_unusual(what)
        try:
            acquired = op.acquire(True, -1 if deadline is None else _lock_timeout(deadline))
        except BaseException:
            # A signal handler raised as the lock was taken: let it go (should another
            # handler's exception come first, this thread's next call lets it go).
            if op._is_owned():
                op.release()
            raise
        if not acquired:
            raise TimeoutError(f"{self._kind} {what}: timed out while another thread's call "
                               f"held this {self._kind}")
        self._in_call = True
        if self._closed or self._held is not None:
            closed, held = self._closed, self._held
            if not closed:  # from the last call, which had done its work: raised before this one does any
                self._held = None
            self._in_call = False
            op.release()
            if closed:  # closed while we waited for the lock
                raise errors.ClosedError(f"{self._kind} is closed")
            raise held  # type: ignore[misc]

    def _enter_unusual(self, what: str) -> None:
        """Before the lock: a closed or fork()ed endpoint, or a lock this thread holds."""
        self._check_open()
        if self._forks != _forks:
            # Checked before the lock, which a parent's thread may have held at fork().
            raise errors.ForkedError(
                f"{self._kind} {what}: {self._kind} belongs to the parent process (fork), pid "
                f"{self._pid}: make endpoints in the process that uses them", errno.ESTALE)
        if self._in_call:
            raise RuntimeError(f"{self._kind} {what}: called while this thread's call on "
                               f"this {self._kind} is under way (from a signal handler?)")
        self._call_lock.release()  # left taken by a signal handler's exception as it was taken

    def _c_stats(self) -> dict[str, int]:
        s = self._ffi.new("struct rdmaq_stats *")
        self._c_functions.stats(self._ptr, s)
        return {k: getattr(s, k) for k, _ in self._ffi.typeof("struct rdmaq_stats").fields}

    def _configure_wait(self, spin_us: int | None, slice_us: int | None, anticipate: bool | None,
                        restore_slice: bool | None, free_spin_ns: int = 0) -> None:
        wc = _wait_config(self._ffi, spin_us, slice_us, anticipate, restore_slice, free_spin_ns)
        self._check(self._c_functions.set_wait(self._ptr, wc), "wait configuration")

    @property
    def last_trace(self) -> dict[str, Any]:
        """Timestamps of the last put/get (CLOCK_MONOTONIC ns), for profiling: writer
        ``start`` (call), ``mid`` (records copied), ``end`` (published, readers woken);
        reader ``start`` (the writer's stamp), ``mid`` (record seen), ``end`` (copied out);
        ``how`` the wait ended: ready, spin, window, woken.  After close, the last as it was."""
        with self._life:
            if self._ptr is None:
                return dict(self._final_trace)
            return self._c_trace()

    def _c_trace(self) -> dict[str, Any]:
        t = self._ffi.new("struct rdmaq_trace *")
        self._c_functions.trace(self._ptr, t)
        how = ("none", "ready", "spin", "window", "woken")
        return {"start_ns": t.start_ns, "mid_ns": t.mid_ns, "end_ns": t.end_ns,
                "how": how[t.how] if t.how < len(how) else str(t.how)}

    def _call(self, fn: Callable[..., int], *args: Any, deadline: float | None) -> int:
        """Call a blocking C function; after -EINTR (a signal, or 100 ms on the
        main thread) come back to the interpreter, which runs pending signal
        handlers (they may raise), then call again with the time left."""
        while True:
            rc = fn(*args, _remaining_ns(deadline))
            if rc != _EINTR:
                return rc

    @property
    def stats(self) -> dict[str, int]:
        """The ring's counters, plus the transport's (verbs: QPs created/reused...);
        after close, the ring's counters as they were."""
        with self._life:
            if self._ptr is None:
                return dict(self._final_stats)
            stats = self._c_stats()
            stats.update(self._backend.extra_stats())
            return stats

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until every reader has attached and the writer connected them."""
        deadline = _deadline(timeout)
        self._enter(deadline, "wait_ready")
        try:
            self._wait_ready_locked(deadline)
        finally:
            self._in_call = False
            self._call_lock.release()

    def _wait_ready_locked(self, deadline: float | None) -> None:
        if self._ready:
            return
        self._backend.before_ready(deadline)
        self._check(self._call(self._c_functions.wait_ready, self._ptr, deadline=deadline), "wait_ready")
        self._ready = True

    def close(self) -> None:
        """Close the endpoint; a put/get blocked in another thread raises ClosedError.
        Then raise what a signal handler raised after the last call had done its work,
        if no call raised it since (README, Errors)."""
        try:
            self._close()
        finally:
            held, self._held = self._held, None
            if held is not None:
                raise held

    def _close(self) -> None:
        with self._life:  # one close() goes on; stats read the live object until it is freed
            if self._closed:
                return
            if self._call_lock._is_owned() and self._in_call:  # the call under way would use the freed object
                raise RuntimeError(f"{self._kind} close: called while this thread's call on "
                                   f"this {self._kind} is under way (from a signal handler?): "
                                   "close it after the call returns")
            self._closed = True
        if self._forks != _forks:
            # A fork()ed copy: the queue belongs to the parent, leave it be.
            return
        self._c_functions.cancel(self._ptr)  # wakes a blocked operation, which then releases _call_lock
        with self._call_lock, self._life:
            self._final_stats = self._c_stats()
            self._final_trace = self._c_trace()
            ptr, self._ptr = self._ptr, None  # stats and last_trace no longer reach it
            try:
                self._c_functions.close(ptr)
            finally:
                self._c_functions.destroy(ptr)
            self._backend.close()

    def __enter__(self: _E) -> _E:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._close()
        except Exception:
            pass


_WARM_MSG: bytes | None = None


def _warm_up() -> None:
    """Unpickle a small object message: the same code a receive runs next."""
    global _WARM_MSG
    if _WARM_MSG is None:
        _WARM_MSG = b"".join(bytes(memoryview(p)) for p in serialize.dumps((0, 0, 0.0, b"", "", [], {})))
    with memoryview(_WARM_MSG) as mv:
        serialize.loads(mv)
    time.monotonic_ns()


class Writer(_Endpoint):
    """The single writer of a broadcast queue to ``n_readers`` readers.

    Every message reaches every reader exactly once, in order.  ``put``
    blocks while the slowest reader's ring is full.  Messages up to
    ``max_message_bytes`` are accepted; those longer than the ring stream
    through it.
    """

    _kind = "writer"
    _backend: WriterBackend

    def __init__(self, n_readers: int, *, slot_bytes: int = DEFAULT_SLOT_BYTES,
                 slots: int = DEFAULT_SLOTS, max_message_bytes: int = DEFAULT_MAX_MESSAGE,
                 transport: str = "auto", spin_us: int | None = None, slice_us: int | None = None,
                 restore_slice: bool | None = None, **transport_options: Any) -> None:
        _int_arg("n_readers", n_readers, 1, _core.RDMAQ_MAX_READERS)
        _int_arg("slot_bytes", slot_bytes, _core.RDMAQ_MIN_SLOT_BYTES, _core.RDMAQ_MAX_SLOT_BYTES)
        if slot_bytes % _core.RDMAQ_SLOT_ALIGN:
            raise ValueError(f"slot_bytes must be a multiple of {_core.RDMAQ_SLOT_ALIGN}, got {slot_bytes}")
        _int_arg("slots", slots, _core.RDMAQ_MIN_SLOTS, _core.RDMAQ_MAX_SLOTS)
        _int_arg("max_message_bytes", max_message_bytes, 1, 1 << 62)
        self.transport = resolve_transport(transport)
        t = load_transport(self.transport)
        config: RingConfig = {
            "n_readers": n_readers,
            "slot_bytes": slot_bytes,
            "slots": slots,
            "max_message": max_message_bytes,
            "spin_ns": 0,
        }
        if slice_us is None:  # RDMAQ_SLICE_US, or its default for this queue here (rdmaq/policy.py)
            slice_us = _policy.slice_us(n_readers)
        wait_args = (spin_us, slice_us, False, restore_slice)
        _wait_config(t.ffi, *wait_args)  # bad arguments fail before anything is created
        self._start(t.create_writer(config, **transport_options), t.ffi, t.lib, _writer_c_functions(t.lib))
        self._try_put = _hold_gil.try_put(t.ffi, t.lib)
        self._try_put2 = _hold_gil.try_put2(t.ffi, t.lib)
        self.n_readers = n_readers
        self.max_message_bytes = max_message_bytes
        self._configure_wait(*wait_args)

    @property
    def handle(self) -> Handle:
        """Small picklable token; pass it to each reader process."""
        return self._backend.handle

    def put(self, data: Buffer | Sequence[Buffer], timeout: float | None = None) -> None:
        """Send one message: a bytes-like object, or a list of them sent as one."""
        # The common messages, one bytes object or send()'s two (header, stream), go to
        # C as they are (try_put2); an iovec is built only for the others or a put that waits.
        head: bytes | None = None
        body = b""
        if type(data) is bytes:
            head = data
        elif type(data) is list and len(data) == 2 and type(data[0]) is bytes and type(data[1]) is bytes:
            head, body = data
        if head is not None:
            parts: Sequence[Buffer] = (head, body)
            total = len(head) + len(body)
        else:
            parts = data if isinstance(data, (list, tuple)) else [data]  # type: ignore[list-item]
            iov, keep, total = self._iovec(parts)
        if total > self.max_message_bytes:  # now, not after waiting for readers to attach
            raise errors.MessageTooLarge(f"writer put: message of {total} bytes exceeds "
                                         f"max_message_bytes={self.max_message_bytes}", errno.EMSGSIZE)
        deadline = None if timeout is None else _deadline(timeout)
        lib = self._lib
        self._enter(deadline, "put")
        try:
            if not self._ready:
                self._wait_ready_locked(deadline)
            # Room for a short one now: put it without letting go of the GIL (_hold_gil).
            rc = _EAGAIN
            if total <= HOLD_GIL_BYTES:
                if head is not None:
                    rc = self._try_put2(self._addr, head, len(head), body, len(body))
                else:
                    rc = self._try_put(self._addr, _hold_gil.address(self._ffi, iov), len(parts))
            if rc == _EAGAIN:
                if head is not None:
                    iov, keep, _ = self._iovec(parts)
                rc = lib.rdmaq_writer_put(self._ptr, iov, len(parts), _remaining_ns(deadline))
            # Interrupted (see _call): continue the same message.  If a signal
            # handler raises instead, or the put fails, the message is not
            # delivered: readers drop any part of it they have.
            while rc == _EINTR:
                rc = lib.rdmaq_writer_resume(self._ptr, iov, len(parts), _remaining_ns(deadline))
            self._check(rc, "put")
        except BaseException as e:
            try:
                self._c_functions.stats(self._ptr, self._counts)
            except BaseException:  # noqa: BLE001, S110 - raised after the read (see _start)
                pass
            if self._counts.messages == self._done:  # not delivered: the put raises
                self._in_call = False
                self._call_lock.release()
                raise
            # Delivered before a signal handler raised: a put that raised would be put
            # again, so this one returns and the next call raises the exception.
            self._held = e
        self._done += 1
        try:
            self._in_call = False
            self._call_lock.release()
        except BaseException as e:  # noqa: BLE001 - after the work: held, as above
            if self._held is None:
                self._held = e

    def _iovec(self, parts: Sequence[Buffer]) -> tuple[Any, list[Any], int]:
        """The iovec array of the parts, the cffi buffers it points into (alive until C is
        done with them) and the total length."""
        ffi = self._ffi
        iov = ffi.new("struct rdmaq_iovec[]", len(parts) or 1)
        keep = []
        total = 0
        for i, p in enumerate(parts):
            try:
                buf = ffi.from_buffer(p)
            except TypeError:
                raise TypeError(f"put() needs bytes-like objects, got {type(p).__name__}") from None
            except (BufferError, ValueError) as e:
                raise ValueError(_unusable_buffer(p, e)) from None
            keep.append(buf)
            n = len(buf)
            iov[i].base = buf
            iov[i].len = n
            total += n
        return iov, keep, total

    def send(self, obj: Any, timeout: float | None = None) -> None:
        """Pickle ``obj`` (protocol 5, large buffers out of band) and put it."""
        self.put(serialize.dumps(obj), timeout)

    def dead_readers(self) -> list[int]:
        """The readers whose process ended without closing (not yet dropped): each
        makes the puts that need its credit raise PeerDeadError."""
        dead = self._lib.rdmaq_writer_reader_dead
        return [i for i in range(self.n_readers) if self._on_reader(dead, i, "dead_readers")]

    def drop_reader(self, index: int) -> None:
        """Forget reader ``index``, whose process ended without closing: puts no longer
        wait for it or raise PeerDeadError for it, and its index stays taken.  A reader
        that closed or was dropped is fine too; ValueError if it is alive."""
        self._on_reader(self._lib.rdmaq_writer_drop_reader, index, "drop_reader")

    def _on_reader(self, fn: Callable[..., int], index: int, what: str) -> int:
        _int_arg("index", index, 0, self.n_readers - 1)
        self._enter(None, what)
        try:
            rc = fn(self._ptr, index)
            self._check(rc, what)
            return rc
        finally:
            self._in_call = False
            self._call_lock.release()


class _Scratch:
    """Where a message of up to SCRATCH_BYTES lands in one C call (rdmaq_reader_recv)."""

    def __init__(self, ffi: Any) -> None:
        self.buf = bytearray(SCRATCH_BYTES)
        self.view = memoryview(self.buf)  # sliced for each message it holds
        self.c_buf = ffi.from_buffer(self.buf)
        self.msg_len = ffi.new("uint64_t *")  # set by C once a message has started
        self.buf_addr = _hold_gil.address(ffi, self.c_buf)  # the same two, for _hold_gil's calls
        self.msg_len_addr = _hold_gil.address(ffi, self.msg_len)


@dataclass
class _PartialMessage:
    """A message being read into ``buf`` (the scratch buffer, or one of its own size)."""

    buf: bytearray
    length: int


class Reader(_Endpoint):
    """Reader ``index`` of the queue described by ``handle``."""

    _kind = "reader"

    def __init__(self, handle: Handle, index: int, *, spin_us: int | None = None,
                 slice_us: int | None = None, anticipate: bool | None = None,
                 restore_slice: bool | None = None,
                 warm: bool | Callable[[], object] | None = None, policy: str | None = None) -> None:
        if not isinstance(handle, Handle):
            raise TypeError(f"not an rdmaq.Handle: {type(handle).__name__}")
        handle.check(index)
        t = load_transport(handle.transport)
        # Every setting parsed before attaching: bad input takes no index.  The policy
        # decided, and why: the same words `rdmaq doctor` prints for this machine.
        self.waiting_policy: _policy.Decision = _policy.for_reader(policy, handle.n_readers)
        free_spin_ns = self.waiting_policy.free_spin_ns
        if slice_us is None:
            slice_us = self.waiting_policy.slice_us
        wc = _wait_config(t.ffi, spin_us, slice_us, anticipate, restore_slice, free_spin_ns)
        if warm is None:
            warm = settings.value("RDMAQ_WARM")
        if warm is True:
            warm = _warm_up
        if warm is not False and not callable(warm):  # before attaching: bad input takes no index
            raise TypeError(f"warm must be a bool or a callable, got {type(warm).__name__}")
        self._start(t.attach_reader(handle, index, wc.spin_ns), t.ffi, t.lib, _reader_c_functions(t.lib))
        self._try_recv = _hold_gil.try_recv(t.ffi, t.lib)
        self.index = index
        self.transport = handle.transport
        self._scratch: _Scratch | None = None  # made at the first get
        # A message longer than the scratch buffer that a timeout or an exception cut
        # short: the C reader keeps its place, the next get reads the rest into it.
        self._partial: _PartialMessage | None = None
        self._into: _PartialMessage | None = None  # where the last C read went (None: scratch)
        # A message taken from the ring but not handed over (its get raised): the next
        # get or recv returns it first.
        self._kept: bytearray | None = None
        self._kept_len = 0
        self._unsure = False  # the last call raised: did C take a message first?
        self._warm = warm or None
        self._configure_wait(spin_us, slice_us, anticipate, restore_slice, free_spin_ns)

    def get(self, timeout: float | None = None) -> bytearray:
        """Next message as a bytearray the caller owns."""
        msg: bytearray = self._recv(None, timeout, "get")
        return msg

    def recv(self, timeout: float | None = None) -> Any:
        """Next message, unpickled (see Writer.send)."""
        return self._recv(_unpickle, timeout, "recv")

    def _recv(self, load: Callable[[bytearray | memoryview], Any] | None, timeout: float | None,
              what: str, consumes: bool = False) -> Any:
        """The next message through ``load`` (None: as a bytearray of its own).  A call
        that raises took nothing, whatever raised (``load`` included): the message it had
        taken is kept for the next call, so one whose objects fail to unpickle raises
        again until a ``get`` takes it as bytes.  (``consumes`` is accepted and ignored:
        the rule has no exception.)"""
        deadline = None if timeout is None else _deadline(timeout)
        self._enter(deadline, what)
        try:
            if not self._ready:
                self._wait_ready_locked(deadline)
            msg = self._get_locked(deadline)
            obj: Any
            if load is not None:
                obj = load(msg)
            else:
                obj = msg if isinstance(msg, bytearray) else bytearray(msg)
        except BaseException:  # the message stays in _kept
            self._unsure = True  # first: no call comes before it
            self._in_call = False
            self._call_lock.release()
            raise
        self._kept = None  # handed over
        try:
            self._in_call = False
            self._call_lock.release()
        except BaseException as e:  # noqa: BLE001 - after the work: held for the next call
            if self._held is None:
                self._held = e
        return obj

    def _get_locked(self, deadline: float | None) -> bytearray | memoryview:
        """The next message: a view of the scratch buffer when it fits there (valid
        until the next call), else a bytearray of its own.  It stays in ``_kept`` until
        the caller clears that (handed over)."""
        if self._unsure:
            self._settle()
        if self._kept is not None:
            return memoryview(self._kept)[:self._kept_len]
        if self._partial is None:
            # A message already there is taken without letting go of the GIL (_hold_gil).
            if self._scratch is None:
                self._scratch = _Scratch(self._ffi)
            s = self._scratch
            self._into = None
            rc = self._try_recv(self._addr, s.buf_addr, SCRATCH_BYTES, s.msg_len_addr)
            if rc == 0:
                self._done += 1
                n = s.msg_len[0]
                self._kept, self._kept_len = s.buf, n
                return s.view[:n]
            if rc != _EAGAIN:
                self._check(rc, "get")
        if self._warm is not None and self._partial is None:
            self._nap_and_warm(self._warm, deadline)
        while True:
            msg = self._receive(deadline)
            if msg is not None:
                return msg
            # The writer gave that message up after sending part of it (a put that
            # failed): it is dropped, and the next message is this get's.

    def _settle(self) -> None:
        """After a call that raised: a message C had taken by then (the count says) and
        the call did not keep is where that read put it: keep it."""
        self._c_functions.stats(self._ptr, self._counts)
        if self._counts.messages != self._done:
            into = self._into
            if into is None:
                assert self._scratch is not None
                self._kept, self._kept_len = self._scratch.buf, self._scratch.msg_len[0]
            else:
                self._kept, self._kept_len = into.buf, into.length
                self._partial = None
            self._done = self._counts.messages
        self._unsure = False

    def _nap_and_warm(self, warm: Callable[[], object], deadline: float | None) -> None:
        """Nap until the next message is due (policy auto on a free CPU: spin), then
        warm the caches that receiving it will use: a nap or spin long enough to pay
        off is long enough for a CPU to lose them, and a cold unpickle costs more
        than the wait it follows."""
        rc = self._call(self._lib.rdmaq_reader_nap, self._ptr, deadline=deadline)
        if rc > 0:
            warm()
        elif rc < 0:
            self._check(rc, "get")

    def _receive(self, deadline: float | None) -> bytearray | memoryview | None:
        """One message, or None when the writer abandoned it (-ECONNABORTED).  A message
        cut short (a timeout, an exception) is resumed by the next call: the C reader
        keeps its place, a short one's start stays in the scratch buffer, a long one's
        in ``_partial``."""
        lib, ffi = self._lib, self._ffi
        s = self._scratch
        assert s is not None  # made by the get's first look, which precedes any partial message
        s.msg_len[0] = 0
        self._into = None
        recv, ptr, c_buf, msg_len = lib.rdmaq_reader_recv, self._ptr, s.c_buf, s.msg_len
        # _call's loop, inline: what runs between the wait's end and the return is the
        # latency a waiting reader adds, and it runs with cold caches
        while True:
            rc = recv(ptr, c_buf, SCRATCH_BYTES, msg_len, -1 if deadline is None else _remaining_ns(deadline))
            if rc != _EINTR:
                break
        n = msg_len[0]
        if rc == 0:
            self._done += 1
            self._kept, self._kept_len = s.buf, n
            return s.view[:n]
        if rc == -errno.ECONNABORTED:
            return None
        if rc != -errno.ENOBUFS:
            self._check(rc, "get")
        # Larger than scratch: a buffer of its own, or the one of the message's start.  (A
        # partial message the writer abandoned meanwhile leaves one of its length: the
        # next message, read from its start, fills it all.)
        partial = self._partial
        if partial is None or partial.length != n:
            partial = self._partial = _PartialMessage(_hold_gil.bytearray_of(n), n)
        self._into = partial
        rc = self._call(lib.rdmaq_reader_read, self._ptr, ffi.from_buffer(partial.buf), n,
                        deadline=deadline)
        if rc == -errno.ECONNABORTED:
            self._partial = None
            return None
        self._check(rc, "get")  # an error leaves _partial: the C reader kept its place
        self._done += 1
        self._kept, self._kept_len = partial.buf, n
        self._partial = None
        return partial.buf


def _unpickle(msg: bytearray | memoryview) -> Any:
    # A view of the scratch buffer is ours only until the next get: out-of-band buffers,
    # which alias the message, get a copy of their own.
    return serialize.loads(msg, isinstance(msg, memoryview))
