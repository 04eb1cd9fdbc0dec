"""Inputs that used to escape as a raw Python exception (BufferError,
struct.error) get the documented one, naming what was wrong: a put of a
non-contiguous buffer is a ValueError (rdmaq copies a message once, into
the ring, and makes no hidden copy first); an object message whose header
does not fit it is a ProtocolError, raised again until a get takes it as bytes; one too short for a
header, or a handle that is no Handle, a ValueError or TypeError saying so."""
import struct
import types

import numpy as np
import pytest

import rdmaq
from children import TIMEOUT
from rdmaq import serialize
from rdmaq.handle import HANDLE_VERSION, ShmInfo

STRIDED = [
    pytest.param(lambda: memoryview(b"abcdefgh")[::2], id="memoryview"),
    pytest.param(lambda: np.arange(16, dtype=np.uint8).reshape(4, 4)[:, :2], id="numpy-slice"),
    pytest.param(lambda: np.arange(16, dtype=np.uint8).reshape(4, 4).T, id="numpy-transposed"),
]


@pytest.mark.parametrize("strided", STRIDED)
def test_put_of_a_non_contiguous_buffer_is_refused_by_name(transport, strided):
    with rdmaq.Writer(1, transport=transport) as w, rdmaq.Reader(w.handle, 0) as r:
        buf = strided()
        with pytest.raises(ValueError, match=rf"put\(\) needs C-contiguous buffers, got a "
                                             rf"non-contiguous {type(buf).__name__}"):
            w.put(buf)
        with pytest.raises(ValueError, match="non-contiguous"):
            w.put([b"head", buf])
        # nothing was sent; a copy goes through
        w.put(bytes(buf), timeout=TIMEOUT)
        assert r.get(timeout=TIMEOUT) == bytes(buf)


def test_put_of_a_released_buffer_says_so(transport):
    with rdmaq.Writer(1, transport=transport) as w:
        mv = memoryview(b"gone")
        mv.release()
        with pytest.raises(ValueError, match="put\\(\\) cannot use a memoryview: .*released"):
            w.put(mv)


def _header(nbuf, *lens):
    return serialize._HDR.pack(serialize.MAGIC, nbuf) + struct.pack(f"<{len(lens)}Q", *lens)


CORRUPT_HEADERS = [
    pytest.param(_header(1000, 5), "announces 1000 out-of-band buffers", id="too-many-buffers"),
    pytest.param(_header(0xFFFFFFFF), "announces 4294967295 out-of-band buffers", id="u32-max"),
    pytest.param(_header(1, 3, 1 << 40) + b"abc", "truncated object message", id="buffer-too-long"),
    pytest.param(_header(0, 1 << 63), "truncated object message", id="stream-too-long"),
]


@pytest.mark.parametrize("msg, match", CORRUPT_HEADERS)
def test_corrupt_object_header_is_a_protocol_error(msg, match):
    with pytest.raises(rdmaq.ProtocolError, match=match):
        serialize.loads(bytearray(msg))


def test_recv_of_a_corrupt_object_message_raises_until_get_takes_it(transport):
    """A call that raises took nothing: the message stays first, each recv raises its
    error again, and get (the way to skip it) takes it as bytes."""
    with rdmaq.Writer(1, transport=transport) as w, rdmaq.Reader(w.handle, 0) as r:
        w.put(_header(1000, 5), timeout=TIMEOUT)
        w.send({"next": 1}, timeout=TIMEOUT)
        for _ in range(2):
            with pytest.raises(rdmaq.ProtocolError, match="corrupt object message"):
                r.recv(timeout=TIMEOUT)
        assert r.get(timeout=TIMEOUT) == _header(1000, 5)
        assert r.recv(timeout=TIMEOUT) == {"next": 1}


class _FailsToLoad:
    """An object whose unpickling raises its own error, every time."""

    def __reduce__(self):
        return (_refuse, ())


def _refuse():
    raise LookupError("this object does not load here")


@pytest.mark.parametrize("size", [64, 1 << 20], ids=["scratch", "own-buffer"])
def test_a_message_whose_objects_fail_to_unpickle_stays_first(transport, size):
    with rdmaq.Writer(1, transport=transport) as w, rdmaq.Reader(w.handle, 0) as r:
        w.send((_FailsToLoad(), b"x" * size), timeout=TIMEOUT)
        w.send("after", timeout=TIMEOUT)
        for _ in range(3):
            with pytest.raises(LookupError, match="does not load here"):
                r.recv(timeout=TIMEOUT)
        raw = r.get(timeout=TIMEOUT)
        assert isinstance(raw, bytearray) and len(raw) > size
        assert r.recv(timeout=TIMEOUT) == "after"


@pytest.mark.parametrize("msg", [b"", b"rdmq"], ids=["empty", "shorter-than-a-header"])
def test_an_object_message_too_short_for_its_header_says_so(msg):
    with pytest.raises(ValueError, match=r"not an rdmaq object message \(too short\): use get\(\) for raw bytes"):
        serialize.out_of_band_count(msg)
    with pytest.raises(ValueError, match="too short"):
        serialize.loads(bytearray(msg))


def test_recv_of_a_raw_message_too_short_for_a_header_says_so(transport):
    with rdmaq.Writer(1, transport=transport) as w, rdmaq.Reader(w.handle, 0) as r:
        w.put(b"hi", timeout=TIMEOUT)
        with pytest.raises(ValueError, match=r"not an rdmaq object message \(too short\)"):
            r.recv(timeout=TIMEOUT)


def test_a_handle_look_alike_is_not_a_handle():
    """Handle.check on an object with a Handle's fields (a namespace, another class) refuses it
    by its type instead of checking its fields."""
    fake = types.SimpleNamespace(transport="shm", n_readers=1, info=ShmInfo("rdmaq-x", ""),
                                 version=HANDLE_VERSION)
    with pytest.raises(TypeError, match="^not an rdmaq.Handle: SimpleNamespace$"):
        rdmaq.Handle.check(fake, 0)
