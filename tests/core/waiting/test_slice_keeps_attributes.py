"""The short slice a blocked wait asks for changes the slice only: the thread's
nice value stays, and with restore_slice the thread's own slice comes back, what
it was (not the default).  Needs a kernel that honours sched_runtime (6.12+)."""
import ctypes
import os
import threading

import pytest

import rdmaq
from children import TIMEOUT

SYS_SCHED_GETATTR, SYS_SCHED_SETATTR = 315, 314  # x86-64
ATTR = 56


def _attr():
    libc = ctypes.CDLL(None, use_errno=True)
    buf = (ctypes.c_uint8 * ATTR)()
    assert libc.syscall(SYS_SCHED_GETATTR, 0, buf, ATTR, 0) == 0
    return buf


def _runtime():
    return int.from_bytes(bytes(_attr()[24:32]), "little")


def _set_runtime(ns):
    libc = ctypes.CDLL(None, use_errno=True)
    buf = _attr()
    buf[0:4] = (ATTR).to_bytes(4, "little")
    buf[24:32] = ns.to_bytes(8, "little")
    assert libc.syscall(SYS_SCHED_SETATTR, 0, buf, 0) == 0, ctypes.get_errno()


def _kernel_honours_runtime():
    """Asked of the kernel directly (not through rdmaq, whose answer is under test),
    in a thread of its own."""
    box = {}

    def probe():
        try:
            _set_runtime(150_000)
            box["ok"] = _runtime() == 150_000
        except AssertionError:
            box["ok"] = False

    t = threading.Thread(target=probe)
    t.start()
    t.join(TIMEOUT)
    return box.get("ok", False)


pytestmark = pytest.mark.skipif(not _kernel_honours_runtime(),
                                reason="this kernel ignores sched_runtime (slices need Linux 6.12+)")


def _blocked_get_in_a_thread(prepare, **kw):
    box = {}
    with rdmaq.Writer(1, transport="shm") as w:
        r = rdmaq.Reader(w.handle, 0, **kw)
        w.wait_ready(timeout=TIMEOUT)

        def body():
            prepare()
            box["before"] = (os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), _runtime())
            try:
                r.get(timeout=0.1)
            except TimeoutError:
                pass
            box["after"] = (os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), _runtime())

        t = threading.Thread(target=body)
        t.start()
        t.join(TIMEOUT)
        r.close()
    return box["before"], box["after"]


def test_the_thread_s_nice_value_stays():
    before, after = _blocked_get_in_a_thread(lambda: os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 7))
    assert before[0] == after[0] == 7
    assert after[1] == 300_000  # the default short slice (README), kept (restore_slice off), kept (restore_slice off)


def test_restore_slice_gives_back_the_thread_s_own_slice():
    before, after = _blocked_get_in_a_thread(lambda: _set_runtime(700_000), restore_slice=True)
    assert before[1] == after[1] == 700_000


RESET_ON_FORK = 0x01  # SCHED_FLAG_RESET_ON_FORK


def _reset_on_fork():
    return bool(int.from_bytes(bytes(_attr()[8:16]), "little") & RESET_ON_FORK)


def test_the_probe_gives_the_thread_back_without_reset_on_fork():
    """The probe tries the slice with reset-on-fork, as a wait asks for it; the thread's
    own attributes come back without it (else the processes it starts lose them)."""
    from rdmaq._rdmaq import lib
    box = {}

    def body():
        box["before"] = _reset_on_fork(), _runtime()
        box["probe"] = lib.rdmaq_sched_slice_probe(100_000)
        box["after"] = _reset_on_fork(), _runtime()

    t = threading.Thread(target=body)
    t.start()
    t.join(TIMEOUT)
    assert box["probe"] == 1
    assert box["before"] == box["after"] and box["after"][0] is False


# A fresh process (nothing probed yet): a first blocked get settles that slices work;
# then a thread that set the same slice itself blocks: its attributes are left alone.
ALREADY_SHORT_CHILD = """
import threading
import rdmaq
from test_slice_keeps_attributes import _reset_on_fork, _runtime, _set_runtime


def blocked_get(prepare):
    prepare()
    try:
        r.get(timeout=0.2)  # long enough to block even on a loaded machine
    except TimeoutError:
        pass
    box.append((_reset_on_fork(), _runtime()))


box = []
w = rdmaq.Writer(1, transport="shm")
r = rdmaq.Reader(w.handle, 0, slice_us=300)
w.wait_ready(30)
for prepare in (lambda: None, lambda: _set_runtime(300_000)):
    t = threading.Thread(target=blocked_get, args=(prepare,))
    t.start()
    t.join(30)
r.close()
w.close()
print(*box[1], flush=True)
"""


def test_a_thread_already_on_the_slice_is_left_alone_after_the_first_answer():
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))  # this module, and tests/'s helpers
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.path.dirname(os.path.dirname(here))]))
    p = subprocess.run([sys.executable, "-c", ALREADY_SHORT_CHILD], capture_output=True, text=True, env=env,
                       timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    reset_on_fork, runtime = p.stdout.split()
    assert runtime == "300000"
    assert reset_on_fork == "False"  # not probed again: nothing set on it


def test_restore_slice_gives_back_the_slice_from_before_the_first_short_one():
    """A reader without restore_slice leaves its thread on the short slice; a later one
    with it, on the same thread, gives back the thread's own slice, not the short one."""
    box = {}
    with rdmaq.Writer(1, transport="shm") as w1, rdmaq.Writer(1, transport="shm") as w2:
        kept = rdmaq.Reader(w1.handle, 0, slice_us=300, restore_slice=False)
        restoring = rdmaq.Reader(w2.handle, 0, slice_us=300, restore_slice=True)
        w1.wait_ready(timeout=TIMEOUT)
        w2.wait_ready(timeout=TIMEOUT)

        def body():
            _set_runtime(700_000)
            for name, r in (("kept", kept), ("restored", restoring)):
                try:
                    r.get(timeout=0.1)
                except TimeoutError:
                    pass
                box[name] = _runtime()

        t = threading.Thread(target=body)
        t.start()
        t.join(TIMEOUT)
        kept.close()
        restoring.close()
    assert box == {"kept": 300_000, "restored": 700_000}
