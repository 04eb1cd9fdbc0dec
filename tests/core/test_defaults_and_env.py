"""The documented defaults (docs/api.md's table) and the waiting options' environment
variables (RDMAQ_SPIN_US, RDMAQ_SLICE_US, RDMAQ_ANTICIPATE, RDMAQ_RESTORE_SLICE),
read when an endpoint is created; an argument given wins over its variable."""
import os
import struct

import pytest

import rdmaq
from children import TIMEOUT
from rdmaq._rdmaq import lib

SHM = "/dev/shm"
HDR = struct.Struct("<IIIIIiQQQQ")  # csrc/shm_format.h's segment header
DEFAULT_SLICE_NS = 300_000  # docs/api.md: slice_us=300


def _slices_honoured():
    return lib.rdmaq_sched_slice_probe(100_000) == 1  # also settles the process's answer


def _geometry(w):
    with open(os.path.join(SHM, w.handle.info.name), "rb") as f:
        _, _, n, slot_bytes, slots, _, max_message, *_ = HDR.unpack(f.read(HDR.size))
    return n, slot_bytes, slots, max_message


def test_a_writer_s_defaults():
    with rdmaq.Writer(3, transport="shm") as w:
        assert _geometry(w) == (3, 65536, 64, 1 << 30)
        assert w.max_message_bytes == 1 << 30 and w.n_readers == 3
    with rdmaq.Writer(1) as w:
        assert w.transport == "shm"  # auto, without an RDMA port


def test_the_waiting_options_default_to_the_documented_values(monkeypatch):
    """docs/api.md: spin_us=50, slice_us=300, anticipate=True, restore_slice=False."""
    from rdmaq import queue
    from rdmaq._rdmaq import ffi
    for var in ("RDMAQ_SLICE_US", "RDMAQ_SPIN_US", "RDMAQ_ANTICIPATE", "RDMAQ_RESTORE_SLICE"):
        monkeypatch.delenv(var, raising=False)
    wc = queue._wait_config(ffi, None, None, None, None)
    assert (wc.spin_ns, wc.slice_ns, wc.anticipate, wc.restore_slice) == (50_000, DEFAULT_SLICE_NS, 1, 0)


def test_the_waiting_variables_reach_the_c_config_in_nanoseconds(monkeypatch):
    """Each microsecond setting arrives in the C core as exactly 1000 times itself."""
    from rdmaq import queue
    from rdmaq._rdmaq import ffi
    monkeypatch.setenv("RDMAQ_EXPERIMENT", "busy_spin_us=2000, free_spin_busy=1")
    monkeypatch.setenv("RDMAQ_SETTLE_FAR_US", "4000")
    wc = queue._wait_config(ffi, 7, 200, None, None, free_spin_ns=123)
    assert (wc.spin_ns, wc.slice_ns, wc.free_spin_ns) == (7_000, 200_000, 123)
    assert (wc.busy_spin_ns, wc.free_spin_busy, wc.settle_far_ns) == (2_000_000, 1, 4_000_000)


def test_a_reader_asks_for_the_default_slice(monkeypatch):
    for var in ("RDMAQ_SLICE_US", "RDMAQ_SPIN_US", "RDMAQ_ANTICIPATE", "RDMAQ_RESTORE_SLICE"):
        monkeypatch.delenv(var, raising=False)
    honoured = _slices_honoured()
    with rdmaq.Writer(1, transport="shm") as w:
        r = rdmaq.Reader(w.handle, 0)
        assert r.stats["slice_ns"] == (DEFAULT_SLICE_NS if honoured else 0)
        assert w.stats["slice_ns"] == (DEFAULT_SLICE_NS if honoured else 0)
        r.close()


@pytest.mark.parametrize("value, slice_ns",
                         [("200", 200_000), ("100000", 100_000_000), ("0", 0), ("", DEFAULT_SLICE_NS)])
def test_rdmaq_slice_us(monkeypatch, value, slice_ns):
    monkeypatch.setenv("RDMAQ_SLICE_US", value)
    honoured = _slices_honoured()
    with rdmaq.Writer(1, transport="shm") as w:
        r = rdmaq.Reader(w.handle, 0)
        assert r.stats["slice_ns"] == (slice_ns if honoured else 0)
        r.close()
    with rdmaq.Writer(1, transport="shm", slice_us=300) as w:  # the argument wins
        r = rdmaq.Reader(w.handle, 0, slice_us=400)
        assert (w.stats["slice_ns"], r.stats["slice_ns"]) == ((300_000, 400_000) if honoured else (0, 0))
        r.close()


@pytest.mark.parametrize("var, value, match", [
    ("RDMAQ_SLICE_US", "99", r"environment variable RDMAQ_SLICE_US must be 0 \(off\) or an integer in "
                             r"100..100000, got '99'"),
    ("RDMAQ_SLICE_US", "100001", "RDMAQ_SLICE_US must be 0 .off. or an integer in 100..100000, got '100001'"),
    ("RDMAQ_SPIN_US", "1000001", "environment variable RDMAQ_SPIN_US must be an integer in 0..1000000, "
                                 "got '1000001'"),
    ("RDMAQ_SPIN_US", "fast", "environment variable RDMAQ_SPIN_US must be an integer in 0..1000000, got 'fast'"),
    ("RDMAQ_ANTICIPATE", "yes", "environment variable RDMAQ_ANTICIPATE must be 0 or 1, got 'yes'"),
    ("RDMAQ_ANTICIPATE", "2", "environment variable RDMAQ_ANTICIPATE must be 0 or 1, got '2'"),
])
def test_a_bad_variable_is_refused_naming_it(monkeypatch, var, value, match):
    with rdmaq.Writer(1, transport="shm") as w:
        monkeypatch.setenv(var, value)
        with pytest.raises(ValueError, match=match):
            rdmaq.Reader(w.handle, 0)
        if var != "RDMAQ_ANTICIPATE":  # a reader's option only
            with pytest.raises(ValueError, match=match):
                rdmaq.Writer(1, transport="shm")


def test_rdmaq_spin_us_0_never_spins(monkeypatch):
    monkeypatch.setenv("RDMAQ_SPIN_US", "0")
    monkeypatch.setenv("RDMAQ_ANTICIPATE", "0")
    with rdmaq.Writer(1, transport="shm", slot_bytes=1024, slots=2) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=TIMEOUT)
        for _ in range(3):
            with pytest.raises(TimeoutError):
                r.get(timeout=0.02)  # waits, and blocks at once
        for i in range(2):
            w.put(b"%d" % i, timeout=TIMEOUT)
        with pytest.raises(TimeoutError):
            w.put(b"full", timeout=0.02)
        assert r.stats["spins"] == 0 and r.stats["sleeps"] >= 3
        assert w.stats["spins"] == 0 and w.stats["sleeps"] >= 1
        r.close()


@pytest.mark.parametrize("how", ["argument", "variable"])
def test_warm_up_off(monkeypatch, how):
    kw = {"warm": False} if how == "argument" else {}
    if how == "variable":
        monkeypatch.setenv("RDMAQ_WARM", "0")
    with rdmaq.Writer(1, transport="shm") as w:
        r = rdmaq.Reader(w.handle, 0, **kw)
        w.wait_ready(timeout=TIMEOUT)
        w.put(b"cold", timeout=TIMEOUT)
        assert r.get(timeout=TIMEOUT) == b"cold"
        r.close()


def test_warm_is_a_bool_or_a_callable_and_a_bad_one_takes_no_index(monkeypatch):
    with rdmaq.Writer(1, transport="shm") as w:
        with pytest.raises(TypeError, match="warm must be a bool or a callable, got str"):
            rdmaq.Reader(w.handle, 0, warm="yes")
        monkeypatch.setenv("RDMAQ_WARM", "x")
        with pytest.raises(ValueError, match="RDMAQ_WARM must be 0 or 1, got 'x'"):
            rdmaq.Reader(w.handle, 0)
        monkeypatch.delenv("RDMAQ_WARM")
        r = rdmaq.Reader(w.handle, 0, warm=lambda: None)  # index 0 is still free
        r.close()


SLICE_CHILD = """
import rdmaq
w = rdmaq.Writer(1, transport="shm")
r = rdmaq.Reader(w.handle, 0)
w.wait_ready(30)
before = r.stats["slice_ns"]  # nothing blocked yet in this process: what it will ask for
try:
    r.get(timeout=0.05)
except TimeoutError:
    pass
print(before, r.stats["slice_ns"], flush=True)
"""


def test_a_fresh_process_reports_the_slice_it_will_ask_for():
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-c", SLICE_CHILD], capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    before, after = map(int, p.stdout.split())
    assert before == DEFAULT_SLICE_NS
    assert after == (DEFAULT_SLICE_NS if _slices_honoured() else 0)


def test_anticipate_must_be_a_bool():
    with rdmaq.Writer(1, transport="shm") as w:
        # 1 would pass for True in C: a bool is asked for, as for restore_slice
        with pytest.raises(TypeError, match="anticipate must be a bool, got int"):
            rdmaq.Reader(w.handle, 0, anticipate=1)
