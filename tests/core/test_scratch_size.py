"""A reader receives a message of up to 256 KiB in one C call, into its scratch
buffer; a longer one takes a second call that reads it into a buffer of its own."""
import pytest

import rdmaq
from children import TIMEOUT

SCRATCH = 256 * 1024


class _CountingLib:
    """The reader's cffi library, counting the calls that read a message's bytes."""

    def __init__(self, lib):
        self._lib = lib
        self.reads = 0

    def __getattr__(self, name):
        fn = getattr(self._lib, name)
        if name != "rdmaq_reader_read":
            return fn

        def counted(*args):
            self.reads += 1
            return fn(*args)
        return counted


@pytest.mark.parametrize(("size", "reads"), [(SCRATCH, 0), (SCRATCH + 1, 1)])
def test_messages_up_to_256_kib_take_one_call(transport, size, reads):
    with rdmaq.Writer(1, transport=transport) as w, rdmaq.Reader(w.handle, 0) as r:
        lib = r._lib = _CountingLib(r._lib)
        payload = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
        w.put(payload, timeout=TIMEOUT)
        assert r.get(timeout=TIMEOUT) == payload
        assert lib.reads == reads
