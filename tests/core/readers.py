"""Reader bodies run in spawned processes (importable by the child)."""
import hashlib
import resource
import time

import rdmaq


def checksum_reader(handle, index, count, out):
    """Receive `count` messages; check sequence numbers; report a digest."""
    try:
        with rdmaq.Reader(handle, index) as r:
            r.wait_ready(timeout=60)
            digest = hashlib.sha256()
            for expect in range(count):
                msg = r.get(timeout=60)
                seq = int.from_bytes(msg[:8], "little")
                if seq != expect:
                    out.put((index, "order", f"got message {seq}, expected {expect}"))
                    return
                digest.update(msg)
            out.put((index, "ok", digest.hexdigest(), r.stats))
    except Exception as e:  # report, so the parent test fails with the reason
        out.put((index, "error", repr(e)))


def stream_reader(handle, index, out):
    """Read until the writer closes; report how many messages arrived."""
    try:
        with rdmaq.Reader(handle, index) as r:
            n = 0
            while True:
                try:
                    r.get(timeout=60)
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
        r.wait_ready(timeout=60)
        out.put((index, "attached"))
        time.sleep(3600)


def idle_reader(handle, index, seconds, out):
    """Block in get() with nothing to read; report CPU seconds spent waiting."""
    with rdmaq.Reader(handle, index) as r:
        r.wait_ready(timeout=60)
        before = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.monotonic()
        try:
            r.get(timeout=seconds)
            out.put((index, "unexpected message"))
            return
        except TimeoutError:
            pass
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        out.put((index, "idle", cpu, time.monotonic() - t0, r.stats))


def object_reader(handle, index, count, out):
    with rdmaq.Reader(handle, index) as r:
        objs = [r.recv(timeout=60) for _ in range(count)]
        out.put((index, objs))
