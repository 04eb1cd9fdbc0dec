"""Measure rdmaq latency over the RDMA device and record it next to perftest's.

Asserts only that every message arrived in order; the numbers go to
$RDMAQ_RESULTS_DIR/rdmaq-latency-rxe.{json,txt} (results/rxe by default),
beside tests/rxe/perftest-check.sh's perftest-rxe.json.

- c_rtt_half: tests/c/lat_pingpong.c, the C API between two threads over the
  loopback QP pool, busy-polling: the like-for-like of ib_write_lat rxe0-rxe0.
- rtt_half / one_way: through Python (Writer.put / Reader.get) between two
  processes; shm_rtt_half is the same Python path over shm, i.e. the cost of
  the interpreter, which TCG emulation inflates.
"""
import json
import os
import platform
import shutil
import statistics
import subprocess
import time

import pytest

import rdmaq
from children import start
from vhelpers import pong, stamped_reader

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ITERS = int(os.environ.get("RDMAQ_LAT_ITERS", "1000"))
SPIN_US = 1_000_000  # busy-poll for up to 1 s, like ib_write_lat


def _pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def _summary(ns):
    us = [x / 1000 for x in ns]
    return {"n": len(us), "min_us": round(min(us), 2), "p50_us": round(_pct(us, 50), 2),
            "p99_us": round(_pct(us, 99), 2), "max_us": round(max(us), 2),
            "mean_us": round(statistics.fmean(us), 2)}


def _record(results_dir, key, value):
    path = os.path.join(results_dir, "rdmaq-latency-rxe.json")
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        doc = {}
    doc.update({
        "what": "rdmaq verbs latency through Python (put/get), same host, emulated RDMA "
                "when the device is rxe; compare with perftest-rxe.json (ib_write_lat, C)",
        "host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
        "device": os.environ.get("RDMAQ_DEVICE") or "default",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    })
    doc[key] = value
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
    _write_txt(results_dir, doc)


def _write_txt(results_dir, doc):
    lines = [f"{'test':40s} {'bytes':>6s} {'min_us':>8s} {'p50_us':>8s} {'p99_us':>8s}"]
    for key in ("c_rtt_half_spin_64", "rtt_half_spin_64", "shm_rtt_half_spin_64", "one_way_spin_64",
                "one_way_block_64"):
        if key in doc:
            s = doc[key]
            lines.append(f"{'rdmaq ' + key:40s} {64:6d} {s['min_us']:8.2f} {s['p50_us']:8.2f} {s['p99_us']:8.2f}")
    try:
        with open(os.path.join(results_dir, "perftest-rxe.json")) as f:
            for r in json.load(f).get("results", []):
                lines.append(f"{r['test'] + ' ' + r['path']:40s} {r['bytes']:6d} {r['t_min_us']:8.2f} "
                             f"{r['t_typical_us']:8.2f} {r['p99_us']:8.2f}")
    except (OSError, ValueError, KeyError):
        lines.append("(no perftest-rxe.json: run tests/rxe/perftest-check.sh for ib_write_lat)")
    with open(os.path.join(results_dir, "rdmaq-latency-rxe.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


TESTS_C = os.path.join(ROOT, "tests", "c")
BUILD = os.path.join(ROOT, "build", "tests-c")


def _build_lat_pingpong(variant):
    """tests/c/lat_pingpong.c as built by tests/c/Makefile (kept between runs:
    gcc under TCG takes a minute)."""
    exe = os.path.join(BUILD, variant, "lat_pingpong")
    subprocess.run(["make", "-s", "--no-print-directory", "-C", TESTS_C, f"-j{os.cpu_count()}",
                    f"O={BUILD}", exe], check=True, timeout=900)
    return [os.path.join(TESTS_C, "run.sh"), variant, exe]


NO_GCC = "missing dependency: gcc and make, to build lat_pingpong.c"
# Limits of the C tests (scaled 5x in the VM, see tests/conftest.py): there a
# build takes about a minute and a sanitizer run up to two.
C_TEST_TIMEOUT = 160


@pytest.mark.timeout(C_TEST_TIMEOUT)
@pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("make")), reason=NO_GCC)
def test_c_round_trip_half_busy_polling(results_dir):
    cmd = _build_lat_pingpong("rel")
    r = subprocess.run([*cmd, str(ITERS), "64"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["n"] == ITERS and s["bytes"] == 64
    _record(results_dir, "c_rtt_half_spin_64", s)


# One record per message, and a message streamed through 5 slots.
@pytest.mark.timeout(C_TEST_TIMEOUT)
@pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("make")), reason=NO_GCC)
@pytest.mark.parametrize("size", [64, 20_000])
@pytest.mark.parametrize("kind", ["asan", "tsan"])
def test_c_verbs_core_under_sanitizer(kind, size):
    """The verbs C code (ctx, pool, writer, reader, ep), two threads, under
    ASan+UBSan (leaks included) and TSan (the race check); every echo is
    compared with the pattern sent (exit 2 on a mismatch)."""
    cmd = _build_lat_pingpong(kind)
    r = subprocess.run([*cmd, "300", str(size)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-6000:]
    s = json.loads(r.stdout)
    assert s["n"] == 300 and s["bytes"] == size


# over shm: the same Python path without RDMA, i.e. the interpreter's share
@pytest.mark.parametrize("over", ["verbs", "shm"])
def test_round_trip_half_busy_polling(over, procs, results, results_dir):
    """perftest's method: ping-pong, RTT/2, both sides spinning."""
    with rdmaq.Writer(1, transport=over, slot_bytes=4096, slots=64, spin_us=SPIN_US) as w:
        procs.append(start(pong, w.handle, results, SPIN_US, over))
        back = results.get(timeout=120)
        assert isinstance(back, rdmaq.Handle), back
        with rdmaq.Reader(back, 0, spin_us=SPIN_US) as r:
            w.wait_ready(timeout=300)
            r.wait_ready(timeout=300)
            msg = bytearray(64)
            rtts = []
            for i in range(ITERS + 100):
                msg[:8] = i.to_bytes(8, "little")
                t0 = time.perf_counter_ns()
                w.put(msg, timeout=60)
                got = r.get(timeout=60)
                t1 = time.perf_counter_ns()
                assert got == msg
                if i >= 100:  # warm-up
                    rtts.append((t1 - t0) / 2)
            w.put(b"stop", timeout=60)
    _record(results_dir, ("" if over == "verbs" else "shm_") + "rtt_half_spin_64", _summary(rtts))


def _one_way(procs, results, spin_us, gap_s):
    with rdmaq.Writer(1, transport="verbs", slot_bytes=4096, slots=64, spin_us=spin_us) as w:
        procs.append(start(stamped_reader, w.handle, ITERS, results, spin_us))
        w.wait_ready(timeout=300)
        for _ in range(ITERS):
            w.put(time.monotonic_ns().to_bytes(8, "little") + bytes(56), timeout=60)
            time.sleep(gap_s)
        kind, lat, stats = results.get(timeout=300)
    assert kind == "lat" and len(lat) == ITERS
    return _summary(lat), stats


def test_one_way_busy_polling(procs, results, results_dir):
    s, stats = _one_way(procs, results, SPIN_US, 0.0005)
    s["reader_sleeps"] = stats["sleeps"]
    _record(results_dir, "one_way_spin_64", s)


def test_one_way_blocking(procs, results, results_dir):
    """spin_us=0: every get sleeps on the completion channel; WRITE_WITH_IMM wakes it."""
    s, stats = _one_way(procs, results, 0, 0.002)
    assert stats["sleeps"] > 0  # it really blocked
    s["reader_sleeps"] = stats["sleeps"]
    _record(results_dir, "one_way_block_64", s)
