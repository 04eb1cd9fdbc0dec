"""``rdmaq demo``: one writer broadcasting to N reader processes."""
import argparse
import hashlib
import multiprocessing as mp
import time

import rdmaq


def _reader(handle, index, count, results):
    with rdmaq.Reader(handle, index) as r:
        digest = hashlib.sha256()
        for _ in range(count):
            digest.update(r.get())
        results.put((index, digest.hexdigest(), r.stats))


def main(argv=None):
    p = argparse.ArgumentParser(prog="rdmaq demo", description=__doc__)
    p.add_argument("--readers", type=int, default=4)
    p.add_argument("--messages", type=int, default=10000)
    p.add_argument("--size", type=int, default=2048, help="bytes per message")
    p.add_argument("--transport", default="auto", choices=["auto", "shm", "verbs"])
    a = p.parse_args(argv)
    ctx = mp.get_context("spawn")
    with rdmaq.Writer(a.readers, transport=a.transport) as w:
        results = ctx.Queue()
        procs = [ctx.Process(target=_reader, args=(w.handle, i, a.messages, results))
                 for i in range(a.readers)]
        for proc in procs:
            proc.start()
        w.wait_ready(timeout=60)
        digest = hashlib.sha256()
        t0 = time.perf_counter()
        for i in range(a.messages):
            msg = i.to_bytes(8, "little") * (a.size // 8)
            digest.update(msg)
            w.put(msg)
        got = [results.get(timeout=120) for _ in procs]
        elapsed = time.perf_counter() - t0
        for proc in procs:
            proc.join()
        print(f"transport={w.transport} readers={a.readers} messages={a.messages} size={a.size} B")
        print(f"{a.messages / elapsed:,.0f} msg/s to every reader ({elapsed:.2f} s)")
        ok = True
        for index, hexd, stats in sorted(got):
            match = hexd == digest.hexdigest()
            ok &= match
            print(f"reader {index}: {'all messages intact and in order' if match else 'MISMATCH'}"
                  f"  spins={stats['spins']} sleeps={stats['sleeps']}")
        print(f"writer: {w.stats}")
    return 0 if ok else 1
