"""A reader that dies without closing holds the ring back: every put that
needs its credit raises PeerDeadError naming it, for ever (vLLM's rule: a
dead worker ends the engine).  A standalone writer can drop it and go on:
the dead reader's credit no longer counts, the put that raised sent nothing
(put it again), and the others get every message once, in order."""
import pytest

import rdmaq
from children import TIMEOUT, attached_reader, sleepy_reader, start
from observe import kill_stopped

SLOTS = 8


def _queue_with_a_dead_reader(transport, procs, results, n_readers=2):
    """Writer with reader 0 here and reader n-1 killed in a child, with the ring
    full: the child never read, so the writer needs its credit to go on."""
    w = rdmaq.Writer(n_readers, transport=transport, slot_bytes=1024, slots=SLOTS)
    victim = start(sleepy_reader, w.handle, n_readers - 1, results)
    procs.append(victim)
    r = rdmaq.Reader(w.handle, 0) if n_readers > 1 else None
    w.wait_ready(timeout=TIMEOUT * 3)
    assert results.get(timeout=TIMEOUT * 3)[1] == "attached"
    for i in range(SLOTS):  # fills the ring for the sleeping reader
        w.put(b"m%d" % i, timeout=TIMEOUT)
    kill_stopped(victim)
    victim.join(TIMEOUT)
    return w, r, victim


def test_a_dead_reader_fails_every_put_until_it_is_dropped(transport, procs, results):
    w, r, victim = _queue_with_a_dead_reader(transport, procs, results)
    with w, r:
        assert [r.get(timeout=TIMEOUT) for _ in range(SLOTS)] == [b"m%d" % i for i in range(SLOTS)]
        for _ in range(2):  # for ever, without a drop
            with pytest.raises(rdmaq.PeerDeadError, match=rf"reader 1 \(pid {victim.pid}"):
                w.put(b"next", timeout=TIMEOUT)
        assert w.dead_readers() == [1]
        with pytest.raises(ValueError, match="reader 0 is alive"):
            w.drop_reader(0)
        w.drop_reader(1)
        w.drop_reader(1)  # dropped already: nothing to do
        assert w.dead_readers() == []
        # the failed puts sent nothing; the next ones flow past a full ring's worth
        msgs = [b"next"] + [b"after %d" % i for i in range(3 * SLOTS)]
        for m in msgs:
            w.put(m, timeout=TIMEOUT)
            assert r.get(timeout=TIMEOUT) == m


def test_dropping_the_last_reader_closes_the_queue_for_the_writer(transport, procs, results):
    w, _, _ = _queue_with_a_dead_reader(transport, procs, results, n_readers=1)
    with w:
        with pytest.raises(rdmaq.PeerDeadError):
            w.put(b"next", timeout=TIMEOUT)
        w.drop_reader(0)
        with pytest.raises(rdmaq.PeerClosedError, match="all 1 readers have closed or were dropped"):
            w.put(b"next", timeout=TIMEOUT)


def test_drop_reader_checks_its_index(transport):
    with rdmaq.Writer(2, transport=transport) as w, rdmaq.Reader(w.handle, 0) as r0:
        r1 = rdmaq.Reader(w.handle, 1)
        w.wait_ready(timeout=TIMEOUT)
        r1.close()
        for bad, err in ((2, ValueError), (-1, ValueError), ("1", TypeError), (True, TypeError)):
            with pytest.raises(err, match="index"):
                w.drop_reader(bad)
        w.drop_reader(1)  # closed: nothing to drop
        assert w.dead_readers() == []
        w.put(b"x", timeout=TIMEOUT)
        assert r0.get(timeout=TIMEOUT) == b"x"


def test_a_reader_dead_before_ready_fails_the_writer_s_wait_ready(procs, results, shm_names):
    """A reader that attached and then died fails the writer's wait for ready with
    PeerDeadError naming it, while another reader has not attached yet."""
    w = rdmaq.Writer(2, transport="shm")
    shm_names.append(w.handle.info.name)
    victim = start(attached_reader, w.handle, 0, results)
    procs.append(victim)
    assert results.get(timeout=TIMEOUT)[1] == "attached"
    kill_stopped(victim)
    victim.join(TIMEOUT)
    # reader 1 never comes: the dead reader, not a timeout, ends the wait
    with w, pytest.raises(rdmaq.PeerDeadError, match=rf"reader 0 \(pid {victim.pid}\) died"):
        w.wait_ready(timeout=TIMEOUT / 4)
