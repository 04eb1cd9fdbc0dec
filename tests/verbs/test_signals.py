"""A signal ends a blocked verbs wait, so Python runs its handler.

The verbs wait sleeps in ppoll() on the completion channel, an eventfd and
the liveness sockets; a signal makes it return -EINTR instead of retrying
in C, and the handler runs (here it raises).  No message is lost or
repeated by the interruption: the next call delivers what comes next.

Endpoints live in this process (loopback pool), so the signal reaches the
thread blocked in C: the kernel gives a process-directed signal to the main
thread first when it does not block it.
"""
import signal

import pytest

import rdmaq


class Interrupted(Exception):
    pass


@pytest.fixture
def alarm():
    """alarm(seconds): SIGALRM raises Interrupted once, while the test blocks."""
    def handler(signum, frame):
        raise Interrupted()

    old = signal.signal(signal.SIGALRM, handler)
    yield lambda s: signal.setitimer(signal.ITIMER_REAL, s)
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)


def test_signal_interrupts_a_blocked_get(alarm):
    with rdmaq.Writer(1, transport="verbs", slot_bytes=1024, slots=4, spin_us=0) as w, \
            rdmaq.Reader(w.handle, 0, spin_us=0) as r:
        w.wait_ready(timeout=60)
        w.put(b"first", timeout=60)
        assert r.get(timeout=60) == b"first"
        sleeps = r.stats["sleeps"]
        alarm(0.5)
        # Nothing arrives: only the signal can end this before the timeout.
        with pytest.raises(Interrupted):
            r.get(timeout=60)
        assert r.stats["sleeps"] > sleeps  # it was blocked in the kernel, not spinning
        w.put(b"second", timeout=60)
        w.put(b"third", timeout=60)
        assert r.get(timeout=60) == b"second"
        assert r.get(timeout=60) == b"third"


def test_signal_interrupts_a_put_blocked_on_a_full_ring(alarm):
    with rdmaq.Writer(1, transport="verbs", slot_bytes=1024, slots=4, spin_us=0) as w, \
            rdmaq.Reader(w.handle, 0, spin_us=0) as r:
        w.wait_ready(timeout=60)
        sent = 0
        alarm(0.5)
        with pytest.raises(Interrupted):
            while True:  # the reader does not read: the ring fills, then put blocks
                w.put(sent.to_bytes(8, "little"), timeout=60)
                sent += 1
        assert w.stats["sleeps"] > 0
        got = [int.from_bytes(r.get(timeout=60), "little") for _ in range(sent)]
        assert got == list(range(sent))  # every put that returned, once, in order
        w.put(sent.to_bytes(8, "little"), timeout=60)
        assert int.from_bytes(r.get(timeout=60), "little") == sent
