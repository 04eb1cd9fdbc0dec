"""Objects through the vLLM adapter under a storm of SIGINTs, checked for loss,
duplicates and content (tests/signal_storm.py's storm, through RdmaqMessageQueue).

A writer process enqueues numbered objects, retrying each whose enqueue raised (an
enqueue that raises delivered nothing); a reader process waits for them as vLLM's
EngineCore does, with ``spin_until_readable`` and ``readable``, and takes each with
``dequeue``, retrying whichever call raised.  The handler raises only while an rdmaq
call is on the stack (the adapter's frames included); one that lands in this script's
own code, after a call returned, is counted and dropped (signal_storm.py says why).

    python adapter_storm.py --objects N [--runs R] [--seed S] [--gap-us G]

prints one JSON line per run: objects, lost, duplicated, corrupted, and the signals
sent and raised in each process.  Needs vLLM importable.
"""
import argparse
import json
import multiprocessing as mp
import os
import random
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from signal_storm import MEAN_GAP_US, SMALL, Storm, payload, tally  # noqa: E402

END = "END"
CALL_TIMEOUT_S = 120  # never reached when things work
PUT_TIMEOUT_S = 2  # then the writer checks that the reader still runs, and enqueues again
SPIN_S = 0.05  # spin_until_readable's deadline, from each call


def _mq():
    from rdmaq.vllm.queue import RdmaqMessageQueue

    return RdmaqMessageQueue


def _shutdown(mq):
    """Shut down; a KeyboardInterrupt held from the last call is raised by the close."""
    try:
        mq.shutdown()
    except KeyboardInterrupt:
        pass


def _next_object(r):
    """One object, waiting as vLLM's EngineCore polls its response queues; a call that
    raised KeyboardInterrupt is made again (nothing else: it took nothing)."""
    while True:
        try:
            r.spin_until_readable([], time.monotonic() + SPIN_S)
            if r.readable():
                return r.dequeue(timeout=CALL_TIMEOUT_S)
        except KeyboardInterrupt:
            pass


def reader_main(handle, seed, gap_s, out):
    report = {"lost": 0, "duplicated": 0, "corrupted": 0, "got": 0}
    try:
        r = _mq().create_from_handle(handle, 0)
        r.wait_until_ready()
        expected = 0
        with Storm(seed, gap_s) as storm:
            while True:
                m = _next_object(r)
                if m == END:
                    break
                expected = tally(report, expected, m, bytes)
        report["expected_next"] = expected
        report["reader_signals"] = storm.counts()
        _shutdown(r)
    except BaseException:  # noqa: BLE001 - reported to the parent
        report["error"] = traceback.format_exc()[-3000:]
    out.put(report)


def _enqueue(w, obj, reader):
    """Enqueue ``obj`` until an enqueue returns (True), or until the reader has ended
    (False: it failed, and reports why)."""
    while True:
        try:
            w.enqueue(obj, timeout=PUT_TIMEOUT_S)
            return True
        except KeyboardInterrupt:
            pass
        except TimeoutError:
            if not reader.is_alive():
                return False


def one_run(n, seed, gap_s):
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    rng = random.Random(seed)
    w = _mq()(1, 1, max_chunk_bytes=1 << 16, max_chunks=8)
    reader = ctx.Process(target=reader_main, args=(w.export_handle(), seed + 1, gap_s, out),
                         daemon=True)
    reader.start()
    w.wait_until_ready()
    with Storm(seed, gap_s) as storm:
        for seq in range(n):
            if not _enqueue(w, payload(seq, rng.randrange(*SMALL)), reader):
                break
        else:
            _enqueue(w, END, reader)
    report = out.get(timeout=CALL_TIMEOUT_S)
    reader.join(CALL_TIMEOUT_S)
    _shutdown(w)
    report["lost"] += n - report.pop("expected_next", 0)
    report.update(objects=n, writer_signals=storm.counts())
    return report


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, required=True)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--gap-us", type=float, default=MEAN_GAP_US, help="mean gap between signals")
    args = ap.parse_args()
    for i in range(args.runs):
        print(json.dumps(one_run(args.objects, args.seed + 10 * i, args.gap_us / 1e6)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
