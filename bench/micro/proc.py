"""The microbenchmark's child processes: the writer and the readers.

The writer and reader loops are the same for every queue; only the adapter's
send/receive callables differ. Messages are tuples ``(kind, seq, t_ns,
payload)``: ``t_ns`` is ``time.monotonic_ns()`` (CLOCK_MONOTONIC, comparable
across processes of one host) taken just before the send call, so one-way
latency includes serialization, the queue and deserialization, as a vLLM
worker sees it. The parent drives the children over multiprocessing pipes;
nothing on those pipes happens while messages are being timed.
"""

from __future__ import annotations

import os
import pickle
import time
from array import array

from ..common.children import pin, send_failure, stop_quietly

KIND_DATA = 0
KIND_END_SUBRUN = 1
KIND_END_ALL = 2


def writer_main(conn, adapter, n_readers, cpus) -> None:
    stop_quietly()
    try:
        pin(cpus)
        adapter.apply_env()
        adapter.prepare()
        conn.send(("imported", os.getpid()))
        w, handle = adapter.create_writer(n_readers)
        # pickled here and unpickled in the readers: the parent never imports the queue's module
        conn.send(("handle", pickle.dumps(handle)))
        adapter.writer_ready(w)
        conn.send(("ready",))
        send = adapter.sender(w)
        tracer = adapter.writer_tracer(w)
        while True:
            cmd = conn.recv()
            if cmd[0] == "run":
                conn.send(("done", write_subrun(send, cmd[1], tracer)))
            elif cmd[0] == "finish":
                send((KIND_END_ALL, 0, time.monotonic_ns(), b""))
                conn.send(("finished",))
            elif cmd[0] == "exit":
                break
        adapter.close_writer(w)
        conn.send(("bye",))
    except BaseException:
        send_failure(conn)


def write_subrun(send, sub, tracer=None) -> dict:
    """Send warmup + n messages of sub['size'] bytes, one every sub['pace_ns'] (0 = back to back).

    With sub['stages'] and a tracer, also the queue's own timestamps of each send call
    (start, records copied, published)."""
    payload = os.urandom(sub["size"])
    if not sub.get("stages"):
        tracer = None
    stages = [array("q"), array("q"), array("q")]
    warmup, n = sub["warmup"], sub["n"]
    pace_ns = sub["pace_ns"]
    mono, ptime, sleep = time.monotonic_ns, time.process_time_ns, time.sleep
    deadline = mono() + int(sub["time_cap_s"] * 1e9)
    cpu0 = wall0 = None
    sent = 0
    send_dur = array("q")  # how long each measured send call took: the writer's share
    for i in range(warmup + n):
        if i == warmup:
            cpu0, wall0 = ptime(), mono()
        t = mono()
        send((KIND_DATA, i, t, payload))
        sent = i + 1
        now = mono()
        if i >= warmup:
            send_dur.append(now - t)
            if tracer:
                for a, v in zip(stages, tracer()):
                    a.append(v)
        if now > deadline:
            break
        if pace_ns:
            rem = t + pace_ns - now
            if rem > 0:
                sleep(rem / 1e9)
    cpu1, wall1 = ptime(), mono()
    send((KIND_END_SUBRUN, sent, mono(), b""))
    return {
        "sent": sent,
        "measured": max(0, sent - warmup),
        "cpu_ns": (cpu1 - cpu0) if cpu0 is not None else None,
        "wall_ns": (wall1 - wall0) if wall0 is not None else None,
        "send_dur": send_dur.tobytes(),
        "stages": [a.tobytes() for a in stages] if tracer else None,
    }


def reader_main(conn, adapter, index, cpus) -> None:
    stop_quietly()
    try:
        pin(cpus)
        adapter.apply_env()
        adapter.prepare()
        conn.send(("imported", os.getpid()))
        cmd = conn.recv()
        assert cmd[0] == "handle", cmd
        r = adapter.open_reader(pickle.loads(cmd[1]), index)
        adapter.reader_ready(r)
        conn.send(("ready",))
        recv = adapter.receiver(r)
        tracer = adapter.reader_tracer(r)
        counters = adapter.reader_counters(r)
        while True:
            cmd = conn.recv()
            if cmd[0] == "run":
                before = counters() if counters else {}
                res = read_subrun(recv, cmd[1], tracer)
                if counters:
                    res["counters"] = {k: v - before.get(k, 0) for k, v in counters().items()}
                conn.send(("done", res))
            elif cmd[0] == "finish":
                conn.send(("waiting",))  # the parent's idle window starts after every reader says so
                m = recv()
                if m[0] != KIND_END_ALL:
                    raise RuntimeError(f"expected the end message, got kind {m[0]}")
                break
        adapter.close_reader(r)
        conn.send(("bye",))
    except BaseException:
        send_failure(conn)


def read_subrun(recv, sub, tracer=None) -> dict:
    """Receive until the writer's end-of-subrun message; time each measured message.

    With sub['stages'] and a tracer, also the queue's own timestamps of each receive
    (writer's publish stamp, record seen, copied out) and how the wait ended."""
    warmup, size = sub["warmup"], sub["size"]
    if not sub.get("stages"):
        tracer = None
    stages = [array("q"), array("q"), array("q"), array("q")]
    mono, ptime = time.monotonic_ns, time.process_time_ns
    send_t = array("q")
    recv_t = array("q")
    expected = 0
    errors: list[str] = []
    cpu0 = wall0 = None
    while True:
        m = recv()
        t = mono()
        if m[0] != KIND_DATA:
            break
        seq = m[1]
        if seq >= warmup:
            if cpu0 is None:
                cpu0, wall0 = ptime(), t
            send_t.append(m[2])
            recv_t.append(t)
            if tracer:
                for a, v in zip(stages, tracer()):
                    a.append(v)
        if seq != expected and len(errors) < 10:
            errors.append(f"got seq {seq}, expected {expected}")
        expected = seq + 1
        if len(m[3]) != size and len(errors) < 10:
            errors.append(f"seq {seq}: {len(m[3])} bytes, expected {size}")
    cpu1, wall1 = ptime(), mono()
    if m[0] != KIND_END_SUBRUN:
        errors.append(f"unexpected message kind {m[0]}")
    elif m[1] != expected:
        errors.append(f"writer sent {m[1]} messages, reader got up to seq {expected - 1}")
    return {
        "send_t": send_t.tobytes(),
        "recv_t": recv_t.tobytes(),
        "stages": [a.tobytes() for a in stages] if tracer else None,
        "cpu_ns": (cpu1 - cpu0) if cpu0 is not None else None,
        "wall_ns": (wall1 - wall0) if wall0 is not None else None,
        "errors": errors,
    }
