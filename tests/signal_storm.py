"""Messages under a storm of SIGINTs, checked for loss, duplicates and content.

A writer process puts numbered messages, retrying each whose put raised (the
README: a put that raises delivered nothing); a reader process gets them.  In
each process a thread sends the main thread SIGINT at random moments, and
Python's handler raises KeyboardInterrupt wherever the main thread is inside an
rdmaq call: blocked, copying, or between its steps.  The reader checks that
every message arrived once, in order, whole.

The handler raises only while an rdmaq call is on the stack.  A signal that
lands in the caller's own code, after a call returned, raises there in a real
program; no library can take that back, and a retry loop cannot tell it from
an exception of the call, so here it is counted and dropped.

    python signal_storm.py --sizes small|large|mixed --messages N [--runs R] [--gap-us G]

prints one JSON line per run: messages, lost, duplicated, corrupted, and how
many signals were sent and raised in each process.
"""
import argparse
import json
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import time
import traceback

import rdmaq

RDMAQ_DIR = os.path.dirname(os.path.abspath(rdmaq.__file__)) + os.sep
SMALL = (16, 4096)
LARGE = (256 * 1024 + 1, 1 << 20)  # above the reader's one-call scratch (SCRATCH_BYTES)
END = b"END"
CALL_TIMEOUT_S = 120  # never reached when things work
PUT_TIMEOUT_S = 2  # then the writer checks that the reader still runs, and puts again
MEAN_GAP_US = 200  # between signals: several per large message, one per few small ones


def payload(seq, size):
    """Message ``seq`` of ``size`` bytes (>= 16): its number and size, then its number repeated."""
    head = seq.to_bytes(8, "little") + size.to_bytes(8, "little")
    return head + (seq.to_bytes(8, "little") * ((size - 16) // 8 + 1))[:size - 16]


def tally(report, expected, m, kind):
    """Count message ``m`` (of type ``kind``, else corrupted) in ``report``: got, and
    corrupted, duplicated or the messages lost before it, against ``expected``, the next
    sequence number due.  Returns the next one due."""
    report["got"] += 1
    seq = int.from_bytes(m[:8], "little") if isinstance(m, kind) else -1
    if seq < 0 or len(m) < 16 or m != payload(seq, len(m)):
        report["corrupted"] += 1
        return expected
    if seq < expected:
        report["duplicated"] += 1
        return expected
    report["lost"] += seq - expected
    return seq + 1


def _size(rng, sizes):
    if sizes == "mixed":
        sizes = rng.choice(["small", "small", "large"])
    lo, hi = SMALL if sizes == "small" else LARGE
    return rng.randrange(lo, hi)


# Sends SIGINT to a process at random moments until SIGTERM, then prints how many.
KILLER = """
import os, random, signal, sys, time
pid, seed, gap_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
rng, sent = random.Random(seed), 0
print("ready", flush=True)
try:
    while True:
        time.sleep(rng.expovariate(1 / gap_s))
        os.kill(pid, signal.SIGINT)
        sent += 1
finally:
    print(sent, flush=True)
"""


class Storm:
    """SIGINT to this process at random moments, from a process of its own (a thread
    would send only when this one lets go of the GIL).  Other threads must block
    SIGINT, so that it interrupts the main thread."""

    def __init__(self, seed, gap_s):
        self.args = [sys.executable, "-c", KILLER, str(os.getpid()), str(seed), str(gap_s)]
        self.sent = self.raised = self.outside = 0

    def handler(self, signum, frame):
        f = frame
        while f is not None:
            if f.f_code.co_filename.startswith(RDMAQ_DIR):
                self.raised += 1
                raise KeyboardInterrupt
            f = f.f_back
        self.outside += 1  # in this script's own code, after a call returned: see the docstring

    def __enter__(self):
        signal.signal(signal.SIGINT, self.handler)
        self.killer = subprocess.Popen(self.args, stdout=subprocess.PIPE, text=True)
        assert self.killer.stdout.readline() == "ready\n"  # its SIGTERM handler is set
        return self

    def __exit__(self, *exc):
        self.killer.terminate()
        self.sent = int(self.killer.communicate()[0])  # it prints when SIGTERM ends it
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the killer has ended: none is on its way

    def counts(self):
        return {"sent": self.sent, "raised": self.raised, "outside": self.outside}


def _retry(call):
    """Call until it returns, as the README says a caller does after a KeyboardInterrupt."""
    while True:
        try:
            return call()
        except KeyboardInterrupt:
            pass


def reader_main(handle, seed, gap_s, out):
    report = {"lost": 0, "duplicated": 0, "corrupted": 0, "got": 0}
    try:
        r = rdmaq.Reader(handle, 0)
        r.wait_ready(timeout=CALL_TIMEOUT_S)
        expected = 0
        with Storm(seed, gap_s) as storm:
            while True:
                try:
                    m = r.get(timeout=CALL_TIMEOUT_S)
                except KeyboardInterrupt:
                    continue
                if m == END:
                    break
                expected = tally(report, expected, m, bytearray)
        report["expected_next"] = expected
        report["reader_signals"] = storm.counts()
        _retry(r.close)
    except BaseException:  # noqa: BLE001 - reported to the parent
        report["error"] = traceback.format_exc()[-3000:]
    out.put(report)


def _put(w, m, reader):
    """Put ``m`` until a put returns (True), or until the reader has ended (False:
    it failed, and reports why)."""
    while True:
        try:
            w.put(m, timeout=PUT_TIMEOUT_S)
            return True
        except KeyboardInterrupt:
            pass
        except TimeoutError:
            if not reader.is_alive():
                return False


def one_run(sizes, n, seed, gap_s):
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    rng = random.Random(seed)
    w = rdmaq.Writer(1, transport="shm")
    reader = ctx.Process(target=reader_main, args=(w.handle, seed + 1, gap_s, out), daemon=True)
    reader.start()
    w.wait_ready(timeout=CALL_TIMEOUT_S)
    with Storm(seed, gap_s) as storm:
        for seq in range(n):
            if not _put(w, payload(seq, _size(rng, sizes)), reader):
                break
        else:
            _put(w, END, reader)
    report = out.get(timeout=CALL_TIMEOUT_S)
    reader.join(CALL_TIMEOUT_S)
    _retry(w.close)
    report["lost"] += n - report.pop("expected_next", 0)
    report.update(sizes=sizes, messages=n, writer_signals=storm.counts())
    return report


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", choices=["small", "large", "mixed"], required=True)
    ap.add_argument("--messages", type=int, required=True)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--gap-us", type=float, default=MEAN_GAP_US, help="mean gap between signals")
    args = ap.parse_args()
    for i in range(args.runs):
        print(json.dumps(one_run(args.sizes, args.messages, args.seed + 10 * i, args.gap_us / 1e6)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
