"""Back-pressure, wrap-around, large messages, timeouts."""
import threading
import time

import pytest

import rdmaq
from conftest import start
from readers import sleepy_reader


def test_writer_blocks_on_full_ring_then_times_out(procs, results):
    with rdmaq.Writer(2, transport="shm", slot_bytes=256, slots=4) as w:
        r0 = rdmaq.Reader(w.handle, 0)
        procs.append(start(sleepy_reader, w.handle, 1, results))
        w.wait_ready(timeout=60)
        assert results.get(timeout=60) == (1, "attached")
        for i in range(4):
            w.put(bytes([i]) * 100, timeout=5)
        with pytest.raises(TimeoutError):
            w.put(b"no room", timeout=0.2)
        # the fast reader got everything that was sent, nothing more
        assert [r0.get(timeout=5)[0] for _ in range(4)] == [0, 1, 2, 3]
        with pytest.raises(TimeoutError):
            r0.get(timeout=0.1)
        r0.close()


def test_wraparound_many_laps_preserves_order():
    with rdmaq.Writer(1, transport="shm", slot_bytes=128, slots=2) as w:
        r = rdmaq.Reader(w.handle, 0)
        got = []
        t = threading.Thread(target=lambda: got.extend(r.get(timeout=30) for _ in range(5000)))
        t.start()
        for i in range(5000):
            w.put(i.to_bytes(4, "little") * (i % 20 + 1), timeout=30)
        t.join(60)
        assert [int.from_bytes(m[:4], "little") for m in got] == list(range(5000))
        assert all(len(m) == 4 * (i % 20 + 1) for i, m in enumerate(got))
        assert w.stats["sleeps"] + w.stats["spins"] > 0  # it really waited for credit
        r.close()


@pytest.mark.parametrize("size", [1 << 20, 16 << 20 | 12345])
def test_message_larger_than_ring_streams_through(size):
    payload = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    with rdmaq.Writer(1, transport="shm", slot_bytes=4096, slots=8) as w:
        r = rdmaq.Reader(w.handle, 0)
        out = []
        t = threading.Thread(target=lambda: out.append(r.get(timeout=60)))
        t.start()
        w.put(payload, timeout=60)
        w.put(b"next", timeout=60)
        t.join(60)
        assert out[0] == payload
        assert r.get(timeout=5) == b"next"
        r.close()


def test_message_above_max_is_refused_clearly():
    with rdmaq.Writer(1, transport="shm", max_message_bytes=1000) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.put(b"x" * 1000)
        with pytest.raises(rdmaq.MessageTooLarge, match="1001 bytes exceeds max_message_bytes=1000"):
            w.put(b"x" * 1001)
        assert len(r.get(timeout=5)) == 1000
        r.close()


def test_streamed_message_cut_by_timeout_is_discarded_not_half_delivered():
    with rdmaq.Writer(1, transport="shm", slot_bytes=256, slots=4) as w:
        r = rdmaq.Reader(w.handle, 0)
        with pytest.raises(TimeoutError):
            w.put(b"A" * 10_000, timeout=0.2)  # > ring, nobody reading
        got = []
        t = threading.Thread(target=lambda: got.extend(r.get(timeout=30) for _ in range(2)))
        t.start()
        w.put(b"B" * 5000, timeout=30)
        w.put(b"C", timeout=30)
        t.join(60)
        assert got == [b"B" * 5000, b"C"]
        r.close()


def test_get_timeout_then_resume():
    with rdmaq.Writer(1, transport="shm") as w:
        r = rdmaq.Reader(w.handle, 0)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            r.get(timeout=0.05)
        assert time.monotonic() - t0 < 30  # returned at all: not a hang
        w.put(b"late")
        assert r.get(timeout=5) == b"late"
        r.close()


def test_reader_resumes_a_message_interrupted_by_timeout():
    with rdmaq.Writer(1, transport="shm", slot_bytes=256, slots=4) as w:
        r = rdmaq.Reader(w.handle, 0)
        payload = bytes(range(250)) * 40
        t = threading.Thread(target=lambda: w.put(payload, timeout=30))
        t.start()
        # a get with a short timeout may stop mid-message; the next resumes it
        pieces = None
        for _ in range(200):
            try:
                pieces = r.get(timeout=0.001)
                break
            except TimeoutError:
                continue
        if pieces is None:
            pieces = r.get(timeout=30)
        t.join(30)
        assert pieces == payload
        r.close()
