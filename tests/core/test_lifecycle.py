"""Shutdown, peer death, clean close: errors within the timeout, never a hang."""
import os
import signal

import pytest

import rdmaq
from children import doomed_writer, sleepy_reader, start, stream_reader, transport_stats
from observe import blocked_call, kill_stopped

COUNTERS = {"messages", "bytes", "spins", "windows", "misses", "preempted", "naps", "sleeps",
            "woken", "wakeups", "credits", "busy", "settles", "slice_ns", "immediate"}


def test_close_from_another_thread_wakes_blocked_get(transport):
    w = rdmaq.Writer(1, transport=transport)
    r = rdmaq.Reader(w.handle, 0)
    w.wait_ready(timeout=30)
    # past its spin, in the futex or completion channel
    t, box = blocked_call(r, lambda: r.get(), "get")
    r.close()
    t.join(30)
    assert not t.is_alive()
    assert isinstance(box.get("error"), rdmaq.ClosedError)
    with pytest.raises(rdmaq.ClosedError):
        r.get(timeout=1)
    w.close()


def test_close_from_another_thread_wakes_blocked_put(transport):
    w = rdmaq.Writer(1, transport=transport, slot_bytes=128, slots=2)
    r = rdmaq.Reader(w.handle, 0)
    w.put(b"1")
    w.put(b"2")
    t, box = blocked_call(w, lambda: w.put(b"3"), "put on a full ring")
    w.close()
    t.join(30)
    assert not t.is_alive()
    assert isinstance(box.get("error"), rdmaq.ClosedError)
    # what was sent before the close is still delivered, then the close
    assert r.get(timeout=30) == b"1"
    assert r.get(timeout=30) == b"2"
    with pytest.raises(rdmaq.PeerClosedError):
        r.get(timeout=30)
    r.close()


def test_kill_9_reader_mid_stream_names_the_reader(transport, procs, results):
    with rdmaq.Writer(3, transport=transport, slot_bytes=1024, slots=8) as w:
        procs += [start(stream_reader, w.handle, i, results) for i in (0, 1)]
        procs.append(start(sleepy_reader, w.handle, 2, results))
        w.wait_ready(timeout=300)
        victim = procs[2]
        for _ in range(3):
            w.put(b"m" * 500, timeout=60)
        kill_stopped(victim)  # SIGKILL, once it stopped after its report
        # No timeout: only the peer's liveness (pidfd, socket) can end this
        # put; if it is not noticed, the test's own time limit fails it.
        with pytest.raises(rdmaq.PeerDeadError, match=rf"reader 2 \(pid {victim.pid}\) died"):
            for _ in range(1000):
                w.put(b"m" * 500)


def test_kill_9_writer_mid_stream_readers_raise(transport, procs, results):
    procs.append(start(doomed_writer, transport, 2, results))
    handle = results.get(timeout=120)
    procs += [start(stream_reader, handle, i, results) for i in range(2)]
    started = [results.get(timeout=300) for _ in range(2)]
    assert all(s[1] == "started" for s in started), started
    os.kill(procs[0].pid, signal.SIGKILL)
    ends = [results.get(timeout=60) for _ in range(2)]
    assert all(e[1] == "dead" for e in ends), ends
    assert all("writer" in e[3] and "died" in e[3] for e in ends)
    assert all(e[2] >= 1 for e in ends)


def test_clean_writer_close_is_seen_after_all_messages(transport, procs, results):
    with rdmaq.Writer(2, transport=transport) as w:
        procs += [start(stream_reader, w.handle, i, results) for i in range(2)]
        w.wait_ready(timeout=300)
        for _ in range(300):
            w.put(b"y" * 64, timeout=60)
    msgs = [results.get(timeout=120) for _ in range(4)]
    closed = sorted(m for m in msgs if m[1] == "closed")
    assert closed == [(0, "closed", 300), (1, "closed", 300)]


def test_closed_reader_is_skipped_and_last_close_is_reported(transport):
    w = rdmaq.Writer(2, transport=transport, slot_bytes=128, slots=2)
    r0, r1 = rdmaq.Reader(w.handle, 0), rdmaq.Reader(w.handle, 1)
    w.wait_ready(timeout=30)
    r1.close()
    for i in range(10):  # r1 never reads, yet the writer is not blocked by it
        w.put(bytes([i]), timeout=30)
        assert r0.get(timeout=30) == bytes([i])
    r0.close()
    with pytest.raises(rdmaq.PeerClosedError, match="all 2 readers have closed"):
        w.put(b"z", timeout=30)
    w.close()


def test_writer_closed_before_ready_is_seen_by_waiting_readers(transport):
    """A writer that closes before it ever connected its readers: they learn
    it from their wait, not from their timeout (none here would mean a hang)."""
    w = rdmaq.Writer(1, transport=transport)
    r = rdmaq.Reader(w.handle, 0)
    w.close()
    with pytest.raises(rdmaq.PeerClosedError, match="writer closed the queue"):
        r.get()  # no timeout: only the close can end it (else the test's limit)
    r.close()


def test_writer_wait_ready_times_out_naming_missing_readers(transport):
    with rdmaq.Writer(3, transport=transport) as w:
        r = rdmaq.Reader(w.handle, 1)
        with pytest.raises(TimeoutError, match=r"1 of 3 readers attached \(missing: \[0, 2\]\)"):
            w.wait_ready(timeout=0.3)
        r.close()


def test_stats_count_messages_bytes_and_waits(transport):
    with rdmaq.Writer(1, transport=transport) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=30)
        for i in range(10):
            w.put(b"s" * i)
        for _ in range(10):
            r.get(timeout=30)
        with pytest.raises(TimeoutError):
            r.get(timeout=0.3)
        assert w.stats["messages"] == 10 and w.stats["bytes"] == 45
        st = r.stats
        assert st["messages"] == 10 and st["bytes"] == 45
        assert st["sleeps"] >= 1  # the empty wait blocked instead of spinning 0.3 s
        # the ring's counters, plus the transport's own (verbs: QP pools, doorbells)
        assert set(st) == COUNTERS | set(transport_stats(transport))
        r.close()
        assert r.stats["messages"] == 10  # kept after close
