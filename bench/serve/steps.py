"""The queue's share of a step, from the stamps bench/serve/steptime.py records in the server.

vLLM's CPU executor runs every engine step as synchronous RPCs (async scheduling is off on
CPU): the EngineCore broadcasts ``(method, args, kwargs, output_rank)`` to the TP workers over
one MessageQueue and waits on the workers' response queues. For message ``i`` of a queue, with
``w0`` the writer's entry into ``enqueue`` and ``r0``/``r1`` a reader's entry into and return
from ``dequeue``, the queue's delay is ``r1 - max(w0, r0)``: from the later of "sent" and
"asked for" to "the reader has the object", so serialization, the copy, the wake-up and
deserialization, and not the time a worker spends computing. A broadcast's delay is the
maximum over its readers (the step waits for the slowest worker).

Per RPC, as the EngineCore sees it: the round trip runs from its broadcast's ``w0`` to the
return of its last response ``dequeue``; the queue's part is the broadcast delay plus the
response delays. ``queue_share`` is the sum of the queue's parts over the sum of round trips in
the measured window. That pairing holds where the EngineCore waits for each RPC's responses
before it sends the next (vLLM's CPU executor). With asynchronous scheduling (vLLM on a GPU)
the EngineCore sends step N+1 before it takes step N's output, and each step is two RPCs
(``execute_model``, ``sample_tokens``): there ``queue_share_of_steps`` is the measure, the sum
of every broadcast's and response's queue delay between the first and the last
``execute_model`` of the window over that time, i.e. the queue's time per step over the step's
time (an upper bound of its part of the critical path: some of it overlaps GPU work).

Who waited: ``*_waited_share`` is the share of a queue kind's messages whose reader asked for
them before the writer began to send (``r0 < w0``: the reader waited, and rdmaq's wake-up, or
vLLM's spin, was on the path); the others were queued or in flight when asked for, and their
delay is the reader's own ``dequeue`` (copy and unpickle). ``thread_deltas`` and
``ring_deltas`` take two flushes' cumulative per-thread scheduler statistics and rdmaq counters
(bench/serve/steptime.py) apart: where each thread that used a queue spent the run (on a CPU, waiting
for one) and how each rdmaq endpoint's waits ended.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .server import role_of


def load_generation(directory: Path, gen: int) -> list[dict]:
    out = []
    for p in sorted(Path(directory).glob(f"g{gen}-*.json")):
        with open(p) as f:
            out.append(json.load(f))
    return out


def registered_pids(directory: Path) -> list[int]:
    return sorted(int(p.name[4:]) for p in Path(directory).glob("pid-*") if p.name[4:].isdigit())


def _pct(a, qs=(50, 90, 99)) -> dict:
    if len(a) == 0:
        return {f"p{q}": None for q in qs} | {"mean": None}
    a = np.asarray(a, dtype=float)
    return {f"p{q}": float(np.percentile(a, q)) for q in qs} | {"mean": float(a.mean())}


def _queues(files: list[dict]) -> dict[str, dict]:
    """key -> {"writer": endpoint or None, "readers": [endpoints]}, endpoints as numpy arrays."""
    qs: dict[str, dict] = {}
    for f in files:
        proc = role_of(f.get("title", ""), False)
        tags = f.get("tags", [])
        for q in f["queues"]:
            ep = {"pid": f["pid"], "proc": proc, "offset": q["offset"],
                  "t0": np.asarray(q["t0"], dtype=np.int64), "t1": np.asarray(q["t1"], dtype=np.int64),
                  "tag": [tags[t] if t < len(tags) else "?" for t in q["tag"]],
                  "n_reader": q.get("n_reader"), "rank": q.get("rank")}
            slot = qs.setdefault(q["key"], {"writer": None, "readers": []})
            if q["role"] == "writer":
                slot["writer"] = ep
            else:
                slot["readers"].append(ep)
    return qs


def _kind(q: dict) -> str:
    w, rs = q["writer"], q["readers"]
    if w is None or not rs:
        return "unmatched"
    if w["proc"] == "engine_core" and all(r["proc"].startswith("worker") for r in rs):
        return "broadcast"
    if w["proc"].startswith("worker") and all(r["proc"] == "engine_core" for r in rs):
        return "response"
    return "other"


def _matched(q: dict, t_start: int, t_end: int):
    """Messages whose enqueue began in [t_start, t_end] and every reader has: (w0, w1, delay,
    tags, per-reader r0, r1), delay = max over readers of r1 - max(w0, r0)."""
    w, rs = q["writer"], q["readers"]
    lo = max([w["offset"]] + [r["offset"] for r in rs])
    hi = min([w["offset"] + len(w["t0"])] + [r["offset"] + len(r["t0"]) for r in rs])
    if hi <= lo:
        return None
    ws = slice(lo - w["offset"], hi - w["offset"])
    w0, w1 = w["t0"][ws], w["t1"][ws]
    r0s = [r["t0"][lo - r["offset"]:hi - r["offset"]] for r in rs]
    r1s = [r["t1"][lo - r["offset"]:hi - r["offset"]] for r in rs]
    delay = np.max([r1 - np.maximum(w0, r0) for r0, r1 in zip(r0s, r1s)], axis=0)
    keep = (w0 >= t_start) & (w0 <= t_end)
    tags = [t for t, k in zip(w["tag"][ws], keep) if k]
    return w0[keep], w1[keep], delay[keep], tags, [r0[keep] for r0 in r0s], [r1[keep] for r1 in r1s]


def analyze(files: list[dict], t_start: int, t_end: int) -> dict:
    """Queue delays, RPC round trips and the queue's share, for enqueues in [t_start, t_end] (ns)."""
    qs = _queues(files)
    kinds = {k: _kind(q) for k, q in qs.items()}
    out: dict[str, Any] = {
        "queues": {kind: sum(1 for v in kinds.values() if v == kind) for kind in set(kinds.values())},
        "messages": {}, "unmatched_endpoints": sum(1 for v in kinds.values() if v == "unmatched")}
    bc = []        # (w0, delay, tag) of broadcasts
    resp = []      # (r0 at the EngineCore, r1, delay) of responses
    enq_us = []
    other_delays = []
    waited: dict[str, list] = {"broadcast": [], "response": []}  # (reader asked first, delay)
    for key, q in qs.items():
        kind = kinds[key]
        if kind == "unmatched":
            continue
        m = _matched(q, t_start, t_end)
        if m is None:
            continue
        w0, w1, delay, tags, r0s, r1s = m
        out["messages"][kind] = out["messages"].get(kind, 0) + len(w0)
        if kind in waited:
            first = np.any([r0 < w0 for r0 in r0s], axis=0)
            waited[kind] += list(zip(first.tolist(), delay.tolist()))
        if kind == "broadcast":
            bc += list(zip(w0.tolist(), delay.tolist(), tags))
            enq_us += ((w1 - w0) / 1e3).tolist()
        elif kind == "response":
            resp += list(zip(r0s[0].tolist(), r1s[0].tolist(), delay.tolist()))
        else:
            other_delays += delay.tolist()
    bc.sort()
    resp.sort()
    out["broadcast_delay_us"] = _pct([d / 1e3 for _, d, _ in bc])
    out["response_delay_us"] = _pct([d / 1e3 for _, _, d in resp])
    out["other_delay_us"] = _pct([d / 1e3 for d in other_delays])
    out["broadcast_enqueue_us"] = _pct(enq_us)
    for kind, pairs in waited.items():
        out[f"{kind}_waited_share"] = (sum(f for f, _ in pairs) / len(pairs)) if pairs else None
        out[f"{kind}_delay_waited_us"] = _pct([d / 1e3 for f, d in pairs if f])
        out[f"{kind}_delay_queued_us"] = _pct([d / 1e3 for f, d in pairs if not f])
    # each response belongs to the last broadcast sent before the EngineCore asked for it
    starts = np.asarray([b[0] for b in bc], dtype=np.int64)
    rpc_end: dict[int, int] = {}
    rpc_q: dict[int, int] = {}
    for r0, r1, d in resp:
        i = int(np.searchsorted(starts, r0, side="right")) - 1
        if i < 0:
            continue
        rpc_end[i] = max(rpc_end.get(i, r1), r1)
        rpc_q[i] = rpc_q.get(i, 0) + d
    trips: list[int] = []
    qparts: list[float] = []
    methods: dict[str, int] = {}
    for i, end in rpc_end.items():
        w0, d, tag = bc[i]
        trips.append(end - w0)
        qparts.append(d + rpc_q[i])
        methods[tag] = methods.get(tag, 0) + 1
    out["rpcs"] = len(trips)
    out["rpc_methods"] = methods
    out["rpc_round_trip_ms"] = _pct([t / 1e6 for t in trips])
    out["queue_per_rpc_us"] = _pct([q / 1e3 for q in qparts])
    out["queue_share"] = (float(sum(qparts)) / float(sum(trips))) if trips and sum(trips) > 0 else None
    steps = [w0 for w0, _, tag in bc if tag == "execute_model"]
    out["steps"] = len(steps)
    out["queue_share_of_steps"] = None
    if len(steps) > 1:
        lo, hi = steps[0], steps[-1]
        q_in = (sum(d for w0, d, _ in bc if lo <= w0 < hi)
                + sum(d for r0, _, d in resp if lo <= r0 < hi))
        out["queue_share_of_steps"] = float(q_in) / float(hi - lo)
    out["step_interval_ms"] = _pct(np.diff(steps) / 1e6) if len(steps) > 1 else _pct([])
    return out


THREAD_FIELDS = ("cpu_ns", "runq_ns", "slices", "vol", "invol")


def _endpoint_labels(files: list[dict]) -> dict[tuple[int, int], list[str]]:
    """(pid, tid) -> what the thread did with the queues, e.g. ['broadcast reader']."""
    kinds = {key: _kind(q) for key, q in _queues(files).items()}
    out: dict[tuple[int, int], list[str]] = {}
    for f in files:
        for q in f["queues"]:
            label = f"{kinds.get(q['key'], 'unmatched')} {q['role']}"
            for tid in q.get("tids", []):
                labels = out.setdefault((f["pid"], int(tid)), [])
                if label not in labels:
                    labels.append(label)
    return out


def thread_deltas(base: list[dict], files: list[dict], others: int = 2) -> list[dict]:
    """Per thread, what happened between two flushes (``base`` before the run, ``files``
    after): CPU and run-queue time in ms, timeslices, voluntary and forced context switches.
    Every thread that used a queue, and the ``others`` busiest other threads of each process."""
    before = {f["pid"]: f.get("threads") or {} for f in base}
    labels = _endpoint_labels(files)
    out = []
    for f in files:
        prev = before.get(f["pid"])
        if prev is None:
            continue
        proc = role_of(f.get("title", ""), False)
        rows = []
        for tid, now in (f.get("threads") or {}).items():
            was = prev.get(tid)
            if was is None:
                continue
            row: dict[str, Any] = {"proc": proc, "pid": f["pid"], "tid": int(tid),
                                   "name": now.get("name"),
                                   "uses": labels.get((f["pid"], int(tid)), [])}
            for k in THREAD_FIELDS:
                if k in now and k in was:
                    d = now[k] - was[k]
                    row[k.replace("_ns", "_ms")] = round(d / 1e6, 3) if k.endswith("_ns") else d
            rows.append(row)
        used = [r for r in rows if r["uses"]]
        rest = sorted((r for r in rows if not r["uses"]), key=lambda r: -r.get("cpu_ms", 0))
        out += used + rest[:others]
    return out


def ring_deltas(base: list[dict], files: list[dict]) -> list[dict]:
    """Per rdmaq endpoint, its counters' change between two flushes (vLLM's queue has none)."""
    kinds = {key: _kind(q) for key, q in _queues(files).items()}
    before = {(f["pid"], q["key"], q["role"]): q.get("ring") for f in base for q in f["queues"]}
    out = []
    for f in files:
        for q in f["queues"]:
            now, was = q.get("ring"), before.get((f["pid"], q["key"], q["role"]))
            if not now or not was:
                continue
            out.append({"proc": role_of(f.get("title", ""), False), "pid": f["pid"],
                        "endpoint": f"{kinds.get(q['key'], 'unmatched')} {q['role']}",
                        **{k: now[k] - was.get(k, 0) for k in now}})
    return out
