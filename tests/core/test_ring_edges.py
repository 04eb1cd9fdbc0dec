"""Edges of the ring engine seen through a reader's counters."""
import pytest

import rdmaq


def test_a_reader_publishes_the_same_credit_once(transport):
    """A reader publishes its credit before it blocks; a second wait with nothing
    read since has nothing new to tell the writer, and sends no credit again."""
    with rdmaq.Writer(1, transport=transport, slot_bytes=256, slots=8) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=60)
        w.put(b"a", timeout=30)
        assert r.get(timeout=30) == b"a"
        with pytest.raises(TimeoutError):
            r.get(timeout=0.05)  # blocks: publishes the credit of "a"
        assert r.stats["credits"] == 1
        for _ in range(3):
            with pytest.raises(TimeoutError):
                r.get(timeout=0.05)
        assert r.stats["credits"] == 1
        r.close()
