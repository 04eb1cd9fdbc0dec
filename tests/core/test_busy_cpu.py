"""It never spins on an oversubscribed CPU (README): a waiter that may use one
CPU, on which more tasks are runnable than it has, blocks without spinning and
counts why in ``stats["busy"]``.  The load is made here: CPU hogs pinned to the
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


def test_a_waiter_on_an_oversubscribed_cpu_never_spins(one_busy_cpu):
    with rdmaq.Writer(1, transport="shm", spin_us=1_000_000) as w:
        r = rdmaq.Reader(w.handle, 0, spin_us=1_000_000, anticipate=False)
        w.wait_ready(timeout=TIMEOUT)

        def gets():
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


def test_a_writer_on_an_oversubscribed_cpu_never_spins_for_room(one_busy_cpu):
    with rdmaq.Writer(1, transport="shm", slot_bytes=1024, slots=2, spin_us=1_000_000) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=TIMEOUT)
        for i in range(2):
            w.put(b"%d" % i, timeout=TIMEOUT)

        def full_puts():
            before = dict(w.stats)
            for _ in range(3):
                with pytest.raises(TimeoutError):
                    w.put(b"no room", timeout=0.05)
            return before, dict(w.stats)

        before, after = _pinned(one_busy_cpu, full_puts)
        assert after["spins"] == before["spins"]
        assert after["busy"] - before["busy"] == 3
        r.close()


# ------------------------------------------------------------ the oversubscription test

def _can_fake_loadavg():
    import shutil
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-m", "sh", "-c", "mount --bind /dev/null /proc/loadavg"],
                          capture_output=True).returncode == 0


BUSY_CHILD = """
import os, threading, rdmaq
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one CPU, for the threads started below too
w = rdmaq.Writer(1, transport="shm", spin_us=1000000)
r = rdmaq.Reader(w.handle, 0, spin_us=1000000, anticipate=False)
w.wait_ready(30)

def gets():  # not on the main thread: a get is one wait (the main thread's return every 100 ms)
    for _ in range(3):
        try:
            r.get(timeout=0.03)
        except TimeoutError:
            pass

t = threading.Thread(target=gets)
t.start()
t.join()
print(r.stats["busy"], flush=True)
"""


@pytest.mark.skipif(not _can_fake_loadavg(), reason="needs root and unshare -m to show a made-up /proc/loadavg")
@pytest.mark.parametrize("loadavg, busy", [
    ("7.00 7.00 7.00 1/300 4321", 0),  # only this process runs: one CPU is enough
    ("0.00 0.00 0.00 2/300 4321", 3),  # one other runnable task fills the one CPU
    ("0.00 0.00 0.00 9/300 4321", 3),
])
def test_busy_means_the_other_runnable_tasks_fill_this_thread_s_cpus(tmp_path, loadavg, busy):
    """The kernel's count of runnable tasks (4th field of /proc/loadavg, this
    process included) against the CPUs this thread may use, shown a made-up
    /proc/loadavg in a mount namespace of its own."""
    fake = tmp_path / "loadavg"
    fake.write_text(loadavg + "\n")
    p = subprocess.run(["unshare", "-m", "sh", "-c", 'mount --bind "$0" /proc/loadavg && exec "$1" -c "$2"',
                        str(fake), sys.executable, BUSY_CHILD], capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert int(p.stdout) == busy, (loadavg, p.stdout)
