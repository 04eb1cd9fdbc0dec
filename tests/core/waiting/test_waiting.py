"""Waiting: cadence windows, the short scheduler slice, credit on demand, signals.

No timing asserts: each test checks a state the queue reports (its counters,
the thread's scheduler attributes, /proc) or what a process printed.
"""
import ctypes
import os
import pickle
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import rdmaq
from children import CTX, TIMEOUT
from observe import in_thread
from rdmaq._rdmaq import lib

SYS_SCHED_GETATTR = 315  # x86-64
SLICE_NS = 300_000  # the default slice_us=300


def _thread_slice_ns():
    """sched_attr.sched_runtime of the calling thread: its slice (Linux >= 6.12 reports the
    default one too; older kernels report 0)."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = (ctypes.c_uint8 * 56)()
    if libc.syscall(SYS_SCHED_GETATTR, 0, buf, 56, 0) != 0:
        raise OSError(ctypes.get_errno(), "sched_getattr")
    return int.from_bytes(bytes(buf[24:32]), "little")


def _in_thread(fn):
    t, box = in_thread(fn)
    t.join(TIMEOUT)
    assert not t.is_alive()
    return box


def _kernel_honours_slices():
    return lib.rdmaq_sched_slice_probe(SLICE_NS) == 1


# ---------------------------------------------------------------- the short slice

def _blocked_get_then_slice(**reader_kwargs):
    with rdmaq.Writer(1, transport="shm") as w:
        r = rdmaq.Reader(w.handle, 0, **reader_kwargs)
        w.wait_ready(timeout=TIMEOUT)

        def body():
            before = _thread_slice_ns()
            with pytest.raises(TimeoutError):
                r.get(timeout=0.2)  # nothing comes: it blocks in the kernel
            return before, _thread_slice_ns(), r.stats

        box = _in_thread(body)
        r.close()
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_blocked_reader_asks_for_a_short_slice_and_keeps_it():
    before, after, stats = _blocked_get_then_slice()
    assert stats["sleeps"] >= 1
    if _kernel_honours_slices():
        assert after == SLICE_NS != before and stats["slice_ns"] == SLICE_NS
    else:
        assert after == before and stats["slice_ns"] == 0


def test_threads_started_later_do_not_inherit_the_short_slice():
    with rdmaq.Writer(1, transport="shm") as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=TIMEOUT)

        def body():
            with pytest.raises(TimeoutError):
                r.get(timeout=0.2)
            return _thread_slice_ns(), _in_thread(_thread_slice_ns)["value"]

        box = _in_thread(body)
        r.close()
    own, child = box["value"]
    if _kernel_honours_slices():
        assert own == SLICE_NS and child != SLICE_NS


@pytest.mark.parametrize("how", ["argument", "variable"])
def test_restore_slice_gives_the_thread_its_own_back(monkeypatch, how):
    if how == "variable":
        monkeypatch.setenv("RDMAQ_RESTORE_SLICE", "1")
    before, after, stats = _blocked_get_then_slice(**({"restore_slice": True} if how == "argument" else {}))
    assert stats["sleeps"] >= 1
    assert after == before != SLICE_NS


def _blocking_gets_paced(count, pace_s):
    """A reader that always blocks (no window, no spin) gets `count` messages sent
    `pace_s` apart; its counters."""
    with rdmaq.Writer(1, transport="shm") as w:
        r = rdmaq.Reader(w.handle, 0, spin_us=0, anticipate=False)
        w.wait_ready(timeout=TIMEOUT)
        t, box = in_thread(lambda: [bytes(r.get(timeout=TIMEOUT)) for _ in range(count)])
        for i in range(count):
            time.sleep(pace_s)
            w.put(b"%d" % i, timeout=TIMEOUT)
        t.join(TIMEOUT)
        stats = r.stats
        r.close()
    assert box.get("value") == [b"%d" % i for i in range(count)], box
    return stats


def test_settle_before_blocking_when_the_next_message_is_far(monkeypatch):
    """By default, once the reader knows the writer's rhythm, a get that blocks while the
    next message is still 3 ms or more away first settles the thread's scheduler lag;
    RDMAQ_SETTLE_FAR_US=0 turns that off."""
    monkeypatch.delenv("RDMAQ_SETTLE_FAR_US", raising=False)
    stats = _blocking_gets_paced(14, 0.06)  # messages come 60 ms apart
    assert stats["sleeps"] >= 1 and stats["settles"] >= 1
    monkeypatch.setenv("RDMAQ_SETTLE_FAR_US", "0")
    stats = _blocking_gets_paced(14, 0.06)
    assert stats["sleeps"] >= 1 and stats["settles"] == 0


@pytest.mark.parametrize("var,value", [("RDMAQ_SETTLE_FAR_US", "soon"), ("RDMAQ_SETTLE_FAR_US", "-1"),
                                       ("RDMAQ_SETTLE_FAR_US", "3000us"),
                                       ("RDMAQ_EXPERIMENT", "busy_spin_us=fast"),
                                       ("RDMAQ_EXPERIMENT", "busy_spin_us=1000001"),
                                       ("RDMAQ_EXPERIMENT", "free_spin_busy=2"),
                                       ("RDMAQ_EXPERIMENT", "fast=1")])
def test_a_malformed_waiting_variable_is_an_error_naming_it(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=var):
        rdmaq.Writer(1, transport="shm")


def test_slice_off_leaves_the_thread_alone():
    before, after, stats = _blocked_get_then_slice(slice_us=0)
    assert after == before != SLICE_NS and stats["slice_ns"] == 0


@pytest.mark.parametrize("slice_us", [1, 99, 100_001])
def test_bad_slice_is_refused(slice_us):
    with rdmaq.Writer(1, transport="shm") as w:
        with pytest.raises(ValueError, match="slice_us"):
            rdmaq.Reader(w.handle, 0, slice_us=slice_us)


SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/syscall.h>
/* A kernel that refuses sched_setattr (MODE=refuse) or ignores sched_runtime (MODE=ignore). */
long syscall(long nr, ...)
{
	static long (*real)(long, ...);
	va_list ap;
	long a[6];
	if (!real)
		real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
	va_start(ap, nr);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
#ifdef REFUSE
	if (nr == SYS_sched_setattr) {
		errno = EPERM;
		return -1;
	}
#else
	if (nr == SYS_sched_setattr)
		return 0;
#endif
	return real(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
"""

FALLBACK_CHILD = textwrap.dedent("""
    import rdmaq
    w = rdmaq.Writer(1, transport="shm")
    r = rdmaq.Reader(w.handle, 0)
    w.wait_ready(30)
    try:
        r.get(timeout=0.2)
    except TimeoutError:
        pass
    w.put(b"still flows")
    print(r.stats["slice_ns"], r.stats["sleeps"], bytes(r.get(timeout=30)).decode(), flush=True)
""")


@pytest.mark.parametrize("mode", ["refuse", "ignore"])
def test_kernel_without_slices_is_silently_off(mode, tmp_path):
    shim = tmp_path / f"noslice-{mode}.so"
    src = tmp_path / "shim.c"
    src.write_text(SHIM)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", *(["-DREFUSE"] if mode == "refuse" else []),
                    str(src), "-o", str(shim), "-ldl"], check=True, timeout=120)
    p = subprocess.run([sys.executable, "-c", FALLBACK_CHILD], capture_output=True, text=True,
                       timeout=TIMEOUT, env=dict(os.environ, LD_PRELOAD=str(shim)))
    assert p.returncode == 0, p.stderr
    slice_ns, sleeps, text = p.stdout.split(maxsplit=2)
    assert (int(slice_ns), text.strip()) == (0, "still flows")
    assert int(sleeps) >= 1


# ---------------------------------------------------------------- cadence windows

def _paced_reader(handle, count, anticipate, out):
    try:
        # the windows are policy "efficient"'s (policy "auto" spins instead on a free CPU)
        with rdmaq.Reader(handle, 0, anticipate=anticipate, policy="efficient") as r:
            r.wait_ready(timeout=TIMEOUT)
            got = [int.from_bytes(r.get(timeout=TIMEOUT)[:8], "little") for _ in range(count)]
            out.put(("ok", got, r.stats))
    except Exception as e:  # noqa: BLE001 - reported to the test
        out.put(("error", repr(e), None))


def _paced_run(anticipate, count=300, pace_s=0.002):
    out = CTX.Queue()
    with rdmaq.Writer(1, transport="shm") as w:
        p = CTX.Process(target=_paced_reader, args=(w.handle, count, anticipate, out), daemon=True)
        p.start()
        try:
            w.wait_ready(timeout=TIMEOUT)
            t = time.monotonic()
            for i in range(count):
                w.put(i.to_bytes(8, "little") + bytes(56), timeout=TIMEOUT)
                t += pace_s
                time.sleep(max(0.0, t - time.monotonic()))
            status, got, stats = out.get(timeout=TIMEOUT)
        finally:
            p.join(TIMEOUT)
    assert status == "ok", got
    assert got == list(range(count))
    return stats


def test_steady_writer_opens_windows_or_the_reader_says_the_cpu_is_busy():
    stats = _paced_run(anticipate=True)
    # Each wait either used a predicted window or skipped it because the CPUs were
    # oversubscribed; a reader that never predicts anything fails both.
    assert stats["windows"] + stats["busy"] > 0
    assert stats["windows"] <= stats["spins"]


def test_anticipation_off_never_naps():
    stats = _paced_run(anticipate=False)
    assert stats["naps"] == 0 and stats["windows"] == 0 and stats["misses"] == 0


# ---------------------------------------------------------------- credit on demand

def test_writer_short_of_room_gets_credit_the_reader_holds(transport):
    """A reader that consumed a message but is not calling get() must not stall a
    writer that needs the room (its credit is returned at once, or fetched)."""
    with rdmaq.Writer(1, transport=transport, slot_bytes=1024, slots=8) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=TIMEOUT)
        r.wait_ready(timeout=TIMEOUT)
        w.put(b"small", timeout=TIMEOUT)
        assert r.get(timeout=TIMEOUT) == b"small"
        payload = lib.rdmaq_slot_payload(1024)
        whole_ring = bytes(i % 251 for i in range(8 * payload))
        w.put(whole_ring, timeout=30)  # the reader is not in get() while this waits
        assert r.get(timeout=TIMEOUT) == whole_ring
        r.close()


# ---------------------------------------------------------------- signals while blocked

def _blocked_in_kernel(pid):
    """The process's main thread sleeps in a futex or poll (not spinning, not running)."""
    try:
        with open(f"/proc/{pid}/wchan") as f:
            wchan = f.read()
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state == "S" and any(k in wchan for k in ("futex", "poll", "ep_", "schedule"))


def _wait_blocked(pid):
    deadline = time.monotonic() + TIMEOUT
    while not _blocked_in_kernel(pid):
        assert time.monotonic() < deadline, "child never blocked"
        time.sleep(0.01)


def _readline(p):
    ready, _, _ = select.select([p.stdout], [], [], TIMEOUT)
    assert ready, "child said nothing"
    return p.stdout.readline().strip()


READER_CHILD = textwrap.dedent("""
    import pickle, signal, sys, rdmaq
    h = pickle.loads(bytes.fromhex(sys.argv[1]))
    signal.signal(signal.SIGUSR1, lambda *a: print("HANDLER", flush=True))
    # Python raises KeyboardInterrupt only if SIGINT was not ignored when it
    # started, and a background job of a shell without job control (CI, nohup,
    # `cmd &` in a script) inherits SIGINT ignored: the test would wait forever.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    r = rdmaq.Reader(h, 0)
    r.wait_ready(60)
    print("READY", flush=True)
    print("GOT", bytes(r.get()).decode(), flush=True)
    try:
        r.get()
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
    print("GOT", bytes(r.get(timeout=60)).decode(), flush=True)
    r.close()
""")


def test_signal_handlers_run_while_get_blocks_and_nothing_is_lost():
    with rdmaq.Writer(1, transport="shm") as w:
        p = subprocess.Popen([sys.executable, "-c", READER_CHILD, pickle.dumps(w.handle).hex()],
                             stdout=subprocess.PIPE, text=True)
        try:
            w.wait_ready(timeout=TIMEOUT)
            assert _readline(p) == "READY"
            _wait_blocked(p.pid)
            p.send_signal(signal.SIGUSR1)
            assert _readline(p) == "HANDLER"  # ran while get() had no message
            w.put(b"one")
            assert _readline(p) == "GOT one"
            _wait_blocked(p.pid)
            p.send_signal(signal.SIGINT)
            assert _readline(p) == "INTERRUPTED"  # KeyboardInterrupt out of get()
            w.put(b"two")
            assert _readline(p) == "GOT two"  # the interrupted get lost nothing
            assert p.wait(TIMEOUT) == 0
        finally:
            p.kill()
            p.wait()


WRITER_CHILD = textwrap.dedent("""
    import pickle, signal, sys, rdmaq
    signal.signal(signal.SIGUSR1, lambda *a: print("HANDLER", flush=True))
    w = rdmaq.Writer(1, transport="shm", slot_bytes=1024, slots=4)
    print(pickle.dumps(w.handle).hex(), flush=True)
    w.wait_ready(60)
    for i in range(3):
        w.put(b"small %d" % i)
    w.put(bytes(i % 253 for i in range(40000)))  # ten times the ring: streams, blocks
    print("PUT DONE", flush=True)
    w.close()
""")


def test_signal_handlers_run_while_put_blocks_and_the_message_survives():
    p = subprocess.Popen([sys.executable, "-c", WRITER_CHILD], stdout=subprocess.PIPE, text=True)
    try:
        r = rdmaq.Reader(pickle.loads(bytes.fromhex(_readline(p))), 0)
        r.wait_ready(timeout=TIMEOUT)
        _wait_blocked(p.pid)  # the ring is full: the big put waits for room
        p.send_signal(signal.SIGUSR1)
        assert _readline(p) == "HANDLER"
        got = [bytes(r.get(timeout=TIMEOUT)) for _ in range(4)]
        assert got[:3] == [b"small 0", b"small 1", b"small 2"]
        assert got[3] == bytes(i % 253 for i in range(40000))
        assert _readline(p) == "PUT DONE"
        with pytest.raises(rdmaq.PeerClosedError):
            r.get(timeout=TIMEOUT)
        r.close()
        assert p.wait(TIMEOUT) == 0
    finally:
        p.kill()
        p.wait()
