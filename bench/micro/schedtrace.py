"""Scheduler trace of a benchmark sub-run, read against its per-message stamps.

``rdmaq bench --sched-trace DIR`` records the kernel's ``sched_waking``,
``sched_wakeup``, ``sched_switch`` and ``sched_migrate_task`` events on every
CPU while each sub-run runs, in a tracefs instance of its own (its own bounded
buffer; the global trace and other users' instances are left alone), with the
``mono`` trace clock: CLOCK_MONOTONIC, the clock of the benchmark's stamps. The
instance is removed after the run, on an error or on Ctrl-C alike.

For every measured message the slowest reader's scheduling between the
writer's publish stamp (``--stages``; else the send stamp) and the reader's
return from the receive call is cut into intervals: *asleep* (until the
wake-up is issued), *waking* (issued, not yet queued on a CPU), *runq*
(runnable on a CPU that runs something else: who, for how long), *run* (on a
CPU). The summary contrasts the slowest 1 % of messages with all of them and
tells, message by message, where the slowest ones lost their time. Only
tracefs text is parsed: no perf, no BPF.
"""

from __future__ import annotations

import bisect
import glob
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

EVENTS = ("sched_waking", "sched_wakeup", "sched_switch", "sched_migrate_task")
ROOTS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
INSTANCE_PREFIX = "rdmaq-bench-"
DEFAULT_BUFFER_KB = 4096  # per CPU
DETAIL = 6                # slow messages told one by one, per sub-run
EXCERPT_LINES = 120       # raw trace lines kept around each of the worst messages


def tracefs_root() -> str | None:
    for root in ROOTS:
        if os.path.isdir(os.path.join(root, "instances")):
            return root
    return None


def unavailable() -> str | None:
    """None when a trace can be taken here, else why not."""
    root = tracefs_root()
    if root is None:
        return ("no tracefs (as root: mount -t tracefs nodev /sys/kernel/tracing)"
                if os.geteuid() == 0 else "tracing needs root (and a mounted tracefs)")
    if not os.access(os.path.join(root, "instances"), os.W_OK):
        return f"{root}/instances is not writable (tracing needs root)"
    missing = [e for e in EVENTS if not os.path.isdir(os.path.join(root, "events", "sched", e))]
    if missing:
        return f"the kernel has no {', '.join(missing)} event(s)"
    return None


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Tracer:
    """A tracefs instance recording the scheduler events; one sub-run at a time.

    start() clears the buffer and turns tracing on, stop() turns it off and returns
    the text; close() turns everything off and removes the instance (also after an
    error: use it as a context manager)."""

    def __init__(self, buffer_kb: int = DEFAULT_BUFFER_KB):
        root = tracefs_root()
        why = unavailable()
        if why or root is None:
            raise RuntimeError(f"cannot trace the scheduler: {why}")
        self._remove_stale(root)
        self.path = os.path.join(root, "instances", f"{INSTANCE_PREFIX}{os.getpid()}")
        self.buffer_kb = buffer_kb
        if os.path.isdir(self.path):
            os.rmdir(self.path)
        os.mkdir(self.path)
        try:
            self._write("tracing_on", "0")
            self._write("trace_clock", "mono")
            self._write("buffer_size_kb", str(buffer_kb))
            self._write("options/irq-info", "0")  # one column less to parse
            for e in EVENTS:
                self._write(f"events/sched/{e}/enable", "1")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _remove_stale(root: str) -> None:
        """Instances left by a benchmark that was killed (its pid is gone)."""
        for d in glob.glob(os.path.join(root, "instances", INSTANCE_PREFIX + "*")):
            pid = d.rsplit("-", 1)[-1]
            if pid.isdigit() and not _pid_alive(int(pid)):
                try:
                    os.rmdir(d)
                except OSError:
                    pass

    def _write(self, name: str, value: str) -> None:
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def start(self) -> None:
        self._write("trace", "")  # clears every CPU's buffer
        self._write("tracing_on", "1")

    def stop(self) -> tuple[str, dict]:
        """Tracing off; the trace text and the buffer's counters (lost events)."""
        self._write("tracing_on", "0")
        with open(os.path.join(self.path, "trace")) as f:
            text = f.read()
        lost = {"overrun": 0, "dropped": 0, "entries": 0}
        for stats in glob.glob(os.path.join(self.path, "per_cpu", "cpu*", "stats")):
            for line in (_read(stats) or "").splitlines():
                k, _, v = line.partition(":")
                key = {"overrun": "overrun", "dropped events": "dropped", "entries": "entries"}.get(k.strip())
                if key and v.strip().isdigit():
                    lost[key] += int(v)
        self._write("trace", "")
        return text, lost

    def close(self) -> None:
        if not getattr(self, "path", None) or not os.path.isdir(self.path):
            return
        for name, value in [("tracing_on", "0")] + [(f"events/sched/{e}/enable", "0") for e in EVENTS] \
                + [("trace", "")]:
            try:
                self._write(name, value)
            except OSError:
                pass
        try:
            os.rmdir(self.path)
        except OSError:
            pass

    def __enter__(self) -> Tracer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---- parsing -----------------------------------------------------------------------------------

@dataclass
class Trace:
    """The parsed events: per task, what happened to it; per CPU, what it ran."""

    n_events: int = 0
    comm: dict = field(default_factory=dict)                     # pid -> last comm seen
    # pid -> sorted [(t, kind, a, b)]: ("waking", waker_cpu, waker_pid), ("wakeup", target_cpu, 0),
    # ("in", cpu, prev_pid), ("out", cpu, prev_state), ("migrate", orig, dest)
    task: dict = field(default_factory=lambda: defaultdict(list))
    # cpu -> sorted [(t, prev_pid, prev_state, next_pid)]
    cpu: dict = field(default_factory=lambda: defaultdict(list))
    lines: list = field(default_factory=list)                    # (t, raw line), for excerpts
    t_first: int = 0
    t_last: int = 0


def _fields(part: str, n: int) -> list[str]:
    """The last n space-separated key=value fields' values (a comm may hold spaces)."""
    return [f.partition("=")[2] for f in part.rsplit(" ", n)[1:]]


def parse(text: str, keep_lines: bool = True) -> Trace:
    """tracefs text (irq-info off) into a Trace.  Plain string splitting: a sub-run under
    16 hogs is a few hundred thousand lines."""
    tr = Trace()
    task, cpus, comm, lines = tr.task, tr.cpu, tr.comm, tr.lines
    for raw in text.splitlines():
        if not raw or raw[0] == "#":
            continue
        head, _, tail = raw.partition("] ")
        who, _, cpu_s = head.rpartition("[")
        ts, _, tail = tail.partition(": ")
        ev, _, rest = tail.partition(": ")
        try:
            sec, _, usec = ts.strip().rpartition(" ")[2].partition(".")
            t = int(sec) * 1_000_000_000 + int(usec.ljust(6, "0")[:6]) * 1000
            cpu = int(cpu_s)
            cur_comm, _, cur_s = who.strip().rpartition("-")
            cur = int(cur_s)
            if ev == "sched_switch":
                prev, _, nxt = rest.partition(" ==> ")
                pc = prev.rsplit(" ", 3)[0].partition("=")[2]
                pp, _prio, ps = _fields(prev, 3)
                nc = nxt.rsplit(" ", 2)[0].partition("=")[2]
                np_, _nprio = _fields(nxt, 2)
                pp_i, np_i = int(pp), int(np_)
                comm[pp_i], comm[np_i] = pc, nc
                task[pp_i].append((t, "out", cpu, ps))
                task[np_i].append((t, "in", cpu, pp_i))
                cpus[cpu].append((t, pp_i, ps, np_i))
            elif ev == "sched_waking" or ev == "sched_wakeup":
                c = rest.rsplit(" ", 3)[0].partition("=")[2]
                pid_s, _prio, target = _fields(rest, 3)
                pid = int(pid_s)
                comm[pid] = c
                if ev == "sched_waking":
                    task[pid].append((t, "waking", cpu, cur))
                else:
                    task[pid].append((t, "wakeup", int(target), 0))
            elif ev == "sched_migrate_task":
                pid_s, _prio, orig, dest = _fields(rest, 4)
                task[int(pid_s)].append((t, "migrate", int(orig), int(dest)))
            else:
                continue
        except ValueError:
            continue  # a line of another shape (a lost-events marker...)
        comm.setdefault(cur, cur_comm)
        tr.n_events += 1
        if not tr.t_first:
            tr.t_first = t
        tr.t_last = t
        if keep_lines:
            lines.append((t, raw.strip()))
    # the per-CPU buffers are merged by time already; keep the order stable for equal stamps
    for lst in task.values():
        lst.sort(key=lambda e: e[0])
    for lst in cpus.values():
        lst.sort(key=lambda e: e[0])
    return tr


# ---- one message's path --------------------------------------------------------------------------

STATES = ("asleep", "waking", "runq", "run")


@dataclass
class Path:
    """Where one reader spent [t0, t1] for one message, and what delayed it."""

    t0: int
    t1: int
    start_state: str
    start_cpu: int | None
    time: dict                        # state -> ns
    waking: tuple | None = None       # (t, waker_cpu, waker_pid)
    wakeup: tuple | None = None       # (t, target_cpu)
    first_run: tuple | None = None    # (t, cpu)
    holders: list = field(default_factory=list)   # (cpu, pid, ns, state it left in) while runq
    preempted: int = 0                # times switched out runnable after first running
    migrations: list = field(default_factory=list)  # (t, orig, dest)
    last_cpu: int | None = None       # the CPU it ran on before t0
    slept: int | None = None          # ns from going to sleep to the wake-up being issued
    holder_since: int | None = None   # ns the woken-on CPU's task had been running at the wake-up


def _running_since(tr: Trace, cpu: int, t: int) -> int | None:
    """How long the task on `cpu` at time t had been running then (ns), if the trace knows."""
    sw = tr.cpu.get(cpu, [])
    i = bisect.bisect_right(sw, t, key=lambda e: e[0])
    return t - sw[i - 1][0] if i else None


def _state_at(events: list, t0: int) -> tuple[str, int | None, int | None, int]:
    """State at t0 from the last event before it: (state, cpu, last cpu it ran on, index of next)."""
    i = bisect.bisect_right(events, t0, key=lambda e: e[0])
    state, cpu, last_cpu = "run", None, None  # no event: it ran all along (or before the trace)
    for j in range(i - 1, -1, -1):
        t, kind, a, b = events[j]
        if kind == "in":
            state, cpu = "run", a
        elif kind == "out":
            state, cpu = ("runq", a) if b.startswith("R") else ("asleep", None)
        elif kind == "wakeup":
            state, cpu = "runq", a
        elif kind == "waking":
            state, cpu = "waking", None
        else:
            continue
        break
    for j in range(i - 1, -1, -1):
        if events[j][1] in ("in", "out"):
            last_cpu = events[j][2]
            break
    return state, cpu, last_cpu, i


def _holders(tr: Trace, cpu: int, a: int, b: int, skip: int) -> list:
    """Who ran on `cpu` during [a, b]: [(pid, ns, state it was switched out in, or None)]."""
    sw = tr.cpu.get(cpu, [])
    i = bisect.bisect_right(sw, a, key=lambda e: e[0])
    cur = sw[i - 1][3] if i else None
    t = a
    out: dict = {}
    left: dict = {}
    while i < len(sw) and sw[i][0] <= b:
        ts, prev, pstate, nxt = sw[i]
        if cur is None:
            cur = prev
        if cur != skip:
            out[cur] = out.get(cur, 0) + ts - t
            left[cur] = pstate
        cur, t = nxt, ts
        i += 1
    if cur is not None and cur != skip and b > t:
        out[cur] = out.get(cur, 0) + b - t
    return [(p, ns, left.get(p)) for p, ns in sorted(out.items(), key=lambda kv: -kv[1])]


def follow(tr: Trace, pid: int, t0: int, t1: int) -> Path:
    """The reader `pid`'s states from t0 (publish) to t1 (the receive call returned)."""
    ev = tr.task.get(pid, [])
    state, cpu, last_cpu, i = _state_at(ev, t0)
    p = Path(t0=t0, t1=t1, start_state=state, start_cpu=cpu, time=dict.fromkeys(STATES, 0),
             last_cpu=last_cpu)
    t = t0
    running_once = state == "run"

    def close_interval(until):
        nonlocal t
        if until <= t:
            return
        p.time[state] += until - t
        if state == "runq" and cpu is not None:
            for h in _holders(tr, cpu, t, until, pid):
                p.holders.append((cpu,) + h)
        t = until

    while i < len(ev) and ev[i][0] <= t1:
        ts, kind, a, b = ev[i]
        i += 1
        if kind == "migrate":
            p.migrations.append((ts, a, b))
            if state == "runq":
                close_interval(ts)
                cpu = b
            continue
        close_interval(ts)
        if kind == "waking":
            if p.waking is None:
                p.waking = (ts, a, b)
                j = i - 2  # the event before this one
                while j >= 0 and ev[j][1] != "out":
                    j -= 1
                if j >= 0 and not ev[j][3].startswith("R"):
                    p.slept = ts - ev[j][0]
            if state == "asleep":
                state = "waking"
        elif kind == "wakeup":
            if p.wakeup is None:
                p.wakeup = (ts, a)
                p.holder_since = _running_since(tr, a, ts)
            state, cpu = "runq", a
        elif kind == "in":
            if p.first_run is None and not running_once:
                p.first_run = (ts, a)
            running_once = True
            state, cpu = "run", a
        elif kind == "out":
            if b.startswith("R"):
                p.preempted += 1
                state = "runq"
                cpu = a
            else:
                state, cpu = "asleep", None
    close_interval(t1)
    return p


# ---- a sub-run's report ------------------------------------------------------------------------

def _roles(pids: dict) -> dict:
    """pid -> short role name (writer, r0.., hog, tok) from the runner's pid map."""
    out = {}
    for role, v in pids.items():
        if role == "readers":
            out.update({p: f"r{i}" for i, p in enumerate(v)})
        elif role == "hogs":
            out.update({p: "hog" for p in v})
        elif v:
            out[v] = role
    return out


def _who(tr: Trace, roles: dict, pid: int) -> str:
    if pid == 0:
        return "idle"
    r = roles.get(pid)
    comm = tr.comm.get(pid, "?")
    return f"{r}:{pid}" if r else f"{comm}:{pid}"


def _q(values, qs=(50, 99)) -> list:
    if not len(values):
        return [None for _ in qs]
    return [round(float(v) / 1e3, 1) for v in np.percentile(np.asarray(values, dtype=np.float64), qs)]


def _arr(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype=np.int64) if b else np.zeros(0, dtype=np.int64)


def analyze_subrun(text: str, lost: dict, wres: dict, rres: list, pids: dict) -> dict:
    """The trace of one sub-run against its messages: JSON-ready summary, its text and excerpts."""
    tr = parse(text)
    roles = _roles(pids)
    readers = pids["readers"]
    send = [_arr(r["send_t"]) for r in rres]
    recv = [_arr(r["recv_t"]) for r in rres]
    n = min((a.size for a in send), default=0)
    out: dict = {"events": tr.n_events, "lost": lost, "messages": int(n)}
    if not n or not tr.n_events:
        out["text"] = f"no {'messages' if not n else 'events'} to read"
        out["excerpts"] = []
        return out
    lat = np.stack([recv[i][:n] - send[i][:n] for i in range(len(rres))])
    slow = lat.argmax(axis=0)
    staged = all(r.get("stages") for r in rres)
    if staged:  # the writer's publish stamp and the reader's 'seen', per reader
        pub = [_arr(r["stages"][0])[:n] for r in rres]
        seen = [_arr(r["stages"][1])[:n] for r in rres]
    in_trace = (send[0][:n] >= tr.t_first) & (recv[0][:n] <= tr.t_last)
    paths = {}
    for m in np.nonzero(in_trace)[0]:
        r = int(slow[m])
        t0 = int(pub[r][m]) if staged else int(send[r][m])
        paths[int(m)] = follow(tr, readers[r], t0, int(recv[r][m]))
    if not paths:
        out["text"] = "no message inside the trace"
        out["excerpts"] = []
        return out
    lat_max = lat.max(axis=0)
    ms = sorted(paths)
    worst = sorted(ms, key=lambda m: -lat_max[m])[:max(1, len(ms) // 100)]

    def block(sel):
        """Per state p50/p99 µs over the messages, and the wake-up facts."""
        d: dict = {s: _q([paths[m].time[s] for m in sel]) for s in STATES}
        asleep = [m for m in sel if paths[m].start_state == "asleep"]
        woken = [m for m in sel if paths[m].wakeup]
        d["n"] = len(sel)
        d["asleep_at_publish"] = len(asleep)
        d["running_at_publish"] = sum(paths[m].start_state == "run" for m in sel)
        d["runnable_at_publish"] = sum(paths[m].start_state == "runq" for m in sel)
        d["woken"] = len(woken)
        wk = [(paths[m], paths[m].wakeup) for m in woken]
        d["woken_on_waker_cpu"] = sum(w[1] == p.waking[1] for p, w in wk if w and p.waking)
        d["woken_off_last_cpu"] = sum(w[1] != p.last_cpu for p, w in wk if w and p.last_cpu is not None)
        d["wake_to_run_us"] = _q([p.first_run[0] - w[0] for p, w in wk
                                  if w and p.first_run and p.first_run[0] >= w[0]])
        d["slept_us"] = _q([paths[m].slept for m in woken if paths[m].slept is not None])
        d["preempted"] = sum(paths[m].preempted for m in sel)
        d["migrations"] = sum(len(paths[m].migrations) for m in sel)
        held: Counter = Counter()
        left: Counter = Counter()
        for m in sel:
            for _cpu, pid, ns, st in paths[m].holders:
                role = roles.get(pid, "idle" if pid == 0 else "other")
                role = "reader" if role.startswith("r") and role[1:].isdigit() else role
                held[role] += ns
                if st:
                    left[f"{role}:{st}"] += 1
        d["runq_behind_us"] = {k: round(v / 1e3, 1) for k, v in held.most_common()}
        d["holders_left_as"] = dict(left.most_common())
        return d

    out["all"] = block(ms)
    out["slowest"] = block(worst)
    # The writer's side of the slowest: from its send stamp to its publish stamp.
    wpaths = {m: follow(tr, pids["writer"], int(send[0][m]), int(pub[0][m])) for m in worst} if staged else {}
    out["slowest"]["writer_send_to_publish"] = {s: _q([wpaths[m].time[s] for m in worst]) for s in STATES} \
        if wpaths else None
    out["slowest_detail"] = [_detail(tr, roles, paths[m], m, int(slow[m]), int(lat_max[m]),
                                     int(seen[slow[m]][m]) if staged else None, wpaths.get(m))
                             for m in worst[:DETAIL]]
    out["sched_wakeups"] = _wake_to_run_all(tr, readers)
    out["text"] = _text(out)
    out["excerpts"] = [_excerpt(tr, paths[m], m) for m in worst[:3]]
    return out


def _wake_to_run_all(tr: Trace, readers: list) -> dict:
    """Every wake-up of a reader in the trace: how long until it ran (the kernel's view alone)."""
    delays = []
    for pid in readers:
        pending = None
        for t, kind, _a, _b in tr.task.get(pid, []):
            if kind == "wakeup":
                pending = t
            elif kind == "in" and pending is not None:
                delays.append(t - pending)
                pending = None
    p50, p90, p99 = _q(delays, (50, 90, 99))
    return {"n": len(delays), "p50_us": p50, "p90_us": p90, "p99_us": p99,
            "max_us": round(max(delays) / 1e3, 1) if delays else None,
            "over_1ms": sum(d > 1_000_000 for d in delays)}


def _detail(tr: Trace, roles: dict, p: Path, m: int, reader: int, lat: int, seen: int | None,
            wp: Path | None) -> dict:
    us = lambda t: round((t - p.t0) / 1e3, 1)  # noqa: E731 - µs after publish
    d: dict = {"msg": m, "reader": reader, "latency_us": round(lat / 1e3, 1),
         "send_to_publish_us": round((wp.t1 - wp.t0) / 1e3, 1) if wp else None,
         "at_publish": p.start_state + (f"@cpu{p.start_cpu}" if p.start_cpu is not None else ""),
         "last_cpu": p.last_cpu,
         "time_us": {s: round(v / 1e3, 1) for s, v in p.time.items() if v}}
    if p.waking:
        d["waking"] = {"at_us": us(p.waking[0]), "waker": _who(tr, roles, p.waking[2]), "waker_cpu": p.waking[1]}
    if p.wakeup:
        d["wakeup"] = {"at_us": us(p.wakeup[0]), "target_cpu": p.wakeup[1],
                       "slept_us": None if p.slept is None else round(p.slept / 1e3, 1),
                       "cpu_busy_us": None if p.holder_since is None else round(p.holder_since / 1e3, 1)}
    if p.first_run:
        d["ran"] = {"at_us": us(p.first_run[0]), "cpu": p.first_run[1]}
    if seen is not None:
        d["seen_at_us"] = us(seen)
    if p.holders:
        held: dict = {}
        for c, pid, ns, st in p.holders:  # one entry per task and CPU, over all runq intervals
            h = held.setdefault((c, pid), [0, st])
            h[0] += ns
            h[1] = st or h[1]
        d["behind"] = [{"cpu": c, "who": _who(tr, roles, pid), "us": round(ns / 1e3, 1), "left_as": st}
                       for (c, pid), (ns, st) in sorted(held.items(), key=lambda kv: -kv[1][0])[:4]]
    if p.preempted:
        d["preempted"] = p.preempted
    if p.migrations:
        d["migrations"] = [(us(t), a, b) for t, a, b in p.migrations[:4]]
    if wp and wp.time["runq"]:
        d["writer_runq"] = {"us": round(wp.time["runq"] / 1e3, 1),
                            "behind": [{"cpu": c, "who": _who(tr, roles, pid), "us": round(ns / 1e3, 1)}
                                       for c, pid, ns, _st in wp.holders[:3]]}
    return d


def _fmt_q(q) -> str:
    return "/".join("-" if v is None else f"{v:g}" for v in q)


def _text(s: dict) -> str:
    """A few lines per sub-run: all messages, the slowest 1 %, then the worst one by one."""
    lines = [f"trace: {s['events']} events, lost {s['lost'].get('overrun', 0) + s['lost'].get('dropped', 0)}; "
             f"{s['messages']} msgs; reader wake-ups {s['sched_wakeups']['n']}: wake->run p50/p90/p99/max "
             f"{s['sched_wakeups']['p50_us']}/{s['sched_wakeups']['p90_us']}/{s['sched_wakeups']['p99_us']}/"
             f"{s['sched_wakeups']['max_us']} us, >1ms {s['sched_wakeups']['over_1ms']}"]
    for name in ("all", "slowest"):
        b = s[name]
        wr = b.get("writer_send_to_publish")
        lines.append(
            f"{name:>7} n={b['n']}: p50/p99 us asleep {_fmt_q(b['asleep'])} waking {_fmt_q(b['waking'])} "
            f"runq {_fmt_q(b['runq'])} run {_fmt_q(b['run'])}; at publish asleep {b['asleep_at_publish']} "
            f"running {b['running_at_publish']} runnable {b['runnable_at_publish']}; woken {b['woken']} "
            f"(on waker's cpu {b['woken_on_waker_cpu']}, off last cpu {b['woken_off_last_cpu']}) "
            f"wake->run {_fmt_q(b['wake_to_run_us'])} slept {_fmt_q(b['slept_us'])}; "
            f"preempted {b['preempted']} migr {b['migrations']}; "
            f"runq behind {b['runq_behind_us']} left {b['holders_left_as']}"
            + (f"; writer send->publish runq {_fmt_q(wr['runq'])} run {_fmt_q(wr['run'])}" if wr else ""))
    for d in s["slowest_detail"]:
        parts = [f"  #{d['msg']} r{d['reader']} {d['latency_us']}us: send->publish {d['send_to_publish_us']}"
                 + (" (writer runnable " + str(d["writer_runq"]["us"]) + " behind " + ",".join(
                     f"{b['who']}@{b['cpu']} {b['us']}" for b in d["writer_runq"]["behind"]) + ")"
                    if d.get("writer_runq") else "")
                 + f"; at publish {d['at_publish']} (last cpu {d['last_cpu']})"]
        if "waking" in d:
            w = d["waking"]
            parts.append(f"waking +{w['at_us']} by {w['waker']}@cpu{w['waker_cpu']}")
        if "wakeup" in d:
            w = d["wakeup"]
            parts.append(f"wakeup +{w['at_us']} ->cpu{w['target_cpu']} (slept {w['slept_us']}, its task "
                         f"running for {w['cpu_busy_us']})")
        if "ran" in d:
            parts.append(f"ran +{d['ran']['at_us']} cpu{d['ran']['cpu']}")
        if "seen_at_us" in d:
            parts.append(f"seen +{d['seen_at_us']}")
        if "behind" in d:
            parts.append("behind " + ",".join(f"{b['who']}@{b['cpu']} {b['us']}us({b['left_as'] or 'ran on'})"
                                              for b in d["behind"]))
        if d.get("preempted"):
            parts.append(f"preempted x{d['preempted']}")
        if d.get("migrations"):
            parts.append("migr " + ",".join(f"+{t}:{a}->{b}" for t, a, b in d["migrations"]))
        parts.append("[" + " ".join(f"{k} {v}" for k, v in d["time_us"].items()) + "]")
        lines.append("; ".join(parts))
    return "\n".join(lines)


def _excerpt(tr: Trace, p: Path, m: int) -> str:
    """The raw events of the message's window on the CPUs the reader touched, bounded."""
    cpus = {c for c in (p.start_cpu, p.last_cpu, p.wakeup and p.wakeup[1], p.first_run and p.first_run[1],
                        p.waking and p.waking[1]) if c is not None}
    a = p.t0 - 200_000
    i = bisect.bisect_left(tr.lines, a, key=lambda x: x[0])
    out = [f"--- message {m}: publish at {p.t0 / 1e9:.6f}, cpus {sorted(cpus)}"]
    pat = re.compile(r"\[(\d+)\]")
    while i < len(tr.lines) and tr.lines[i][0] <= p.t1 and len(out) <= EXCERPT_LINES:
        t, raw = tr.lines[i]
        c = pat.search(raw)
        if c and int(c.group(1)) in cpus:
            out.append(raw)
        i += 1
    return "\n".join(out)
