"""Back-pressure, wrap-around, large messages, timeouts."""
import threading
import time

import pytest

import rdmaq
from children import sleepy_reader, start
from rdmaq.queue import SCRATCH_BYTES

# Under the VM's emulation a verbs message costs ~1 ms: fewer laps there.
LAPS = {"shm": 5000, "verbs": 1000}
LARGE = {"shm": 16 << 20 | 12345, "verbs": 4 << 20 | 12345}


def test_writer_blocks_on_full_ring_then_times_out(transport, procs, results):
    with rdmaq.Writer(2, transport=transport, slot_bytes=256, slots=4) as w:
        r0 = rdmaq.Reader(w.handle, 0)
        procs.append(start(sleepy_reader, w.handle, 1, results))
        w.wait_ready(timeout=120)
        assert results.get(timeout=120) == (1, "attached")
        for i in range(4):
            w.put(bytes([i]) * 100, timeout=30)
        with pytest.raises(TimeoutError):
            w.put(b"no room", timeout=0.3)
        # the fast reader got everything that was sent, nothing more
        assert [r0.get(timeout=30)[0] for _ in range(4)] == [0, 1, 2, 3]
        with pytest.raises(TimeoutError):
            r0.get(timeout=0.2)
        r0.close()


def test_wraparound_many_laps_preserves_order(transport):
    laps = LAPS[transport]
    with rdmaq.Writer(1, transport=transport, slot_bytes=128, slots=2) as w:
        r = rdmaq.Reader(w.handle, 0)
        got = []
        t = threading.Thread(target=lambda: got.extend(r.get(timeout=60) for _ in range(laps)))
        t.start()
        for i in range(laps):
            w.put(i.to_bytes(4, "little") * (i % 20 + 1), timeout=60)
        t.join(120)
        assert [int.from_bytes(m[:4], "little") for m in got] == list(range(laps))
        assert all(len(m) == 4 * (i % 20 + 1) for i, m in enumerate(got))
        assert w.stats["sleeps"] + w.stats["spins"] > 0  # it really waited for credit
        r.close()


def test_one_thread_alternating_put_and_get_of_whole_ring_messages(transport):
    """One thread puts a message that takes every slot, then gets it, again and again:
    the credit of the message just read is back before the next put needs the ring."""
    slot_bytes, slots = 1024, 8
    size = slots * (slot_bytes - 40)  # a slot carries slot_bytes - 40 payload bytes
    with rdmaq.Writer(1, transport=transport, slot_bytes=slot_bytes, slots=slots) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=60)
        for i in range(20):
            w.put(bytes([i]) * size, timeout=30)
            assert r.get(timeout=30) == bytes([i]) * size
        r.close()


def test_slow_reader_paces_the_writer(transport):
    """A reader that takes its time holds the writer back; nothing is lost."""
    with rdmaq.Writer(1, transport=transport, slot_bytes=256, slots=4) as w:
        r = rdmaq.Reader(w.handle, 0)
        got = []

        def slow():
            for _ in range(40):
                time.sleep(0.005)
                got.append(bytes(r.get(timeout=60)))

        t = threading.Thread(target=slow)
        t.start()
        for i in range(40):
            w.put(i.to_bytes(2, "little") * 50, timeout=60)
        t.join(120)
        assert got == [i.to_bytes(2, "little") * 50 for i in range(40)]
        # the writer had to wait for credit (written back by the reader)
        assert w.stats["credits"] > 0
        assert w.stats["sleeps"] + w.stats["spins"] > 0
        r.close()


@pytest.mark.parametrize("large", [False, True], ids=["1MiB", "several-MiB"])
def test_message_larger_than_ring_streams_through(transport, large):
    size = LARGE[transport] if large else 1 << 20
    payload = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    with rdmaq.Writer(1, transport=transport, slot_bytes=4096, slots=8) as w:
        r = rdmaq.Reader(w.handle, 0)
        out = []
        t = threading.Thread(target=lambda: out.append(r.get(timeout=120)))
        t.start()
        w.put(payload, timeout=120)
        w.put(b"next", timeout=120)
        t.join(180)
        assert out[0] == payload
        assert r.get(timeout=30) == b"next"
        r.close()


def test_message_above_max_is_refused_clearly(transport):
    with rdmaq.Writer(1, transport=transport, max_message_bytes=1000) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.put(b"x" * 1000)
        with pytest.raises(rdmaq.MessageTooLarge, match="1001 bytes exceeds max_message_bytes=1000"):
            w.put(b"x" * 1001)
        assert len(r.get(timeout=30)) == 1000
        r.close()


def test_message_above_max_is_refused_before_any_reader_attached(transport):
    with rdmaq.Writer(1, transport=transport, max_message_bytes=1000) as w:
        # refused at once: not a TimeoutError after waiting for a reader that never comes
        with pytest.raises(rdmaq.MessageTooLarge, match="1001 bytes exceeds max_message_bytes=1000"):
            w.put([b"x" * 1000, b"x"], timeout=10)


def test_streamed_message_cut_by_timeout_is_discarded_not_half_delivered(transport):
    with rdmaq.Writer(1, transport=transport, slot_bytes=256, slots=4) as w:
        r = rdmaq.Reader(w.handle, 0)
        with pytest.raises(TimeoutError):
            w.put(b"A" * 10_000, timeout=0.3)  # > ring, nobody reading
        got = []
        t = threading.Thread(target=lambda: got.extend(r.get(timeout=60) for _ in range(2)))
        t.start()
        w.put(b"B" * 5000, timeout=60)
        w.put(b"C", timeout=60)
        t.join(120)
        assert got == [b"B" * 5000, b"C"]
        r.close()


def test_get_times_out_then_receives(transport):
    with rdmaq.Writer(1, transport=transport) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=30)
        before = r.stats["sleeps"]
        with pytest.raises(TimeoutError):
            r.get(timeout=0.3)
        assert r.stats["sleeps"] > before  # it waited in the kernel, not a quick give-up
        w.put(b"late")
        assert r.get(timeout=30) == b"late"
        r.close()


@pytest.mark.parametrize("size", [10_000, SCRATCH_BYTES + 10_000], ids=["in-scratch", "own-buffer"])
def test_reader_resumes_a_message_interrupted_by_timeout(transport, size):
    with rdmaq.Writer(1, transport=transport, slot_bytes=256, slots=4) as w:
        r = rdmaq.Reader(w.handle, 0)
        payload = bytes(range(250)) * (size // 250)
        t = threading.Thread(target=lambda: w.put(payload, timeout=60))
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
            pieces = r.get(timeout=60)
        t.join(60)
        assert pieces == payload
        r.close()
