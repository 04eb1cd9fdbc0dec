"""Time every MessageQueue enqueue and dequeue in a vLLM server, whichever queue class it uses.

For ``rdmaq bench serve``, switched on by rdmaq's vLLM plugin (rdmaq/vllm/plugin.py), which
imports this module only where ``RDMAQ_BENCH_STEPTIME_DIR=<dir>`` is set (the harness sets it
for its servers): it wraps ``enqueue``, ``dequeue`` and
``create_from_handle`` of vLLM's ``MessageQueue`` and of rdmaq's subclass, in every process
vLLM starts. Each call leaves two CLOCK_MONOTONIC stamps (entry, return) and a tag (the RPC
method name of a broadcast, or ``response``); the same wrapper times both queues, so the
comparison is fair. Without the variable nothing is wrapped.

The records stay in memory: on a flush request (the harness writes a generation number to
``<dir>/request``) each process writes what it recorded since its last flush to
``<dir>/g<gen>-<pid>.json``. Writing only on request keeps file I/O out of the measured runs,
and periodic polling, not exit hooks, is needed because ``vllm serve`` SIGKILLs its
EngineCore. Queues are matched across processes by a hash of their handle; message ``i`` of
a queue is the ``i``-th enqueue of its writer and the ``i``-th dequeue of each reader (FIFO).

Each flush also says who waited where: every thread of the process with its scheduler
statistics (/proc/self/task/TID/schedstat: time on a CPU, time runnable but waiting for one,
timeslices; context switches, voluntary and forced), the Python name of each, which threads
called each queue endpoint, and an rdmaq endpoint's own counters (spins, sleeps, wake-ups...).
All cumulative: the harness takes differences between flushes.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import threading
import time
import weakref
from array import array
from typing import Any

ENV_DIR = "RDMAQ_BENCH_STEPTIME_DIR"
REQUEST = "request"
POLL_S = 0.25

_mono = time.monotonic_ns
_tls = threading.local()
# a forked child's thread is another thread: its id is looked up again
os.register_at_fork(after_in_child=lambda: vars(_tls).pop("tid", None))
_lock = threading.Lock()
_records: list[_Record] = []
_tags: dict[str, int] = {}
_state: dict[str, Any] = {"dir": None, "pid": None}


def handle_key(handle) -> str:
    """The same string for a writer's handle and the copy its readers unpickled."""
    return hashlib.sha1(pickle.dumps(handle, protocol=4)).hexdigest()[:16]


def _tag(obj, default: str) -> int:
    name = default
    if isinstance(obj, tuple) and obj:
        head = obj[0]
        if isinstance(head, str):
            name = head
        elif isinstance(head, bytes):
            name = "pickled-callable"
    code = _tags.get(name)
    if code is None:
        with _lock:
            code = _tags.setdefault(name, len(_tags))
    return code


class _Record:
    """One queue endpoint in this process: entry/return stamps and tags, in call order."""

    def __init__(self, key: str, role: str, mq=None, **info):
        self.key, self.role, self.info = key, role, info
        self.pid = os.getpid()
        self.t0, self.t1, self.tag = array("q"), array("q"), array("H")
        self.flushed = 0  # index of the first record not yet written
        self.tids: set[int] = set()  # the threads that called this endpoint
        self.mq = weakref.ref(mq) if mq is not None else None

    def add(self, t0: int, t1: int, tag: int) -> None:
        self.t0.append(t0)
        self.t1.append(t1)
        self.tag.append(tag)  # last: a reader of len(tag) sees t0/t1 complete
        tid = getattr(_tls, "tid", None)
        if tid is None:
            tid = _tls.tid = threading.get_native_id()
        self.tids.add(tid)

    def take(self) -> dict:
        n = len(self.tag)
        lo = self.flushed
        self.flushed = n
        out = {"key": self.key, "role": self.role, **self.info, "offset": lo,
               "t0": self.t0[lo:n].tolist(), "t1": self.t1[lo:n].tolist(),
               "tag": self.tag[lo:n].tolist(), "tids": sorted(self.tids)}
        ring = _ring_counters(self.mq() if self.mq is not None else None)
        if ring is not None:
            out["ring"] = ring
        return out


def _ring_counters(mq) -> dict | None:
    """An rdmaq endpoint's cumulative counters (None for vLLM's queue)."""
    snap = getattr(mq, "rdmaq_stats", None)
    if snap is None or not getattr(mq, "_rdmaq", False):
        return None
    try:
        with mq._close_lock:  # the ring must not be closed under our feet
            ring = snap().get("ring")
    except Exception:
        return None
    return {k: v for k, v in ring.items() if isinstance(v, int)} if isinstance(ring, dict) else None


def thread_stats() -> dict[str, dict]:
    """Every thread of this process: {tid: {name, cpu_ns, runq_ns, slices, vol, invol}},
    cumulative (schedstat: on a CPU, runnable and waiting, timeslices; status: voluntary and
    forced context switches). A field the kernel does not offer is left out."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, dict] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        row: dict = {"name": names.get(int(tid))}
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                cpu, runq, slices = (int(x) for x in f.read().split()[:3])
            row |= {"cpu_ns": cpu, "runq_ns": runq, "slices": slices}
        except (OSError, ValueError):
            pass
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        row["vol"] = int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches:"):
                        row["invol"] = int(line.split()[1])
        except (OSError, ValueError):
            pass
        out[tid] = row
    return out


def _register(rec: _Record) -> None:
    with _lock:
        _records.append(rec)
        if _state["pid"] != os.getpid():  # first queue in this process (or a forked child)
            _state["pid"] = os.getpid()
            _write_atomic(os.path.join(_state["dir"], f"pid-{os.getpid()}"),
                          json.dumps({"pid": os.getpid(), "title": _title(),
                                      "spinloop": _spinloop_enabled()}))
            threading.Thread(target=_poll, name="rdmaq-bench-steptime", daemon=True).start()


def _record_of(mq, role: str) -> _Record:
    rec = mq.__dict__.get("_steptime_rec")
    if rec is None or rec.pid != os.getpid():
        if role == "writer":
            info = {"n_reader": getattr(mq, "n_local_reader", 0) + getattr(mq, "n_remote_reader", 0)}
            key = handle_key(mq.handle)
        else:
            info = {"rank": mq.__dict__.get("_steptime_rank")}
            key = mq.__dict__.get("_steptime_key") or "unknown"
        rec = _Record(key, role, mq, **info)
        mq.__dict__["_steptime_rec"] = rec
        _register(rec)
    return rec


def _wrap_enqueue(orig):
    def enqueue(self, obj, *args, **kwargs):
        if getattr(_tls, "inside", False):  # rdmaq's class falling back to vLLM's: count once
            return orig(self, obj, *args, **kwargs)
        _tls.inside = True
        t0 = _mono()
        try:
            out = orig(self, obj, *args, **kwargs)
        finally:
            _tls.inside = False
        t1 = _mono()
        _record_of(self, "writer").add(t0, t1, _tag(obj, "response"))
        return out

    enqueue.__wrapped__ = orig  # type: ignore[attr-defined]
    return enqueue


def _wrap_dequeue(orig):
    def dequeue(self, *args, **kwargs):
        if getattr(_tls, "inside", False):
            return orig(self, *args, **kwargs)
        _tls.inside = True
        t0 = _mono()
        try:
            obj = orig(self, *args, **kwargs)
        finally:
            _tls.inside = False
        t1 = _mono()
        _record_of(self, "reader").add(t0, t1, _tag(obj, "response"))
        return obj

    dequeue.__wrapped__ = orig  # type: ignore[attr-defined]
    return dequeue


def _wrap_create_from_handle(orig):
    def create_from_handle(handle, rank):
        mq = orig(handle, rank)
        mq.__dict__["_steptime_key"] = handle_key(handle)
        mq.__dict__["_steptime_rank"] = rank
        _record_of(mq, "reader")  # register now, before any traffic
        return mq

    create_from_handle.__wrapped__ = orig  # type: ignore[attr-defined]
    return create_from_handle


def _wrap_class(cls) -> None:
    own = cls.__dict__
    if own.get("_steptime_wrapped"):
        return
    if "enqueue" in own:
        cls.enqueue = _wrap_enqueue(own["enqueue"])
    if "dequeue" in own:
        cls.dequeue = _wrap_dequeue(own["dequeue"])
    if "create_from_handle" in own:
        cls.create_from_handle = staticmethod(_wrap_create_from_handle(own["create_from_handle"].__func__))
    cls._steptime_wrapped = True


def _spinloop_enabled() -> bool | None:
    """Whether vLLM's shm queue spins in its C extension in this process (VLLM_USE_SPINLOOP_EXT=1
    and the extension loaded; a vLLM without the option: None)."""
    try:
        from vllm.distributed.device_communicators import shm_broadcast

        return getattr(shm_broadcast, "SPINLOOP_EXT_ENABLED", None)
    except Exception:
        return None


def _title() -> str:
    try:
        import setproctitle

        return setproctitle.getproctitle()
    except Exception:
        import sys

        return " ".join(sys.argv[:2])


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def flush(gen: int) -> None:
    with _lock:
        recs = list(_records)
    pid = os.getpid()
    queues = [r.take() for r in recs if r.pid == pid]
    tags = {code: name for name, code in list(_tags.items())}
    _write_atomic(os.path.join(_state["dir"], f"g{gen}-{pid}.json"),
                  json.dumps({"pid": pid, "title": _title(), "gen": gen, "queues": queues,
                              "tags": [tags.get(i, "?") for i in range(len(tags))],
                              "threads": thread_stats()}))


def _poll() -> None:
    pid, done = os.getpid(), 0
    path = os.path.join(_state["dir"], REQUEST)
    while os.getpid() == pid:
        time.sleep(POLL_S)
        try:
            with open(path) as f:
                gen = int(f.read().strip() or 0)
        except (OSError, ValueError):
            continue
        if gen > done:
            try:
                flush(gen)
            except OSError:
                pass
            done = gen


def install(directory: str) -> None:
    """Wrap vLLM's MessageQueue and rdmaq's subclass (when importable) in this process."""
    _state["dir"] = directory
    os.makedirs(directory, exist_ok=True)
    from vllm.distributed.device_communicators import shm_broadcast

    # the original class, even if the rdmaq plugin swapped the module attribute already
    base = getattr(shm_broadcast, "_rdmaq_original_MessageQueue", shm_broadcast.MessageQueue)
    classes = [base]
    try:
        from rdmaq.vllm.queue import RdmaqMessageQueue

        classes.append(RdmaqMessageQueue)
    except Exception:  # rdmaq's adapter unusable here: vLLM's queue is all there is
        pass
    for cls in classes:
        _wrap_class(cls)


def register() -> None:
    """vLLM general-plugin hook: a no-op unless RDMAQ_BENCH_STEPTIME_DIR is set."""
    directory = os.environ.get(ENV_DIR)
    if not directory:
        return
    try:
        install(directory)
    except Exception:
        import logging

        logging.getLogger("vllm.rdmaq.bench").exception("rdmaq bench step timing not installed")
