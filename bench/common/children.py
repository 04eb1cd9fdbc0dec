"""A benchmark's child processes, both sides: what a child does to be pinned, stopped quietly
and to report its failure, and how the parent waits for a message from each of its children
(``expect``), failing the cell on an error, a death or a timeout."""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from multiprocessing.connection import wait as mp_wait

from rdmaq import settings


def pin(cpus) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)


def _stop(signum, frame) -> None:
    raise SystemExit(128 + signum)  # multiprocessing ends a child on SystemExit without a word


def stop_quietly() -> None:
    """A child's SIGTERM (Ctrl-C in the parent, a failed cell) unwinds it: its queue closes on
    the way out, leaving nothing in /dev/shm. SIGINT never reaches it (quiet_spawn_context)."""
    signal.signal(signal.SIGTERM, _stop)


def send_failure(conn) -> None:
    """Report the exception to the parent in one line (the traceback with RDMAQ_TRACEBACK=1)."""
    e = sys.exc_info()[1]
    if isinstance(e, SystemExit):  # stopped by the parent: nothing to report
        raise e
    text = f"{type(e).__name__}: {e}"
    if settings.stripped("RDMAQ_TRACEBACK") == "1":
        text = traceback.format_exc()
        sys.stderr.write(text)
    try:
        conn.send(("error", text))
    except Exception:
        pass
    sys.exit(1)



class CellError(RuntimeError):
    pass


class Peer:
    def __init__(self, name, process, conn):
        self.name, self.process, self.conn = name, process, conn
        self.pid = None


def expect(peers, tag, timeout):
    """Wait for message `tag` from every peer; raise CellError on error, death or timeout."""
    deadline = time.monotonic() + timeout
    got = {}
    pending = {p.conn: p for p in peers}
    sentinels = {p.process.sentinel: p for p in peers}
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            names = ", ".join(p.name for p in pending.values())
            raise CellError(f"timed out after {timeout:.0f} s waiting for {tag!r} from {names}")
        ready = mp_wait(list(pending) + [s for s, p in sentinels.items() if p.conn in pending],
                        timeout=left)
        for obj in ready:
            if obj in pending:
                p = pending[obj]
                try:
                    msg = p.conn.recv()
                except EOFError:
                    raise CellError(f"{p.name} closed its pipe (exit code {p.process.exitcode})") from None
                if msg[0] == "error":
                    raise CellError(f"{p.name} failed:\n{msg[1]}")
                if msg[0] != tag:
                    raise CellError(f"{p.name}: expected {tag!r}, got {msg[0]!r}")
                got[p.name] = msg
                del pending[obj]
            elif obj in sentinels:
                p = sentinels[obj]
                if p.conn in pending and not p.conn.poll():
                    p.process.join(0.1)
                    raise CellError(f"{p.name} (pid {p.process.pid}) died, exit code "
                                    f"{p.process.exitcode}, while the parent waited for {tag!r}")
    return [got[p.name] for p in peers]
