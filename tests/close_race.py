"""close() on one thread while others read ``stats`` and ``last_trace``.

Each round makes a queue, moves one message, then closes both endpoints while
two threads read their ``stats`` and ``last_trace`` without pause.  Every
value read must be the right one: the live counters (one message), or after
close the counters as they were; never ``{}``, never another trace.  Run
in-process by tests/core/test_endpoint_lifetime.py, and as a child of an
AddressSanitizer build (``python close_race.py ROUNDS``), where a read of the
freed C object is a report and a non-zero exit.
"""
import sys
import threading

import rdmaq

SWITCH_S = 1e-6  # switch threads as often as the interpreter can: the race's window is short


def _read_until(stop, endpoints, traces, wrong):
    try:
        while not stop.is_set():
            for ep, trace in zip(endpoints, traces):
                stats = ep.stats
                if stats.get("messages") != 1:
                    wrong.append(f"{type(ep).__name__}.stats = {stats}")
                if ep.last_trace != trace:
                    wrong.append(f"{type(ep).__name__}.last_trace = {ep.last_trace}, not {trace}")
    except Exception as e:  # noqa: BLE001 - what a read raised is a wrong value too
        wrong.append(f"{type(e).__name__}: {e}")


def one_round():
    """The wrong values read in one round (none: it went right)."""
    w = rdmaq.Writer(1, transport="shm", slot_bytes=1024, slots=4)
    r = rdmaq.Reader(w.handle, 0)
    w.wait_ready(timeout=60)
    w.put(b"one", timeout=60)
    assert r.get(timeout=60) == b"one"
    endpoints = (w, r)
    traces = [ep.last_trace for ep in endpoints]
    stop, wrong = threading.Event(), []
    readers = [threading.Thread(target=_read_until, args=(stop, endpoints, traces, wrong))
               for _ in range(2)]
    for t in readers:
        t.start()
    r.close()
    w.close()
    stop.set()
    for t in readers:
        t.join()
    for ep, trace in zip(endpoints, traces):
        if ep.stats.get("messages") != 1 or ep.last_trace != trace:
            wrong.append(f"{type(ep).__name__} after close: {ep.stats}, {ep.last_trace}")
    return wrong


def run(rounds):
    old = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_S)
    try:
        wrong = []
        for _ in range(rounds):
            wrong += one_round()
        return wrong
    finally:
        sys.setswitchinterval(old)


if __name__ == "__main__":
    found = run(int(sys.argv[1]))
    print(f"{len(found)} wrong values", *found[:10], sep="\n")
    sys.exit(1 if found else 0)
