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
"""
import copyreg
import pickle
import struct
import sys

MAGIC = b"RQP5"
OOB_MIN_BYTES = 64 * 1024  # below this, an extra iovec costs more than the copy
ALIGN = 64
_HDR = struct.Struct("<4sI")
_PAD = bytes(ALIGN)


def _pad(n):
    return -n % ALIGN


def _rebuild_tensor(buf, shape, dtype):
    import torch

    if len(buf) == 0:
        return torch.empty(shape, dtype=getattr(torch, dtype))
    return torch.frombuffer(buf, dtype=torch.uint8).view(getattr(torch, dtype)).reshape(shape)


def _reduce_tensor(t):
    import torch

    # Contiguous CPU tensors travel as one raw buffer; anything else takes
    # torch's own (slower) path.
    if t.device.type != "cpu" or t.requires_grad or not t.is_contiguous() or t.layout != torch.strided:
        return t.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
    flat = t.reshape(-1).view(torch.uint8)
    dtype = str(t.dtype).removeprefix("torch.")
    return _rebuild_tensor, (pickle.PickleBuffer(flat.numpy()), tuple(t.shape), dtype)


class _Parts:
    """A pickle output file that keeps what it is given instead of copying it.

    The C pickler writes its frames here, and each bytes/bytearray payload of
    at least 64 KiB (its frame size target) as the object itself.
    """

    __slots__ = ("parts", "nbytes")

    def __init__(self):
        self.parts = []
        self.nbytes = 0

    def write(self, data):
        self.parts.append(data)
        self.nbytes += len(data)
        return len(data)


def dumps(obj):
    """Return a list of buffers whose concatenation is the message."""
    oob = []

    def keep_out_of_band(pb):
        raw = pb.raw()
        if raw.nbytes < OOB_MIN_BYTES:
            return True
        oob.append(raw)
        return False

    out = _Parts()
    p = pickle.Pickler(out, protocol=5, buffer_callback=keep_out_of_band)
    if "torch" in sys.modules:
        p.dispatch_table = copyreg.dispatch_table.copy()
        p.dispatch_table[sys.modules["torch"].Tensor] = _reduce_tensor
    p.dump(obj)
    lens = [out.nbytes] + [b.nbytes for b in oob]
    header = _HDR.pack(MAGIC, len(oob)) + struct.pack(f"<{len(lens)}Q", *lens)
    parts = [header, *out.parts]
    pos = len(header) + out.nbytes
    for b in oob:
        parts.append(_PAD[: _pad(pos)])
        pos += _pad(pos)
        parts.append(b)
        pos += b.nbytes
    return parts


def loads(msg):
    """Inverse of dumps; out-of-band buffers alias ``msg`` (no copy)."""
    mv = memoryview(msg)
    magic, nbuf = _HDR.unpack_from(mv, 0)
    if magic != MAGIC:
        raise ValueError("not an rdmaq object message (bad magic): use get() for raw bytes")
    lens = struct.unpack_from(f"<{nbuf + 1}Q", mv, _HDR.size)
    pos = _HDR.size + 8 * (nbuf + 1)
    data = mv[pos : pos + lens[0]]
    pos += lens[0]
    bufs = []
    for n in lens[1:]:
        pos += _pad(pos)
        bufs.append(mv[pos : pos + n])
        pos += n
    if pos > len(mv):
        raise ValueError(f"truncated object message: needs {pos} bytes, got {len(mv)}")
    return pickle.loads(data, buffers=bufs)


def out_of_band_count(msg):
    """How many out-of-band buffers an object message carries (they alias it on loads)."""
    magic, nbuf = _HDR.unpack_from(msg, 0)
    if magic != MAGIC:
        raise ValueError("not an rdmaq object message (bad magic): use get() for raw bytes")
    return nbuf
