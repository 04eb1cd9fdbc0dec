"""``last_trace`` (README): the timestamps of the last put/get, CLOCK_MONOTONIC ns,
in the order the work happened, and how the get's wait ended.  Orders and
equalities only: no durations are asserted."""
import time

import rdmaq
from children import TIMEOUT
from observe import blocked_call

HOWS = {"ready", "spin", "window", "woken"}


def test_a_put_and_the_get_of_its_message_in_order(transport):
    with rdmaq.Writer(1, transport=transport) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=TIMEOUT)
        assert r.last_trace["how"] == "none"
        before = time.monotonic_ns()
        w.put(b"x" * 1000, timeout=TIMEOUT)
        wt = w.last_trace
        assert before <= wt["start_ns"] <= wt["mid_ns"] <= wt["end_ns"] <= time.monotonic_ns()
        assert r.get(timeout=TIMEOUT) == b"x" * 1000
        rt = r.last_trace
        # the reader's start is the writer's stamp: taken when its records began to go out
        assert wt["start_ns"] <= rt["start_ns"] <= wt["mid_ns"]
        assert rt["start_ns"] <= rt["mid_ns"] <= rt["end_ns"] <= time.monotonic_ns()
        # shm: the message was there when get looked; verbs: an RDMA write may still land
        assert rt["how"] == "ready" if transport == "shm" else rt["how"] in HOWS
        r.close()


def test_each_message_carries_its_own_stamp(transport):
    with rdmaq.Writer(1, transport=transport) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=TIMEOUT)
        stamps = []
        for i in range(3):
            w.put(bytes([i]), timeout=TIMEOUT)
            stamps.append(w.last_trace["start_ns"])
        got = []
        for _ in range(3):
            r.get(timeout=TIMEOUT)
            got.append(r.last_trace["start_ns"])
        assert stamps[0] <= got[0] <= stamps[1] <= got[1] <= stamps[2] <= got[2]
        r.close()


def test_a_get_that_slept_says_it_was_woken(transport):
    with rdmaq.Writer(1, transport=transport) as w:
        r = rdmaq.Reader(w.handle, 0, spin_us=0, anticipate=False)
        w.wait_ready(timeout=TIMEOUT)
        t, box = blocked_call(r, lambda: r.get(timeout=TIMEOUT), "get on an empty ring")
        w.put(b"wake", timeout=TIMEOUT)
        t.join(TIMEOUT)
        assert box == {"value": b"wake"}
        # woken, or (the put landing between two 100 ms slices) found at the re-check
        assert r.last_trace["how"] in ("woken", "spin")
        assert r.last_trace["how"] in HOWS
        r.close()


def test_a_closed_endpoint_s_trace_is_empty(transport):
    w = rdmaq.Writer(1, transport=transport)
    w.close()
    assert w.last_trace == {"start_ns": 0, "mid_ns": 0, "end_ns": 0, "how": "none"}
