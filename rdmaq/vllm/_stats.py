"""Per-queue counters, and an opt-in record of them for proving who carried what.

With ``RDMAQ_VLLM_STATS_DIR=<dir>`` every rdmaq MessageQueue endpoint keeps
``<dir>/rdmaq-stats-<pid>-<n>.json`` up to date: role, pid, process title, our
message/byte counts and the rdmaq ring's own stats.  The file is rewritten
(atomically) by a daemon thread every ``RDMAQ_VLLM_STATS_INTERVAL`` seconds
(default 1) while messages flow, and at ``shutdown()`` and process exit.  The periodic
rewrite matters: ``vllm serve`` SIGKILLs its EngineCore on shutdown, so an
at-exit record alone would lose the busiest process's numbers.

Without the variable nothing is written, no thread runs, and counting costs
two additions.
"""

from __future__ import annotations

import atexit
import itertools
import json
import logging
import multiprocessing
import multiprocessing.util
import os
import sys
import threading
import time
import weakref
from typing import Any

from .. import settings

logger = logging.getLogger("vllm.rdmaq")

ENV_DIR = "RDMAQ_VLLM_STATS_DIR"
ENV_INTERVAL = "RDMAQ_VLLM_STATS_INTERVAL"

_live: weakref.WeakSet[Any] = weakref.WeakSet()  # the MessageQueues of this process
_lock = threading.Lock()
_hooks_pid: int | None = None
_ids = itertools.count()


def _interval() -> float:
    raw = settings.stripped(ENV_INTERVAL) or "1"  # blank: unset
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise ValueError(f"{ENV_INTERVAL} must be a number of seconds, not {raw!r}") from None


class QueueStats:
    def __init__(self, mq: Any, role: str, **info: Any) -> None:
        self.role = role
        self.info = info
        self.messages = 0
        self.bytes = 0
        self._mq = weakref.ref(mq)
        self._dir = settings.stripped(ENV_DIR)
        self._path = None
        self._flushed = -1
        self._final_done = False
        if self._dir:
            self._path = os.path.join(
                self._dir, f"rdmaq-stats-{os.getpid()}-{next(_ids)}.json"
            )

    def count(self, nbytes: int) -> None:
        self.messages += 1
        self.bytes += nbytes

    def dirty(self) -> bool:
        return self._path is not None and self.messages != self._flushed

    def flush(self, final: bool = False) -> None:
        """Rewrite this endpoint's stats file (no-op unless enabled)."""
        mq = self._mq()
        if self._path is None or mq is None or self._final_done:
            return
        if getattr(mq, "_pid", None) != os.getpid():
            return  # inherited through fork: not this process's traffic
        self._flushed = self.messages
        self._final_done = final
        with mq._close_lock:  # the ring must not be closed under our feet
            line = snapshot(mq)
        line["final"] = final
        assert self._dir is not None  # a _path lies in it
        try:
            os.makedirs(self._dir, exist_ok=True)
            tmp = f"{self._path}.tmp"
            with open(tmp, "w") as f:
                json.dump(line, f, default=str)
            os.replace(tmp, self._path)
        except OSError as e:
            logger.warning("rdmaq: cannot write queue stats to %s: %s", self._dir, e)
            self._path = None
            return
        if final:
            logger.info(
                "rdmaq MessageQueue %s stats: %d messages, %d bytes (%s)",
                self.role,
                self.messages,
                self.bytes,
                line["title"],
            )


def _process_title() -> str:
    try:
        import setproctitle

        title: str = setproctitle.getproctitle()
        return title
    except Exception:
        return " ".join(sys.argv[:2])


def snapshot(mq: Any) -> dict[str, Any]:
    st: QueueStats = mq._stats
    ring = None
    for ep in (getattr(mq, "_writer", None), getattr(mq, "_reader", None)):
        if ep is not None:
            try:
                ring = dict(ep.stats)
            except Exception as e:  # a closed endpoint may refuse
                ring = {"error": str(e)}
    return {
        "role": st.role,
        "pid": os.getpid(),
        "process": multiprocessing.current_process().name,
        "title": _process_title(),
        "messages": st.messages,
        "bytes": st.bytes,
        "ring": ring,
        "time": time.time(),
        **st.info,
    }


def track(mq: Any) -> None:
    """Remember ``mq``: a daemon thread rewrites its stats file while messages
    flow, and exit hooks write the final numbers."""
    global _hooks_pid
    if not settings.stripped(ENV_DIR):
        return
    with _lock:
        _live.add(mq)
        if _hooks_pid != os.getpid():  # first queue here (or in a forked child)
            _hooks_pid = os.getpid()
            atexit.register(_flush_all)
            # multiprocessing children leave through os._exit(), which skips
            # atexit but runs these finalizers.
            multiprocessing.util.Finalize(None, _flush_all, exitpriority=100)
            threading.Thread(
                target=_flusher, args=(_interval(),), name="rdmaq-stats", daemon=True
            ).start()


def _flusher(interval: float) -> None:
    pid = os.getpid()
    while os.getpid() == pid:
        time.sleep(max(interval, 0.05))
        for mq in list(_live):
            st = getattr(mq, "_stats", None)
            if st is not None and st.dirty():
                st.flush()
            del mq


def final(mq: Any) -> None:
    st = getattr(mq, "_stats", None)
    if st is not None:
        st.flush(final=True)


def _flush_all() -> None:
    for mq in list(_live):
        final(mq)
