"""Bad input that only the C core can see reaches Python as the documented
exception (rdmaq/errors.py maps the negative errno), with the C message."""
import pytest

import rdmaq


def test_index_beyond_the_queue_s_readers(transport):
    """A handle claiming more readers than the queue has: the Python range
    check passes, the C attach refuses it."""
    with rdmaq.Writer(2, transport=transport) as w:
        h = w.handle
        forged = rdmaq.Handle(h.transport, 5, h.info, h.version)
        with pytest.raises(ValueError, match="reader index 3 out of range: queue has 2 readers"):
            rdmaq.Reader(forged, 3)
        readers = [rdmaq.Reader(w.handle, i) for i in range(2)]  # the queue is unharmed
        w.put(b"ok", timeout=30)
        assert [r.get(timeout=30) for r in readers] == [b"ok", b"ok"]
        for r in readers:
            r.close()


def test_ring_above_16_gib_is_refused_by_the_core(transport):
    with pytest.raises(ValueError, match="larger than 16 GiB"):
        rdmaq.Writer(1, transport=transport, slot_bytes=1 << 20, slots=1 << 15)
