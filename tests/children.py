"""Bodies of the tests' child processes, run spawned as on a real TP deployment.

A child reports through ``out`` (a spawn-context queue); on failure it reports
the exception instead of dying silently, so the parent test fails with the reason.
"""
import hashlib
import multiprocessing as mp
import os
import resource
import signal
import time

import rdmaq

CTX = mp.get_context("spawn")
TIMEOUT = 120  # never reached when things work; generous for the emulated VM


def _idle():
    """Wait to be killed by the test; give up once the test process is gone
    (a test past its time limit ends pytest with os._exit, which kills no child)."""
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.5)


def report_and_stop(out, item):
    """Report, then stop (SIGSTOP) until the test kills this process.

    The stop is what the test waits for (observe.kill_stopped) before its
    SIGKILL: by then the report has fully left and the queue's feeder thread
    has released the write lock that every process of the queue shares.  A
    kill right after the parent read the report could strand that lock and
    hang every later report of the survivors.  A stopped process is alive to
    its peers' liveness checks, and reads nothing."""
    out.put(item)
    out.close()
    out.join_thread()
    os.kill(os.getpid(), signal.SIGSTOP)
    _idle()  # continued (SIGCONT): wait to be killed


def start(target, *args):
    p = CTX.Process(target=target, args=args, daemon=True)
    p.start()
    return p


def transport_stats(transport):
    """Process-wide counters of the transport (verbs: QP pools, doorbells)."""
    if transport != "verbs":
        return {}
    from rdmaq.transport import verbs
    return verbs.process_stats()


def checksum_reader(handle, index, count, out):
    """Receive `count` messages; check sequence numbers; report a digest."""
    try:
        with rdmaq.Reader(handle, index) as r:
            r.wait_ready(timeout=TIMEOUT)
            digest = hashlib.sha256()
            for expect in range(count):
                msg = r.get(timeout=TIMEOUT)
                seq = int.from_bytes(msg[:8], "little")
                if seq != expect:
                    out.put((index, "order", f"got message {seq}, expected {expect}"))
                    return
                digest.update(msg)
            out.put((index, "ok", digest.hexdigest(), r.stats, transport_stats(handle.transport)))
    except Exception as e:
        out.put((index, "error", repr(e)))


def stream_reader(handle, index, out):
    """Read until the writer closes or dies; report how many messages arrived."""
    try:
        with rdmaq.Reader(handle, index) as r:
            n = 0
            while True:
                try:
                    r.get(timeout=TIMEOUT)
                except rdmaq.PeerClosedError:
                    out.put((index, "closed", n))
                    return
                except rdmaq.PeerDeadError as e:
                    out.put((index, "dead", n, str(e)))
                    return
                n += 1
                if n == 1:
                    out.put((index, "started", n))
    except Exception as e:
        out.put((index, "error", repr(e)))


def sleepy_reader(handle, index, out):
    """Attach, then never read: the writer's ring fills up."""
    with rdmaq.Reader(handle, index) as r:
        r.wait_ready(timeout=TIMEOUT)
        report_and_stop(out, (index, "attached"))


def idle_reader(handle, index, seconds, out):
    """Block in get() with nothing to read; report CPU seconds spent waiting."""
    try:
        with rdmaq.Reader(handle, index) as r:
            r.wait_ready(timeout=TIMEOUT)
            before = resource.getrusage(resource.RUSAGE_SELF)
            try:
                r.get(timeout=seconds)
                out.put((index, "unexpected message"))
                return
            except TimeoutError:
                pass
            after = resource.getrusage(resource.RUSAGE_SELF)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            out.put((index, "idle", cpu, r.stats))
    except Exception as e:
        out.put((index, "error", repr(e)))


def doomed_writer(transport, n, out):
    """Write forever; the test kills this process."""
    w = rdmaq.Writer(n, transport=transport, slot_bytes=1024, slots=8)
    out.put(w.handle)
    w.wait_ready(timeout=TIMEOUT)
    while True:
        w.put(b"x" * 100)


def writer_of(transport, slot_bytes, slots, messages, out):
    """Hand out the handle, put ``messages``, then close once the reader has closed."""
    with rdmaq.Writer(1, transport=transport, slot_bytes=slot_bytes, slots=slots) as w:
        out.put(w.handle)
        w.wait_ready(timeout=TIMEOUT)
        for m in messages:
            w.put(m, timeout=TIMEOUT)
        out.put("sent")


def idle_writer(transport, out):
    """Create a queue, hand out its handle, then never serve it."""
    w = rdmaq.Writer(1, transport=transport)
    report_and_stop(out, w.handle)


def ready_writer(transport, messages, out):
    """Hand out the handle, wait for the reader, put ``messages``, then stop (the
    test kills it): a writer that dies with its queue open."""
    w = rdmaq.Writer(1, transport=transport, slot_bytes=1024, slots=8)
    out.put(w.handle)
    w.wait_ready(timeout=TIMEOUT)
    for m in messages:
        w.put(m, timeout=TIMEOUT)
    report_and_stop(out, "sent")


def attached_reader(handle, index, out):
    """Attach, say so, then never wait for ready nor read (the test kills it)."""
    r = rdmaq.Reader(handle, index)
    report_and_stop(out, (index, "attached", r.index))


SOAK_HEAD = 12  # u64 sequence number + u32 crc32 of the body


def soak_sizes(count, seed, big, big_bytes):
    """Body sizes: log-uniform over 1 B..64 KiB (vLLM-like: mostly small),
    plus ``big`` messages of ``big_bytes`` spread over the run."""
    import math
    import random

    rng = random.Random(seed)
    top = math.log(64 * 1024)
    sizes = [int(math.exp(rng.uniform(0, top))) for _ in range(count)]
    for k in range(big):
        sizes[(k + 1) * count // (big + 1)] = big_bytes + k
    return sizes


def soak_reader(handle, index, count, seed, big, big_bytes, out):
    """Check every message: its number (lost, duplicated, reordered), its
    length and its crc32 (corrupted); then that the writer closed cleanly."""
    import struct
    import zlib

    try:
        sizes = soak_sizes(count, seed, big, big_bytes)
        with rdmaq.Reader(handle, index) as r:
            r.wait_ready(timeout=TIMEOUT)
            digest = hashlib.sha256()
            for expect in range(count):
                msg = r.get(timeout=TIMEOUT)
                seq, crc = struct.unpack_from("<QI", msg)
                if seq != expect:
                    out.put((index, "order", f"got message {seq}, expected {expect}"))
                    return
                body = memoryview(msg)[SOAK_HEAD:]
                if len(body) != sizes[seq]:
                    out.put((index, "length", f"message {seq}: {len(body)} bytes, sent {sizes[seq]}"))
                    return
                if zlib.crc32(body) != crc:
                    out.put((index, "corrupt", f"message {seq} ({len(body)} bytes): crc mismatch"))
                    return
                digest.update(msg)
            try:
                extra = r.get(timeout=TIMEOUT)
                out.put((index, "extra", f"a message after the last one: {bytes(extra[:16])!r}"))
                return
            except rdmaq.PeerClosedError:
                pass
            out.put((index, "ok", digest.hexdigest(), r.stats))
    except Exception as e:
        out.put((index, "error", repr(e)))
