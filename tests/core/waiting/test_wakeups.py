"""The wake path, seen through the endpoints' counters instead of the clock.

``stats``: ``wakeups`` counts wake-ups an endpoint sent to its peers,
``sleeps`` waits that blocked in the kernel, ``spins`` waits that ended
while spinning, ``expired`` blocks that ended when their time ran out rather
than by a wake-up.  The promise (README): an idle reader costs ~0 CPU, and a
writer wakes only readers that actually sleep.  On shm the writer looks at
the reader's `sleeping` flag; on verbs every flush carries its doorbell
(WRITE_WITH_IMM, docs/verbs.md: a remote flag would cost a round trip), and
only a reader that armed its completion channel is woken by it, so there
the writer's count is one per flush.  A lost wake-up is caught by the
ping-pong test's time limit: a reader that is never woken falls back to its
100 ms liveness slices, and 400 such round trips take 40 s.
"""
import queue
import threading

import pytest

import rdmaq
from observe import blocked_call, sleeps

ROUNDS = 400
# wake-ups the writer sends a reader that is not asleep, per flush
DOORBELLS_PER_FLUSH = {"shm": 0, "verbs": 1}


def _pair(transport, **kw):
    w = rdmaq.Writer(1, transport=transport, slot_bytes=4096, slots=64,
                     spin_us=kw.pop("writer_spin_us", None))
    r = rdmaq.Reader(w.handle, 0, **kw)
    w.wait_ready(timeout=60)
    r.wait_ready(timeout=60)
    return w, r


def _echo_thread(r, rounds, out):
    """Reader side of a ping-pong: get, hand over, get the next."""
    def run():
        try:
            for _ in range(rounds):
                out.put(bytes(r.get(timeout=60)))
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out.put(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _ping_pong(w, r, rounds):
    out = queue.Queue()
    t = _echo_thread(r, rounds, out)
    for i in range(rounds):
        msg = i.to_bytes(4, "little") * 4
        w.put(msg, timeout=60)
        got = out.get(timeout=60)
        assert got == msg, got
    t.join(60)
    assert not t.is_alive()


def test_reader_that_is_not_waiting_costs_no_wakeup(transport):
    """A reader busy elsewhere (not in get) never announced a sleep."""
    w, r = _pair(transport)
    try:
        w0, r0 = w.stats, r.stats
        for i in range(40):  # fits in the ring: the writer never waits either
            w.put(bytes([i]) * 100, timeout=60)
        assert w.stats["wakeups"] - w0["wakeups"] == DOORBELLS_PER_FLUSH[transport] * 40
        assert [r.get(timeout=60)[0] for _ in range(40)] == list(range(40))
        # the data was there: no wait at all
        assert (r.stats["sleeps"], r.stats["spins"]) == (r0["sleeps"], r0["spins"])
    finally:
        r.close()
        w.close()


def test_spinning_reader_costs_no_wakeup(transport):
    """A reader that catches each message while spinning is not woken: every
    wake-up the writer sent went to a get that had stopped spinning."""
    w, r = _pair(transport, spin_us=1_000_000)
    try:
        w0, r0 = w.stats, r.stats
        _ping_pong(w, r, 200)
        wakeups = w.stats["wakeups"] - w0["wakeups"]
        spins = r.stats["spins"] - r0["spins"]
        slept = r.stats["sleeps"] - r0["sleeps"]
        # A get that waits spins first (1 s is far beyond a round trip), unless the
        # CPUs are oversubscribed or a spin lost its CPU (slow VMs often do both;
        # the spin budget then shrinks, wait_ready's spin included): then it blocks
        # and counts why.  Gets that found their message already there do neither.
        if r.stats["busy"] == 0 and r.stats["preempted"] == 0:
            assert slept == 0 or spins >= 1, dict(r.stats)
        if transport == "verbs":  # a doorbell per flush, asleep or not
            assert wakeups == 200, w.stats
        else:
            assert wakeups + spins <= 200, (w.stats, r.stats)
    finally:
        r.close()
        w.close()


def test_sleeping_reader_is_woken(transport):
    w, r = _pair(transport, spin_us=0)
    try:
        w0 = w.stats
        for i in range(5):
            t, box = blocked_call(r, lambda: r.get(timeout=60), "get on an empty ring")
            w.put(bytes([i]), timeout=60)
            t.join(60)
            assert box.get("value") == bytes([i]), box
        # one wake-up per message that found its reader asleep (a put landing
        # between two of the reader's liveness slices may find it awake)
        assert 1 <= w.stats["wakeups"] - w0["wakeups"] <= 5, w.stats
    finally:
        r.close()
        w.close()


@pytest.mark.timeout(20)
def test_spin_us_0_every_wait_blocks_and_every_sleeper_is_woken(transport):
    """spin_us=0: no spinning at all, on either side; each of the 400 round
    trips needs a wake-up (a lost one costs a 100 ms slice: the limit fails it).
    The reader's cadence windows and its free spin (policy "efficient") are off
    too: a steady ping-pong may open one, and its spin counts in ``spins``
    (spin_us bounds only the plain spin)."""
    w, r = _pair(transport, spin_us=0, writer_spin_us=0, anticipate=False, policy="efficient")
    try:
        w0, r0 = w.stats, r.stats
        _ping_pong(w, r, ROUNDS)
        assert r.stats["spins"] == r0["spins"] and w.stats["spins"] == w0["spins"]
        assert r.stats["sleeps"] > r0["sleeps"]
        assert 1 <= w.stats["wakeups"] - w0["wakeups"] <= ROUNDS
        assert r.stats["messages"] == ROUNDS
    finally:
        r.close()
        w.close()


def test_reader_credit_wakes_a_sleeping_writer(transport):
    w = rdmaq.Writer(1, transport=transport, slot_bytes=256, slots=4, spin_us=0)
    r = rdmaq.Reader(w.handle, 0)
    try:
        w.wait_ready(timeout=60)
        r0 = r.stats
        for lap in range(3):
            for i in range(4):
                w.put(bytes([lap, i]), timeout=60)
            t, box = blocked_call(w, lambda lap=lap: w.put(bytes([lap, 4]), timeout=60),
                                  "put on a full ring")
            got = [r.get(timeout=60) for _ in range(5)]  # the 5th waits for the blocked put
            t.join(60)
            assert "error" not in box, box
            assert got == [bytes([lap, i]) for i in range(5)]
        # its credit woke the blocked writer (a credit landing between two of
        # the writer's liveness slices may find it awake: 1 of 3 is enough)
        assert r.stats["wakeups"] - r0["wakeups"] >= 1, r.stats
    finally:
        r.close()
        w.close()


def test_idle_reader_sleeps_instead_of_spinning(transport):
    """A reader waiting on an empty ring spins at most its budget, then sleeps."""
    w, r = _pair(transport, spin_us=10)
    try:
        before = sleeps(r)
        with pytest.raises(TimeoutError):
            r.get(timeout=0.3)
        assert sleeps(r) > before and r.stats["spins"] == 0
    finally:
        r.close()
        w.close()


# ---------------------------------------------------------------- close wakes every sleeper
# A close that misses a sleeper is no hang: the sleeper's liveness slice runs out
# (100 ms) and it finds the queue closed.  So these tests do not time anything:
# each blocked call must end by the close's wake-up, none by a block expiring.

def _blocked_gets(readers):
    return [blocked_call(r, lambda r=r: r.get(timeout=60), f"reader {i}'s get")
            for i, r in enumerate(readers)]


def test_writer_close_wakes_every_blocked_reader():
    w = rdmaq.Writer(3, transport="shm")
    readers = [rdmaq.Reader(w.handle, i, spin_us=0, anticipate=False) for i in range(3)]
    try:
        w.wait_ready(timeout=60)
        for r in readers:
            r.wait_ready(timeout=60)
        calls = _blocked_gets(readers)
        expired = [r.stats["expired"] for r in readers]
        w.close()
        for i, (t, box) in enumerate(calls):
            t.join(60)
            assert isinstance(box.get("error"), rdmaq.PeerClosedError), (i, box)
        assert [r.stats["expired"] for r in readers] == expired, "a get woke only when its block expired"
    finally:
        for r in readers:
            r.close()
        w.close()


def test_reader_close_from_another_thread_wakes_its_blocked_get():
    with rdmaq.Writer(2, transport="shm") as w:
        readers = [rdmaq.Reader(w.handle, i, spin_us=0, anticipate=False) for i in range(2)]
        w.wait_ready(timeout=60)
        for r in readers:
            r.wait_ready(timeout=60)
        calls = _blocked_gets(readers)
        expired = [r.stats["expired"] for r in readers]
        for r in readers:
            r.close()
        for i, (t, box) in enumerate(calls):
            t.join(60)
            assert isinstance(box.get("error"), rdmaq.ClosedError), (i, box)
        assert [r.stats["expired"] for r in readers] == expired, "a get woke only when its block expired"


def test_writer_close_from_another_thread_wakes_its_blocked_put():
    w = rdmaq.Writer(1, transport="shm", slot_bytes=256, slots=4, spin_us=0)
    r = rdmaq.Reader(w.handle, 0)
    try:
        w.wait_ready(timeout=60)
        for i in range(4):  # the ring is full: the next put waits for credit
            w.put(bytes([i]), timeout=60)
        t, box = blocked_call(w, lambda: w.put(b"x", timeout=60), "put on a full ring")
        expired = w.stats["expired"]
        w.close()
        t.join(60)
        assert isinstance(box.get("error"), rdmaq.ClosedError), box
        assert w.stats["expired"] == expired, "the put woke only when its block expired"
    finally:
        r.close()
        w.close()
