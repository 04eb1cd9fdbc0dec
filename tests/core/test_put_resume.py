"""A put that fails part-way through a message longer than the ring (a timeout,
or a signal handler that raises) delivers nothing: readers drop the part they
got, and the next put is delivered whole, also when waiting for room makes it
come back to Python to run signal handlers (-EINTR) before it has sent anything."""
import random
import signal
import threading
import time

import pytest

import rdmaq
from children import TIMEOUT
from observe import LIMIT_S, in_thread, sleeps, wait_blocked

SLOT, SLOTS = 1024, 16  # a 16 KiB ring
BIG = bytes(i % 251 for i in range(64 * 1024))  # four rings: it streams through


@pytest.fixture
def handler_ran():
    """SIGUSR1 runs a Python handler that sets this event."""
    ran = threading.Event()
    old = signal.signal(signal.SIGUSR1, lambda *_: ran.set())
    yield ran
    signal.signal(signal.SIGUSR1, old)


@pytest.fixture
def sigint_raises():
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def _signal_main_once_blocked(endpoint, sig):
    """In a thread: once ``endpoint``'s call on the main thread (pytest's) sleeps
    in the kernel, send it ``sig``."""
    before = sleeps(endpoint)
    main = threading.main_thread().ident

    def send():
        wait_blocked(endpoint, before, what="the put")
        signal.pthread_kill(main, sig)

    return in_thread(send)


def _fail_mid_message(w, how):
    """Leave BIG part-sent: the reader is not reading, so the ring fills."""
    if how == "timeout":
        with pytest.raises(TimeoutError):
            w.put(BIG, timeout=0.2)
    else:
        t, box = _signal_main_once_blocked(w, signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):
            w.put(BIG)
        t.join(LIMIT_S)
        assert box == {"value": None}


@pytest.mark.parametrize("how", ["timeout", "signal"])
def test_next_put_after_a_put_failed_mid_message_is_delivered(transport, how, handler_ran,
                                                              sigint_raises):
    with rdmaq.Writer(1, transport=transport, slot_bytes=SLOT, slots=SLOTS) as w, \
            rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=TIMEOUT)
        r.wait_ready(timeout=TIMEOUT)
        _fail_mid_message(w, how)
        # The next put first owes the readers the mark that ends the failed
        # message, and the ring is full: it waits, and a signal brings it back
        # to Python (as the main thread's periodic return does) before it has
        # sent anything.  It must carry on, not fail.
        signalled, _ = _signal_main_once_blocked(w, signal.SIGUSR1)

        def drain():
            assert handler_ran.wait(LIMIT_S), "the signal handler never ran"
            return [bytes(r.get(timeout=TIMEOUT)) for _ in range(2)]

        reader, got = in_thread(drain)
        w.put(b"small", timeout=TIMEOUT)
        w.put(b"after", timeout=TIMEOUT)
        reader.join(LIMIT_S)
        signalled.join(LIMIT_S)
        # nothing of the failed message, nothing lost, nothing twice
        assert got == {"value": [b"small", b"after"]}
        w.put(b"last", timeout=TIMEOUT)
        assert r.get(timeout=TIMEOUT) == b"last"


def _message(i, rng):
    size = rng.choice([rng.randrange(8, SLOT), rng.randrange(SLOT, 3 * SLOTS * SLOT)])
    return i.to_bytes(4, "little") + bytes([i % 251]) * size


def test_puts_with_short_timeouts_against_a_slow_reader_lose_nothing(transport):
    """The writer retries each message until a put of it succeeds; the reader,
    pausing now and then, gets each exactly once, in order, whole."""
    rng = random.Random(20)
    msgs = [_message(i, rng) for i in range(60)]
    with rdmaq.Writer(1, transport=transport, slot_bytes=SLOT, slots=SLOTS) as w, \
            rdmaq.Reader(w.handle, 0) as r:
        def read_slowly():
            got = []
            for k in range(len(msgs)):
                if k % 10 == 5:
                    time.sleep(0.25)  # a slow reader: the writer's puts time out
                got.append(bytes(r.get(timeout=TIMEOUT)))
            return got

        reader, box = in_thread(read_slowly)
        w.wait_ready(timeout=TIMEOUT)
        for m in msgs:
            while True:
                try:
                    w.put(m, timeout=rng.uniform(0.05, 0.3))
                    break
                except TimeoutError:
                    pass  # not sent: send it again
        reader.join(TIMEOUT)
        assert "error" not in box, box
        got = box["value"]
        assert [int.from_bytes(g[:4], "little") for g in got] == list(range(len(msgs)))
        assert got == msgs
