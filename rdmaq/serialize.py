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
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ProtocolError

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

MAGIC = b"RQP5"  # the framing's name and version (docs/format.md): a new framing is a new last byte
OOB_MIN_BYTES = 64 * 1024  # below this, an extra iovec costs more than the copy
ALIGN = 64
_HDR = struct.Struct("<4sI")
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
    at least 64 KiB (its frame size target) as the object itself.
    """

    __slots__ = ("parts", "nbytes")

    def __init__(self) -> None:
        self.parts: list[Buffer] = []
        self.nbytes = 0

    def write(self, data: Buffer) -> int:
        n = memoryview(data).nbytes
        self.parts.append(data)
        self.nbytes += n
        return n


@dataclass(frozen=True)
class Pickled:
    """One object, pickled: the stream (in pieces, large bytes by reference) and its
    out-of-band buffers (views of the sender's memory)."""

    stream: list[Buffer]
    stream_bytes: int
    buffers: list[memoryview]


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
        oob: list[memoryview] = []
        threshold = self.oob_min_bytes

        def keep_out_of_band(pb: pickle.PickleBuffer) -> bool:
            raw = pb.raw()
            if raw.nbytes < threshold:
                return True
            oob.append(raw)
            return False

        out = _Parts()
        p = pickle.Pickler(out, protocol=5, buffer_callback=keep_out_of_band)
        torch = sys.modules.get("torch")  # a program without torch sends no tensors
        if torch is not None and self.reduce_tensor is not None:
            p.dispatch_table = copyreg.dispatch_table.copy()
            p.dispatch_table[torch.Tensor] = self.reduce_tensor
        p.dump(obj)
        return Pickled(out.parts, out.nbytes, oob)

    def dumps(self, obj: Any) -> list[Buffer]:
        """A list of buffers whose concatenation is the message."""
        return frame(self.pickle(obj))


DEFAULT = Serializer()


def dumps(obj: Any) -> list[Buffer]:
    """The default serializer's message: a list of buffers to concatenate."""
    return DEFAULT.dumps(obj)


def frame(p: Pickled) -> list[Buffer]:
    """The message of a pickled object: header, stream, then each buffer 64-byte aligned."""
    lens = [p.stream_bytes] + [b.nbytes for b in p.buffers]
    header = _HDR.pack(MAGIC, len(p.buffers)) + struct.pack(f"<{len(lens)}Q", *lens)
    parts: list[Buffer] = [header, *p.stream]
    pos = len(header) + p.stream_bytes
    for b in p.buffers:
        parts.append(_PAD[: _pad(pos)])
        pos += _pad(pos)
        parts.append(b)
        pos += b.nbytes
    return parts


def loads(msg: bytearray | memoryview) -> Any:
    """Inverse of dumps; out-of-band buffers alias ``msg`` (no copy), so ``msg``
    must be the caller's own.  A header that does not fit the message (corrupt)
    raises ProtocolError."""
    mv = memoryview(msg)
    nbuf = out_of_band_count(mv)
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
