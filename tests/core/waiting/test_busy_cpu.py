"""It never spins on a CPU others want (README): a waiter that may use one CPU,
where CPU hogs make it wait for its turn, blocks without spinning and counts
why in ``stats["busy"]`` (what hogs that cannot take the CPU do to the verdict:
tests/c/test_busy.c, with a made-up schedstat).  The load is made here: CPU hogs pinned to the
one CPU, stopped at the end; the waiter is a thread pinned to the same CPU."""
import os
import subprocess
import sys

import pytest

import rdmaq
from children import TIMEOUT
from observe import in_thread, wait_until

HOGS = 3


@pytest.fixture
def one_busy_cpu():
    cpu = min(os.sched_getaffinity(0))
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(HOGS)]
    try:
        for h in hogs:
            os.sched_setaffinity(h.pid, {cpu})
        # the kernel's count of runnable tasks (/proc/loadavg) sees them
        wait_until(lambda: int(open("/proc/loadavg").read().split()[3].split("/")[0]) > HOGS,
                   "the hogs to run")
        yield cpu
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def _pinned(cpu, fn):
    def run():
        os.sched_setaffinity(0, {cpu})  # this thread only
        return fn()

    t, box = in_thread(run)
    t.join(TIMEOUT)
    assert not t.is_alive()
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_a_waiter_whose_cpu_others_want_never_spins(one_busy_cpu):
    with rdmaq.Writer(1, transport="shm", spin_us=1_000_000) as w:
        r = rdmaq.Reader(w.handle, 0, spin_us=1_000_000, anticipate=False)
        w.wait_ready(timeout=TIMEOUT)

        def gets():
            with pytest.raises(TimeoutError):  # the thread learns that it waits for its CPU
                r.get(timeout=0.05)
            before = dict(r.stats)
            for _ in range(5):
                with pytest.raises(TimeoutError):
                    r.get(timeout=0.05)
            return before, dict(r.stats)

        before, after = _pinned(one_busy_cpu, gets)
        # a 1 s spin budget would have spun through every one of these waits
        assert after["spins"] == before["spins"] and after["preempted"] == before["preempted"]
        assert after["busy"] - before["busy"] == 5
        assert after["sleeps"] > before["sleeps"]
        r.close()


def test_a_writer_whose_cpu_others_want_never_spins_for_room(one_busy_cpu):
    with rdmaq.Writer(1, transport="shm", slot_bytes=1024, slots=2, spin_us=1_000_000) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=TIMEOUT)
        for i in range(2):
            w.put(b"%d" % i, timeout=TIMEOUT)

        def full_puts():
            with pytest.raises(TimeoutError):  # the thread learns that it waits for its CPU
                w.put(b"no room", timeout=0.05)
            before = dict(w.stats)
            for _ in range(3):
                with pytest.raises(TimeoutError):
                    w.put(b"no room", timeout=0.05)
            return before, dict(w.stats)

        before, after = _pinned(one_busy_cpu, full_puts)
        assert after["spins"] == before["spins"]
        assert after["busy"] - before["busy"] == 3
        r.close()


def test_a_writer_that_may_not_spin_does_not_judge_its_cpu(one_busy_cpu):
    """A writer with no spin budget (spin_us=0) has no spin to hold back: its waits for
    room on a CPU others want block without asking whether it is busy (stats["busy"]
    stays 0, where a writer that may spin counts each wait)."""
    with rdmaq.Writer(1, transport="shm", slot_bytes=1024, slots=2, spin_us=0) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=TIMEOUT)
        for i in range(2):
            w.put(b"%d" % i, timeout=TIMEOUT)

        def full_puts():
            for _ in range(4):
                with pytest.raises(TimeoutError):
                    w.put(b"no room", timeout=0.05)
            return dict(w.stats)

        after = _pinned(one_busy_cpu, full_puts)
        assert after["spins"] == 0 and after["busy"] == 0
        r.close()
