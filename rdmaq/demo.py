"""``rdmaq demo``: one writer broadcasting to N reader processes."""
from __future__ import annotations

import argparse
import hashlib
import queue
import sys
import time
from collections.abc import Sequence
from multiprocessing.process import BaseProcess
from typing import Any

import rdmaq
from rdmaq.command import ArgumentParser, bounded, fail, parse_size, quiet_spawn_context
from rdmaq.handle import MAX_READERS, TRANSPORTS
from rdmaq.queue import DEFAULT_MAX_MESSAGE, DEFAULT_SLOT_BYTES, DEFAULT_SLOTS

PROG = "rdmaq demo"
DESCRIPTION = f"""\
One writer process broadcasts MESSAGES messages of SIZE bytes to READERS reader
processes; every reader checks that it got all of them, intact and in order
(a SHA-256 over the stream), and the rate and wait statistics are printed.
Sizes take K, M and G (powers of 1024): --size 2K.

transport: shm (POSIX shared memory, this host), verbs (RDMA; needs an ACTIVE
RDMA port, see `rdmaq doctor`), auto (verbs where such a port exists, else shm).
The ring holds SLOTS x SLOT_BYTES (default {DEFAULT_SLOTS} x {DEFAULT_SLOT_BYTES // 1024} KiB; over shm
in /dev/shm): fewer or smaller slots where /dev/shm is small.
Exit status: 0 every reader got every message, 1 the run failed, 2 bad arguments,
130 interrupted."""
READY_TIMEOUT_S = 60
RESULT_TIMEOUT_S = 120
PROGRESS_EVERY_S = 1.0


def _slot_bytes(text: str) -> int:
    n = bounded(parse_size, 128, 1 << 30)(text)
    if n % 64:
        raise argparse.ArgumentTypeError(f"must be a multiple of 64, got {n}")
    return n


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
    p.add_argument("--readers", type=bounded(int, 1, MAX_READERS), default=4,
                   help=f"reader processes, 1..{MAX_READERS}")
    p.add_argument("--messages", type=bounded(int, 1), default=10000, help="messages to broadcast")
    p.add_argument("--size", type=bounded(parse_size, 1, DEFAULT_MAX_MESSAGE), default=2048,
                   help="bytes per message, e.g. 64, 2K, 1M")
    p.add_argument("--slots", type=bounded(int, 2, 1 << 24), default=DEFAULT_SLOTS,
                   help="ring slots")
    p.add_argument("--slot-bytes", type=_slot_bytes, default=DEFAULT_SLOT_BYTES,
                   help="bytes per slot, a multiple of 64 (longer messages span slots)")
    p.add_argument("--transport", default="auto", choices=["auto", *TRANSPORTS],
                   help="how the bytes travel")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    try:
        w = rdmaq.Writer(a.readers, transport=a.transport, slots=a.slots, slot_bytes=a.slot_bytes)
    except rdmaq.SharedMemoryFullError as e:
        return fail(PROG, f"cannot create the writer: {e} (here: --slots, --slot-bytes)")
    except (OSError, rdmaq.Error) as e:  # e.g. --transport verbs where no RDMA device exists
        return fail(PROG, f"cannot create the writer (--transport {a.transport}): "
                          f"{getattr(e, 'strerror', None) or e}")
    ctx = quiet_spawn_context()
    results = ctx.Queue()
    procs = [ctx.Process(target=_reader, args=(w.handle, i, a.messages, results), daemon=True)
             for i in range(a.readers)]
    try:
        with w:
            for proc in procs:
                proc.start()
            w.wait_ready(timeout=READY_TIMEOUT_S)
            print(f"transport={w.transport} readers={a.readers} messages={a.messages} size={a.size} B "
                  f"ring={a.slots} x {a.slot_bytes} B")
            return _broadcast(w, a, procs, results)
    except BrokenPipeError:
        raise  # stdout closed (`| head -1`): rdmaq/cli.py ends the command quietly
    except (OSError, rdmaq.Error) as e:  # TimeoutError and a dead reader included
        return fail(PROG, f"{type(e).__name__}: {e}")
    finally:
        for proc in procs:
            if proc.pid is None:  # never started (interrupted before)
                continue
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _broadcast(w: rdmaq.Writer, a: argparse.Namespace, procs: Sequence[BaseProcess], results: Any) -> int:
    digest = hashlib.sha256()
    t0 = next_progress = time.perf_counter()
    next_progress += PROGRESS_EVERY_S
    for i in range(a.messages):
        msg = message(i, a.size)
        digest.update(msg)
        w.put(msg, timeout=RESULT_TIMEOUT_S)
        if i & 255 == 255 and time.perf_counter() >= next_progress:
            print(f"sent {i + 1:,} of {a.messages:,} messages")
            next_progress += PROGRESS_EVERY_S
    got = []
    for _ in procs:
        try:
            got.append(results.get(timeout=RESULT_TIMEOUT_S))
        except queue.Empty:
            return fail(PROG, f"only {len(got)} of {len(procs)} readers reported within "
                              f"{RESULT_TIMEOUT_S} s")
    elapsed = time.perf_counter() - t0
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
