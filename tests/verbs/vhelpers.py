"""Bodies of the verbs-only tests' child processes (the shared ones: tests/children.py),
and building the tests' C helpers."""
import glob
import hashlib
import os
import subprocess
import threading
import time

import rdmaq
from rdmaq.transport import verbs
from rdmaq.transport.verbs import device

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(HERE, "..", "..", "csrc")


def build_c(name, srcs, cflags=("-O2",), libs=("-libverbs", "-lpthread"), shared=False):
    """Compile once per source version and flags (gcc under TCG takes a minute)."""
    srcs = list(srcs)
    h = hashlib.sha1(" ".join([*cflags, *libs, str(shared)]).encode())
    for f in sorted(srcs + glob.glob(os.path.join(CSRC, "*.h"))):
        with open(f, "rb") as fh:
            h.update(fh.read())
    out = os.path.join(HERE, "..", "..", "build", "verbs-tests")
    exe = os.path.join(out, f"{name}-{h.hexdigest()[:12]}" + (".so" if shared else ""))
    if not os.path.exists(exe):
        os.makedirs(out, exist_ok=True)
        subprocess.run(["gcc", *cflags, *(["-shared", "-fPIC"] if shared else []), "-Wall", "-Wextra",
                        "-I", CSRC, "-o", exe + ".tmp", *srcs, *libs], check=True, timeout=900)
        os.replace(exe + ".tmp", exe)
    return exe


def threaded_readers(handle, indexes, count, out):
    """Several readers of one queue as threads of one process: one QP pool."""
    before = verbs.process_stats()
    digests, errs = {}, []

    def run(i):
        try:
            with rdmaq.Reader(handle, i) as r:
                r.wait_ready(timeout=120)
                d = hashlib.sha256()
                for _ in range(count):
                    d.update(r.get(timeout=120))
                digests[i] = d.hexdigest()
        except Exception as e:
            errs.append(f"reader {i}: {e!r}")

    ts = [threading.Thread(target=run, args=(i,)) for i in indexes]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
    out.put(("threads", errs, digests, before, verbs.process_stats()))


def pool_peer(commands, out):
    """Attach reader 0 of each queue the parent sends, keeping all open.

    Reports, per queue, the attach time (Reader() to wait_ready() done) and
    this process's verbs counters, then echoes messages: one get per queue.
    """
    readers = []
    try:
        # Open the device and zmq first: the timings compare QP pools only.
        device.open_context()
        import zmq

        zmq.Context.instance()
        out.put(("up",))
        while True:
            handle = commands.get(timeout=300)
            if handle is None:
                break
            t0 = time.perf_counter()
            r = rdmaq.Reader(handle, 0)
            r.wait_ready(timeout=120)
            setup = time.perf_counter() - t0
            readers.append(r)
            out.put(("attached", setup, verbs.process_stats()))
            for q in readers:  # every queue still works
                out.put(("got", bytes(q.get(timeout=120))))
    except Exception as e:
        out.put(("error", repr(e)))
    finally:
        for r in readers:
            r.close()


def pong(handle, out, spin_us, transport="verbs"):
    """Latency peer: read queue A, echo every message on queue B."""
    try:
        with rdmaq.Reader(handle, 0, spin_us=spin_us) as r, \
                rdmaq.Writer(1, transport=transport, slot_bytes=4096, slots=64, spin_us=spin_us) as w:
            out.put(w.handle)
            r.wait_ready(timeout=120)
            w.wait_ready(timeout=120)
            while True:
                msg = r.get(timeout=300)
                if msg == b"stop":
                    break
                w.put(msg, timeout=60)
    except Exception as e:
        out.put(("error", repr(e)))


def stamped_reader(handle, count, out, spin_us):
    """One-way latency: the writer stamps CLOCK_MONOTONIC, we subtract."""
    try:
        with rdmaq.Reader(handle, 0, spin_us=spin_us) as r:
            r.wait_ready(timeout=120)
            lat = []
            for _ in range(count):
                msg = r.get(timeout=120)
                lat.append(time.monotonic_ns() - int.from_bytes(msg[:8], "little"))
            out.put(("lat", lat, r.stats))
    except Exception as e:
        out.put(("error", repr(e)))
