"""What waking and crediting cost, counted by the endpoints (``stats``), never timed:
over shm a reader returns credit at every record (a store, no syscall unless the
writer sleeps), the writer counts a stall on credit once per put that found the
ring full, and a wake-up goes only to a peer that announced its sleep."""
import pytest

import rdmaq
from children import TIMEOUT
from observe import blocked_call
from rdmaq._rdmaq import lib

SLOTS = 8
PAYLOAD = lib.rdmaq_slot_payload(1024)


@pytest.fixture
def pair():
    w = rdmaq.Writer(1, transport="shm", slot_bytes=1024, slots=SLOTS)
    r = rdmaq.Reader(w.handle, 0)
    w.wait_ready(timeout=TIMEOUT)
    r.wait_ready(timeout=TIMEOUT)
    yield w, r
    r.close()
    w.close()


def test_a_reader_credits_once_per_record(pair):
    w, r = pair
    c0 = r.stats["credits"]
    for i in range(5):
        w.put(bytes([i]) * 10, timeout=TIMEOUT)  # one record each
    w.put(bytes(3 * PAYLOAD), timeout=TIMEOUT)  # three records
    got = [r.get(timeout=TIMEOUT) for _ in range(6)]
    assert [len(m) for m in got] == [10] * 5 + [3 * PAYLOAD]
    assert r.stats["credits"] - c0 == 8


def test_a_writer_counts_one_stall_per_put_that_found_no_room(pair):
    w, r = pair
    c0 = w.stats["credits"]
    for i in range(SLOTS):
        w.put(bytes([i]), timeout=TIMEOUT)
    assert w.stats["credits"] == c0  # room for each
    for _ in range(3):
        with pytest.raises(TimeoutError):
            w.put(b"no room", timeout=0)
    assert w.stats["credits"] - c0 == 3
    assert r.get(timeout=TIMEOUT) == bytes([0])
    w.put(b"room for one", timeout=0)  # the credit of that record is there already
    assert w.stats["credits"] - c0 == 3


def test_credit_to_a_writer_that_never_sleeps_wakes_nobody(pair):
    w, r = pair
    w0, r0 = w.stats, r.stats
    for lap in range(4):
        for i in range(SLOTS // 2):
            w.put(bytes([lap, i]), timeout=TIMEOUT)
        assert [bytes(r.get(timeout=TIMEOUT)) for _ in range(SLOTS // 2)] == \
            [bytes([lap, i]) for i in range(SLOTS // 2)]
    assert r.stats["wakeups"] == r0["wakeups"]
    assert w.stats["sleeps"] == w0["sleeps"] and w.stats["wakeups"] == w0["wakeups"]
    assert r.stats["credits"] - r0["credits"] == 4 * (SLOTS // 2)


def test_a_writer_stalled_on_credit_sleeps_and_is_woken_by_it(pair):
    w, r = pair
    for i in range(SLOTS):
        w.put(bytes([i]), timeout=TIMEOUT)
    w0, r0 = w.stats, r.stats
    t, box = blocked_call(w, lambda: w.put(b"waits", timeout=TIMEOUT), "put on a full ring")
    assert r.get(timeout=TIMEOUT) == bytes([0])
    t.join(TIMEOUT)
    assert "error" not in box, box
    assert w.stats["credits"] - w0["credits"] == 1
    assert w.stats["sleeps"] > w0["sleeps"]
    # the credit found the writer asleep (or, between two of its 100 ms slices, awake)
    assert r.stats["wakeups"] - r0["wakeups"] <= 1
    assert w.stats["woken"] - w0["woken"] <= w.stats["sleeps"] - w0["sleeps"]


def test_sleepers_are_woken_once_per_message_and_counted():
    rs = None
    w2 = rdmaq.Writer(2, transport="shm", spin_us=0)
    try:
        rs = [rdmaq.Reader(w2.handle, i, spin_us=0, anticipate=False) for i in range(2)]
        w2.wait_ready(timeout=TIMEOUT)
        for k in range(3):
            calls = [blocked_call(rd, lambda rd=rd: bytes(rd.get(timeout=TIMEOUT)), f"reader {i}")
                     for i, rd in enumerate(rs)]
            before = w2.stats["wakeups"]
            w2.put(b"%d" % k, timeout=TIMEOUT)
            for t, box in calls:
                t.join(TIMEOUT)
                assert box == {"value": b"%d" % k}
            # both slept: both counted (one futex call wakes them, on one word)
            assert 1 <= w2.stats["wakeups"] - before <= 2
        for rd in rs:
            s = rd.stats
            assert s["messages"] == 3 and s["spins"] == 0
            assert 1 <= s["woken"] <= s["sleeps"]
    finally:
        for rd in rs or []:
            rd.close()
        w2.close()


def test_a_reader_woken_once_is_not_woken_again_while_it_is_busy():
    """After a wake-up the reader takes its sleep announcement back: the writer's
    next puts, while the reader is not waiting, wake nobody."""
    with rdmaq.Writer(1, transport="shm", spin_us=0) as w:
        r = rdmaq.Reader(w.handle, 0, spin_us=0, anticipate=False)
        w.wait_ready(timeout=TIMEOUT)
        t, box = blocked_call(r, lambda: r.get(timeout=TIMEOUT), "get on an empty ring")
        w.put(b"wake", timeout=TIMEOUT)
        t.join(TIMEOUT)
        assert box == {"value": b"wake"}
        before = w.stats["wakeups"]
        for i in range(5):  # the reader is not in get
            w.put(bytes([i]), timeout=TIMEOUT)
        assert w.stats["wakeups"] == before
        assert [bytes(r.get(timeout=TIMEOUT)) for _ in range(5)] == [bytes([i]) for i in range(5)]
        r.close()


def test_a_writer_stalled_on_credit_wakes_nobody_without_new_records():
    """Reader 0 has read everything and sleeps; reader 1 reads nothing, so the ring
    is full: the writer's stalled put has nothing new for reader 0, and wakes nobody."""
    with rdmaq.Writer(2, transport="shm", slot_bytes=1024, slots=SLOTS, spin_us=0) as w:
        fast = rdmaq.Reader(w.handle, 0, spin_us=0, anticipate=False)
        slow = rdmaq.Reader(w.handle, 1)
        w.wait_ready(timeout=TIMEOUT)
        for i in range(SLOTS):
            w.put(bytes([i]), timeout=TIMEOUT)
            assert fast.get(timeout=TIMEOUT) == bytes([i])
        t, box = blocked_call(fast, lambda: fast.get(timeout=TIMEOUT), "the fast reader's get")
        before = w.stats["wakeups"]
        with pytest.raises(TimeoutError):
            w.put(b"no room", timeout=0.2)
        assert w.stats["wakeups"] == before
        slow.close()  # room again: the writer skips the closed reader
        w.put(b"after", timeout=TIMEOUT)
        t.join(TIMEOUT)
        assert box == {"value": b"after"}
        fast.close()
