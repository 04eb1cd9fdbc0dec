"""Objects to messages: pickle protocol 5 with out-of-band buffers.

A message is ``[header][pickle][pad][buf0][pad][buf1]...``: large buffers
(numpy arrays, CPU tensors) skip the pickle stream and travel as their own
iovec entries, so the writer copies them once, straight into the ring.  Each
buffer starts 64-byte aligned in the message so a reader's zero-copy views
are aligned too.  Readers get buffers that alias their private message copy:
writable, unless the sender's buffer was read-only.

Large ``bytes``/``bytearray`` values (>= 64 KiB) are not copied into the
pickle stream either: the pickler hands them to its file's ``write`` as they
are, and that file keeps a reference instead of a copy, so they too reach the
ring as their own iovec entries with a single copy.  They stay inside the
pickle data (a reader gets ``bytes``/``bytearray``, which own their memory).

What goes out of band is a :class:`Serializer`'s choice (a size threshold,
and how CPU tensors reduce); ``dumps`` and ``loads`` are the defaults that
``Writer.send``/``Reader.recv`` use.  Every serializer writes the same
message format, which ``loads`` reads.
"""
from __future__ import annotations

import copyreg
import pickle
import struct
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from .errors import ProtocolError

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

MAGIC = b"RQP5"  # the framing's name and version (docs/format.md): a new framing is a new last byte
OOB_MIN_BYTES = 64 * 1024  # below this, an extra iovec costs more than the copy
ALIGN = 64
_HDR = struct.Struct("<4sI")
# The header of a message with no out-of-band buffer, its stream's length included: the
# common message, framed and read with one struct call each.
_HDR_IN_BAND = struct.Struct("<4sIQ")
_PAD = bytes(ALIGN)

# A CPU tensor's reducer: returns what ``__reduce__`` would (a callable and its arguments).
TensorReducer = Callable[[Any], "tuple[Any, ...] | str"]


def _pad(n: int) -> int:
    return -n % ALIGN


def _rebuild_tensor(buf: Buffer, shape: tuple[int, ...], dtype: str) -> Any:
    import torch

    if len(memoryview(buf)) == 0:
        return torch.empty(shape, dtype=getattr(torch, dtype))
    return torch.frombuffer(buf, dtype=torch.uint8).view(getattr(torch, dtype)).reshape(shape)


def reduce_tensor(t: Any) -> tuple[Any, ...] | str:
    """rdmaq's reducer: a contiguous CPU tensor as one raw out-of-band buffer, which
    the reader's tensor aliases; anything else takes torch's own (slower) path."""
    import torch

    if t.device.type != "cpu" or t.requires_grad or not t.is_contiguous() or t.layout != torch.strided:
        return t.__reduce_ex__(pickle.HIGHEST_PROTOCOL)  # type: ignore[no-any-return]
    flat = t.reshape(-1).view(torch.uint8)
    dtype = str(t.dtype).removeprefix("torch.")
    return _rebuild_tensor, (pickle.PickleBuffer(flat.numpy()), tuple(t.shape), dtype)


class _Parts:
    """A pickle output file that keeps what it is given instead of copying it.

    The C pickler writes its frames here, and each bytes/bytearray payload of
    at least 64 KiB (its frame size target) as the object itself.  ``write`` is
    the list's own append (the pickler looks it up once, when it is made): a C
    method, no Python frame per write.
    """

    __slots__ = ("parts", "write")

    def __init__(self) -> None:
        self.parts: list[Buffer] = []
        self.write = self.parts.append


class Pickled(NamedTuple):
    """One object, pickled: the stream (in pieces, large bytes by reference) and its
    out-of-band buffers (views of the sender's memory).  (A tuple: made for every message.)"""

    stream: list[Buffer]
    stream_bytes: int
    buffers: list[memoryview]


class _ThreadPickler:
    """One thread's pickler for one serializer's choices, kept between messages: a new
    Pickler and a copy of the dispatch table cost more than pickling a small object."""

    __slots__ = ("pickler", "out", "oob", "threshold", "busy")

    def __init__(self, threshold: int, reducer: TensorReducer | None, torch: Any) -> None:
        self.out = _Parts()
        self.oob: list[memoryview] = []
        self.threshold = threshold
        self.busy = False  # a signal handler that sends while this thread pickles gets its own
        self.pickler = pickle.Pickler(self.out, protocol=5, buffer_callback=self._keep_out_of_band)
        if torch is not None and reducer is not None:
            self.pickler.dispatch_table = copyreg.dispatch_table.copy()
            self.pickler.dispatch_table[torch.Tensor] = reducer

    def _keep_out_of_band(self, pb: pickle.PickleBuffer) -> bool:
        raw = pb.raw()
        if raw.nbytes < self.threshold:
            return True  # in band: pickled into the stream
        self.oob.append(raw)
        return False

    def dump(self, obj: Any) -> tuple[list[Buffer], int, list[memoryview]]:
        """Pickled's fields, as a plain tuple (a NamedTuple costs ~0.2 µs to make)."""
        written = self.out.parts
        oob: list[memoryview] = []  # not list[memoryview](): calling a generic alias costs ~0.3 µs
        self.oob = oob
        self.busy = True
        try:
            self.pickler.dump(obj)
            parts = written.copy()
        finally:
            # Nothing of the caller's kept past the call: the memo names its objects, and
            # the parts and views hold its buffers (an exported bytearray cannot be resized).
            self.pickler.clear_memo()
            written.clear()
            self.oob = []
            self.busy = False
        # One part (a small object's one frame) is bytes; a large payload may be any buffer.
        nbytes = len(parts[0]) if len(parts) == 1 else sum(memoryview(p).nbytes for p in parts)  # type: ignore[arg-type]
        return parts, nbytes, oob


# Each thread's picklers, by (threshold, reducer, the torch module when it was made).
_picklers = threading.local()


def _thread_pickler(threshold: int, reducer: TensorReducer | None) -> _ThreadPickler:
    torch = sys.modules.get("torch")  # a program without torch sends no tensors
    key = (threshold, reducer, torch)
    try:
        mine: dict[Any, _ThreadPickler] = _picklers.by_choice
    except AttributeError:
        mine = _picklers.by_choice = {}
    p = mine.get(key)
    if p is None or p.busy:
        p = _ThreadPickler(threshold, reducer, torch)
        if key not in mine:
            mine[key] = p
    return p


@dataclass(frozen=True)
class Serializer:
    """Which buffers leave the pickle stream, and how CPU tensors get there.

    ``oob_min_bytes``: buffers at least this large travel out of band.
    ``reduce_tensor``: the reducer of ``torch.Tensor`` (None: torch's own, which
    pickles the data in band).
    """

    oob_min_bytes: int = OOB_MIN_BYTES
    reduce_tensor: TensorReducer | None = reduce_tensor

    def pickle(self, obj: Any) -> Pickled:
        return Pickled(*_thread_pickler(self.oob_min_bytes, self.reduce_tensor).dump(obj))

    def dumps(self, obj: Any) -> list[Buffer]:
        """A list of buffers whose concatenation is the message."""
        return _frame(*_thread_pickler(self.oob_min_bytes, self.reduce_tensor).dump(obj))


DEFAULT = Serializer()


def dumps(obj: Any) -> list[Buffer]:
    """The default serializer's message: a list of buffers to concatenate."""
    return DEFAULT.dumps(obj)


def frame(p: Pickled) -> list[Buffer]:
    """The message of a pickled object: header, stream, then each buffer 64-byte aligned."""
    return _frame(*p)


def _frame(stream: list[Buffer], stream_bytes: int, buffers: list[memoryview]) -> list[Buffer]:
    if not buffers:  # the common message: a list of two bytes, which put() passes as they are
        return [_HDR_IN_BAND.pack(MAGIC, 0, stream_bytes), *stream]
    lens = [stream_bytes] + [b.nbytes for b in buffers]
    header = _HDR.pack(MAGIC, len(buffers)) + struct.pack(f"<{len(lens)}Q", *lens)
    parts: list[Buffer] = [header, *stream]
    pos = len(header) + stream_bytes
    for b in buffers:
        parts.append(_PAD[: _pad(pos)])
        pos += _pad(pos)
        parts.append(b)
        pos += b.nbytes
    return parts


def loads(msg: bytearray | memoryview, borrowed: bool = False) -> Any:
    """Inverse of dumps.  Out-of-band buffers alias ``msg`` (no copy) unless ``borrowed``
    (``msg`` is not the caller's to keep: they get a copy of the message of their own).  A
    header that does not fit the message (corrupt) raises ProtocolError."""
    mv = memoryview(msg)
    size = mv.nbytes
    if size >= _HDR_IN_BAND.size:
        magic, nbuf, stream = _HDR_IN_BAND.unpack_from(mv)
        if nbuf == 0 and magic == MAGIC:  # the common message: the stream alone
            end = _HDR_IN_BAND.size + stream
            if end > size:
                raise ProtocolError(f"truncated object message: needs {end} bytes, got {size}")
            return pickle.loads(mv[_HDR_IN_BAND.size:end], buffers=())  # no buffers, said as vLLM's queue says it
    nbuf = out_of_band_count(mv)
    if nbuf and borrowed:
        mv = memoryview(bytearray(mv))
    pos = _HDR.size + 8 * (nbuf + 1)
    if len(mv) < pos:
        raise ProtocolError(f"corrupt object message: its header announces {nbuf} out-of-band "
                            f"buffers, whose lengths need {pos} bytes; the message has {len(mv)}")
    lens = struct.unpack_from(f"<{nbuf + 1}Q", mv, _HDR.size)
    data = mv[pos : pos + lens[0]]
    pos += lens[0]
    bufs = []
    for n in lens[1:]:
        pos += _pad(pos)
        bufs.append(mv[pos : pos + n])
        pos += n
    if pos > len(mv):
        raise ProtocolError(f"truncated object message: needs {pos} bytes, got {len(mv)}")
    return pickle.loads(data, buffers=bufs)


def out_of_band_count(msg: Buffer) -> int:
    """How many out-of-band buffers an object message carries (they alias it on loads)."""
    if memoryview(msg).nbytes < _HDR.size:
        raise ValueError("not an rdmaq object message (too short): use get() for raw bytes")
    magic, nbuf = _HDR.unpack_from(msg, 0)
    if magic != MAGIC:
        if magic[:3] == MAGIC[:3]:
            raise ProtocolError(f"an object message in another release's framing "
                                f"({magic.decode('ascii', 'replace')!r}, this rdmaq reads "
                                f"{MAGIC.decode()!r}): writer and reader run different rdmaq releases")
        raise ValueError("not an rdmaq object message (bad magic): use get() for raw bytes")
    return int(nbuf)
