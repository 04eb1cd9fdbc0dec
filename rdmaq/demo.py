"""``rdmaq demo``: one writer broadcasting to N reader processes."""
from __future__ import annotations

import argparse
import hashlib
import multiprocessing as mp
import queue
import sys
import time
from collections.abc import Callable, Sequence
from multiprocessing.process import BaseProcess
from typing import Any

import rdmaq
from rdmaq.cli import ArgumentParser, fail
from rdmaq.handle import TRANSPORTS
from rdmaq.queue import DEFAULT_MAX_MESSAGE

PROG = "rdmaq demo"
DESCRIPTION = """\
One writer process broadcasts MESSAGES messages of SIZE bytes to READERS reader
processes; every reader checks that it got all of them, intact and in order
(a SHA-256 over the stream), and the rate and wait statistics are printed.

transport: shm (POSIX shared memory, this host), verbs (RDMA; needs an ACTIVE
RDMA port, see `rdmaq doctor`), auto (verbs where such a port exists, else shm).
Exit status: 0 every reader got every message, 1 the run failed, 2 bad arguments."""
READY_TIMEOUT_S = 60
RESULT_TIMEOUT_S = 120


def _int_in(lo: int, hi: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"must be {f'{lo}..{hi}' if hi is not None else f'>= {lo}'}, "
                                    f"got {v}")
        return v
    parse.__name__ = "integer"
    return parse


def message(i: int, size: int) -> bytes:
    """Message i: its index, repeated to `size` bytes."""
    return (i.to_bytes(8, "little") * (size // 8 + 1))[:size]


def _reader(handle: rdmaq.Handle, index: int, count: int, results: Any) -> None:
    try:
        with rdmaq.Reader(handle, index) as r:
            digest = hashlib.sha256()
            for _ in range(count):
                digest.update(r.get(timeout=RESULT_TIMEOUT_S))
            results.put((index, digest.hexdigest(), r.stats, None))
    except Exception as e:  # the parent reports it: one line, no traceback from a child
        results.put((index, None, None, f"{type(e).__name__}: {e}"))


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog=PROG, description=DESCRIPTION)
    p.add_argument("--readers", type=_int_in(1), default=4, help="reader processes")
    p.add_argument("--messages", type=_int_in(1), default=10000, help="messages to broadcast")
    p.add_argument("--size", type=_int_in(1, DEFAULT_MAX_MESSAGE), default=2048,
                   help="bytes per message")
    p.add_argument("--transport", default="auto", choices=["auto", *TRANSPORTS],
                   help="how the bytes travel")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    try:
        w = rdmaq.Writer(a.readers, transport=a.transport)
    except ValueError as e:  # an argument the queue refuses (e.g. too many readers)
        p.error(str(e))
    except (OSError, rdmaq.Error) as e:  # e.g. --transport verbs where no RDMA device exists
        return fail(PROG, f"cannot create a {a.transport} writer: {getattr(e, 'strerror', None) or e}")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_reader, args=(w.handle, i, a.messages, results), daemon=True)
             for i in range(a.readers)]
    try:
        with w:
            for proc in procs:
                proc.start()
            w.wait_ready(timeout=READY_TIMEOUT_S)
            return _broadcast(w, a, procs, results)
    except (OSError, rdmaq.Error) as e:  # TimeoutError and a dead reader included
        return fail(PROG, f"{type(e).__name__}: {e}")
    finally:
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _broadcast(w: rdmaq.Writer, a: argparse.Namespace, procs: Sequence[BaseProcess], results: Any) -> int:
    digest = hashlib.sha256()
    t0 = time.perf_counter()
    for i in range(a.messages):
        msg = message(i, a.size)
        digest.update(msg)
        w.put(msg, timeout=RESULT_TIMEOUT_S)
    got = []
    for _ in procs:
        try:
            got.append(results.get(timeout=RESULT_TIMEOUT_S))
        except queue.Empty:
            return fail(PROG, f"only {len(got)} of {len(procs)} readers reported within "
                              f"{RESULT_TIMEOUT_S} s")
    elapsed = time.perf_counter() - t0
    print(f"transport={w.transport} readers={a.readers} messages={a.messages} size={a.size} B")
    print(f"{a.messages / elapsed:,.0f} msg/s to every reader ({elapsed:.2f} s)")
    ok = True
    for index, hexd, stats, error in sorted(got, key=lambda g: g[0]):
        if error:
            ok = False
            print(f"reader {index}: FAILED: {error}")
            continue
        match = hexd == digest.hexdigest()
        ok &= match
        print(f"reader {index}: {'all messages intact and in order' if match else 'MISMATCH'}"
              f"  spins={stats['spins']} sleeps={stats['sleeps']}")
    print(f"writer: {w.stats}")
    if not ok:
        print(f"{PROG}: some readers did not get every message intact and in order",
              file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
