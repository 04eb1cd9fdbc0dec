"""The scheduler-trace reader of `rdmaq bench --sched-trace`, on hand-written traces.

The tracefs text below is what the kernel prints for the four events (irq-info off, mono
clock); the benchmark's stamps are made to match.  Nothing here needs root or a kernel
trace, and nothing asserts a time measured on this machine.
"""
import os
from array import array

import pytest

from rdmaq.bench.micro import schedtrace
from rdmaq.bench.micro.schedtrace import follow, parse

W, R0, R1, HOG, OTHER = 100, 200, 201, 300, 400


def _line(t_us, cpu, cur, event, rest, comm="python3"):
    return f"{comm}-{cur:<6} [{cpu:03d}] {t_us // 1_000_000}.{t_us % 1_000_000:06d}: {event}: {rest}"


def _switch(t, cpu, prev, state, nxt):
    return _line(t, cpu, prev, "sched_switch",
                 f"prev_comm=python3 prev_pid={prev} prev_prio=120 prev_state={state} ==> "
                 f"next_comm=python3 next_pid={nxt} next_prio=120")


def _waking(t, cpu, waker, pid, target):
    return _line(t, cpu, waker, "sched_waking", f"comm=python3 pid={pid} prio=120 target_cpu={target:03d}")


def _wakeup(t, cpu, cur, pid, target):
    return _line(t, cpu, cur, "sched_wakeup", f"comm=python3 pid={pid} prio=120 target_cpu={target:03d}")


# t in µs after 10 s. Reader 0 sleeps on CPU 1 behind the hog; the writer (CPU 0) publishes at
# 1000 and wakes it at 1005; it is queued on CPU 1 at 1006 and runs only at 3006, when the hog
# is preempted; it is preempted once more (R) at 3010 by another task for 40 µs, and returns at
# 3100.  Reader 1 sleeps on CPU 0 and is woken there and runs at once.
T0 = 10_000_000
TRACE = "\n".join([
    "# tracer: nop",
    _switch(T0 + 100, 1, R0, "S", HOG),
    _switch(T0 + 200, 0, R1, "S", W),
    _waking(T0 + 1005, 0, W, R0, 1),
    _wakeup(T0 + 1006, 1, HOG, R0, 1),
    _waking(T0 + 1007, 0, W, R1, 0),
    _wakeup(T0 + 1008, 0, W, R1, 0),
    _switch(T0 + 1009, 0, W, "S", R1),
    _switch(T0 + 1030, 0, R1, "S", 0),
    _switch(T0 + 3006, 1, HOG, "R", R0),
    _switch(T0 + 3010, 1, R0, "R", OTHER),
    _switch(T0 + 3050, 1, OTHER, "S", R0),
    _line(T0 + 3060, 1, R0, "sched_migrate_task", "comm=python3 pid=200 prio=120 orig_cpu=1 dest_cpu=2"),
    _switch(T0 + 6000, 3, OTHER, "S", 0),  # the trace runs past the last message
])
PIDS = {"writer": W, "readers": [R0, R1], "hogs": [HOG], "tok": None, "bench": 1}


def test_parse_reads_every_event_and_who_ran_where():
    tr = parse(TRACE)
    assert tr.n_events == 13
    kinds = [e[1] for e in tr.task[R0]]
    assert kinds == ["out", "waking", "wakeup", "in", "out", "in", "migrate"]
    # CPU 1 ran: hog (from 100), reader 0 (3006), other (3010), reader 0 (3050)
    assert [e[3] for e in tr.cpu[1]] == [HOG, R0, OTHER, R0]
    assert tr.comm[R0] == "python3"
    assert tr.t_first == T0 * 1000 + 100_000


def test_follow_cuts_a_message_into_asleep_waking_runq_and_run():
    tr = parse(TRACE)
    publish, returned = (T0 + 1000) * 1000, (T0 + 3100) * 1000
    p = follow(tr, R0, publish, returned)
    assert p.start_state == "asleep" and p.last_cpu == 1
    assert p.time == {"asleep": 5_000, "waking": 1_000, "runq": 2_000_000 + 40_000, "run": 4_000 + 50_000}
    assert p.waking == ((T0 + 1005) * 1000, 0, W)     # issued by the writer on CPU 0
    assert p.wakeup == ((T0 + 1006) * 1000, 1)         # queued on CPU 1
    assert p.first_run == ((T0 + 3006) * 1000, 1)
    assert p.slept == (1005 - 100) * 1000               # asleep since it was switched out
    assert p.holder_since == (1006 - 100) * 1000        # the hog had the CPU that long
    assert p.preempted == 1
    held = {(cpu, pid): ns for cpu, pid, ns, _ in p.holders}
    assert held == {(1, HOG): 2_000_000, (1, OTHER): 40_000}
    assert [h[3] for h in p.holders] == ["R", "S"]      # the hog was preempted, the other slept
    assert p.migrations == [((T0 + 3060) * 1000, 1, 2)]


def test_a_reader_running_at_publish_has_no_wakeup():
    tr = parse(TRACE)
    p = follow(tr, R1, (T0 + 1020) * 1000, (T0 + 1025) * 1000)
    assert p.start_state == "run" and p.start_cpu == 0
    assert p.waking is None and p.time["run"] == 5_000


def _rec(send, recv, stages=None):
    rec = {"send_t": array("q", send).tobytes(), "recv_t": array("q", recv).tobytes(),
           "cpu_ns": 1, "wall_ns": 1, "errors": []}
    if stages:
        rec["stages"] = [array("q", s).tobytes() for s in stages]
    return rec


def test_analyze_subrun_explains_the_slowest_message():
    us = lambda t: (T0 + t) * 1000  # noqa: E731
    # two messages; the first is slow for reader 0 (the trace above), the second fast for both
    send = [us(990), us(5000)]
    publish = [us(1000), us(5010)]
    r0 = _rec(send, [us(3100), us(5050)], [publish, [us(3060), us(5040)], [us(3061), us(5041)], [4, 4]])
    r1 = _rec(send, [us(1040), us(5060)], [publish, [us(1020), us(5045)], [us(1021), us(5046)], [4, 4]])
    w = {"stages": [array("q", publish).tobytes()] * 3}
    out = schedtrace.analyze_subrun(TRACE, {"overrun": 0, "dropped": 0}, w, [r0, r1], PIDS)
    assert out["messages"] == 2 and out["events"] == 13
    slow = out["slowest"]
    assert slow["n"] == 1 and slow["woken"] == 1 and slow["asleep_at_publish"] == 1
    assert slow["runq_behind_us"] == {"hog": 2000.0, "other": 40.0}
    d = out["slowest_detail"][0]
    assert d["msg"] == 0 and d["reader"] == 0
    assert d["waking"] == {"at_us": 5.0, "waker": f"writer:{W}", "waker_cpu": 0}
    assert d["wakeup"]["target_cpu"] == 1 and d["ran"] == {"at_us": 2006.0, "cpu": 1}
    assert d["behind"][0] == {"cpu": 1, "who": f"hog:{HOG}", "us": 2000.0, "left_as": "R"}
    assert d["seen_at_us"] == 2060.0
    text = out["text"]
    assert "behind hog:300@1 2000.0us(R)" in text and "preempted x1" in text
    assert out["excerpts"] and "message 0" in out["excerpts"][0]
    # every reader wake-up in the trace: both readers, each ran after it
    assert out["sched_wakeups"]["n"] == 2


def test_an_empty_trace_says_so():
    r = _rec([1], [2])
    out = schedtrace.analyze_subrun("# tracer: nop\n", {}, {}, [r], PIDS)
    assert out["text"] == "no events to read" and out["excerpts"] == []


@pytest.mark.skipif(os.geteuid() == 0 and schedtrace.unavailable() is None,
                    reason="this machine can trace: nothing to refuse")
def test_unavailable_says_why():
    assert schedtrace.unavailable()


@pytest.mark.skipif(schedtrace.unavailable() is not None, reason="no tracefs access here (needs root)")
def test_tracer_records_and_removes_its_instance():
    """The instance exists while the tracer is open and is gone after close, even on an error."""
    import time

    with pytest.raises(RuntimeError, match="boom"):
        with schedtrace.Tracer(buffer_kb=256) as tr:
            path = tr.path
            assert os.path.isdir(path)
            tr.start()
            time.sleep(0.02)  # some scheduling happens on a live machine
            text, lost = tr.stop()
            assert set(lost) == {"overrun", "dropped", "entries"}
            assert parse(text).n_events >= 1
            raise RuntimeError("boom")
    assert not os.path.exists(path)
