"""serialize.frame: the message layout [header][pickle][pad][buf0][pad][buf1]...
with buffers whose lengths are not multiples of the alignment."""
import ctypes
import pickle

import pytest

from rdmaq import serialize


def _message(obj):
    parts = serialize.frame(serialize.Serializer(oob_min_bytes=1).pickle(obj))
    return bytearray(b"".join(bytes(memoryview(p)) for p in parts))


@pytest.mark.parametrize("lengths", [(100, 37), (1, 63, 65, 130)])
def test_out_of_band_buffers_of_odd_lengths_each_start_aligned_and_round_trip(lengths):
    """Each buffer's padding counts the buffers before it: every one starts 64-byte
    aligned in the message and loads gives back each one's own bytes."""
    datas = [bytes([i + 1]) * n for i, n in enumerate(lengths)]
    msg = _message([pickle.PickleBuffer(bytearray(d)) for d in datas])  # writable: so are the views
    assert serialize.out_of_band_count(msg) == len(lengths)
    got = serialize.loads(msg)
    assert [bytes(b) for b in got] == datas
    base = memoryview(msg)
    for b in got:
        offset = _offset(base, memoryview(b))
        assert offset % serialize.ALIGN == 0, (lengths, offset)
    assert len(msg) == offset + lengths[-1]  # the last buffer ends the message


def _offset(whole, part):
    """Where ``part`` (a view into ``whole``'s memory) starts in it."""
    return ctypes.addressof(ctypes.c_char.from_buffer(part)) - ctypes.addressof(ctypes.c_char.from_buffer(whole))
