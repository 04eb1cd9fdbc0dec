"""A signal handler that raises out of a blocked call, and the messages after it.

README: a signal that arrives while a call blocks runs its Python handler at
once (or within ~100 ms on the main thread), and the call raises what the
handler raised, losing nothing.  A put that raised mid-message is given up:
the next put tells the readers to drop the part they have, so they see the
next message whole, never half of the one before.  A get that raised lost no
message: the next get returns it.  (A get cut mid-message by its timeout resumes
it: test_flow_control.py.)
"""
import os
import signal
import threading

import pytest

import rdmaq
from children import CTX, TIMEOUT, start, writer_of
from observe import in_thread, sleeps, wait_blocked, wait_until


class Interrupted(Exception):
    pass


def _raise_after(seconds):
    def handler(signum, frame):
        raise Interrupted()

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    return old


def _disarm(old):
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("size", [3000, 40000], ids=["fits-the-ring", "streams"])
def test_a_put_raised_out_of_mid_message_is_dropped_by_the_readers(size):
    with rdmaq.Writer(1, transport="shm", slot_bytes=1024, slots=4) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=TIMEOUT)
        w.put(b"first", timeout=TIMEOUT)
        w.put(b"second", timeout=TIMEOUT)  # the ring has room for 2 more records
        big = bytes(i % 253 for i in range(size))
        old = _raise_after(0.1)
        try:
            with pytest.raises(Interrupted):
                w.put(big, timeout=TIMEOUT)  # blocks: 4 slots, the reader not reading
        finally:
            _disarm(old)
        got = []
        reader = threading.Thread(target=lambda: got.extend(bytes(r.get(timeout=TIMEOUT)) for _ in range(3)))
        reader.start()
        w.put(b"after", timeout=TIMEOUT)
        reader.join(TIMEOUT)
        assert got == [b"first", b"second", b"after"]
        w.put(b"and on", timeout=TIMEOUT)
        assert r.get(timeout=TIMEOUT) == b"and on"
        assert r.stats["messages"] == 4
        r.close()


def test_a_get_raised_out_of_loses_no_message():
    with rdmaq.Writer(1, transport="shm") as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=TIMEOUT)
        old = _raise_after(0.1)
        try:
            with pytest.raises(Interrupted):
                r.get(timeout=TIMEOUT)
        finally:
            _disarm(old)
        w.put(b"one", timeout=TIMEOUT)
        w.put(b"two", timeout=TIMEOUT)
        assert [r.get(timeout=TIMEOUT) for _ in range(2)] == [b"one", b"two"]
        r.close()


def _interrupt(signum, frame):
    raise Interrupted()


class _AlarmWhileLoading:
    """Its first unpickling is interrupted by a real SIGALRM whose handler raises an
    Exception (the SIGALRM-timeout idiom); later ones load."""
    alarmed = False

    def __reduce__(self):
        return (_load_or_alarm, ())


def _load_or_alarm():
    if not _AlarmWhileLoading.alarmed:
        _AlarmWhileLoading.alarmed = True
        os.kill(os.getpid(), signal.SIGALRM)  # the handler runs at the next bytecode here
        for _ in range(10**6):
            pass
        raise AssertionError("the SIGALRM handler did not run")
    return "loaded"


@pytest.mark.parametrize("size", [64, 1 << 20], ids=["scratch", "own-buffer"])
def test_a_handlers_exception_while_unpickling_takes_nothing(size):
    """README, Errors: a call that raises took nothing, an Exception out of unpickling
    included: the next recv returns the message whose loading the handler cut."""
    _AlarmWhileLoading.alarmed = False
    with rdmaq.Writer(1, transport="shm") as w, rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=TIMEOUT)
        w.send((_AlarmWhileLoading(), b"x" * size), timeout=TIMEOUT)
        w.send("next", timeout=TIMEOUT)
        old = signal.signal(signal.SIGALRM, _interrupt)
        try:
            with pytest.raises(Interrupted):
                r.recv(timeout=TIMEOUT)
        finally:
            signal.signal(signal.SIGALRM, old)
        assert r.recv(timeout=TIMEOUT) == ("loaded", b"x" * size)
        assert r.recv(timeout=TIMEOUT) == "next"


OTHER_THREAD_CHILD = """
import signal, threading, time, rdmaq

class Interrupted(Exception):
    pass

def handler(signum, frame):
    raise Interrupted()

w = rdmaq.Writer(1, transport="shm")
r = rdmaq.Reader(w.handle, 0, spin_us=0)
w.wait_ready(30)
other = threading.Thread(target=time.sleep, args=(30,), daemon=True)
other.start()
signal.signal(signal.SIGUSR1, handler)
threading.Timer(0.2, lambda: signal.pthread_kill(other.ident, signal.SIGUSR1)).start()
try:
    r.get()  # no timeout: only the handler ends it
except Interrupted:
    print("INTERRUPTED", flush=True)
w.put(b"after")
print(bytes(r.get(timeout=30)).decode(), flush=True)
"""


def test_a_signal_another_thread_took_still_reaches_a_blocked_get():
    """A signal the kernel delivers to another thread interrupts no system call of
    the main thread: its blocked get returns to the interpreter by itself (every
    100 ms), so the handler runs and its exception ends the get, which has no
    timeout of its own (without the returns the child waits for ever: the limit
    below fails the test).  A fresh process: the main-thread check runs anew."""
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-c", OTHER_THREAD_CHILD], capture_output=True, text=True, timeout=20)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["INTERRUPTED", "after"]


def test_a_get_raised_out_of_mid_message_resumes_it_whole(transport):
    """A message longer than the reader's scratch buffer (256 KiB), half read when a
    handler raises: the next get returns all of it, its start included, then the next."""
    # 2048 rings' worth: it streams for long enough that the writer is stopped mid-message
    # whatever the machine (at 1 MiB a quiet machine could pass all of it between two polls)
    big = (bytes(range(251)) * ((32 << 20) // 251 + 1))[:32 << 20]
    out = CTX.Queue()
    writer = start(writer_of, transport, 1024, 16, [big, b"after"], out)
    try:
        with rdmaq.Reader(out.get(timeout=TIMEOUT), 0) as r:
            r.wait_ready(timeout=TIMEOUT)
            before = r.last_trace["start_ns"]
            main = threading.main_thread().ident

            def stop_writer_then_interrupt():
                # the message has begun (its first record sets the trace), the writer
                # stops mid-message, the reader drains the ring and blocks: SIGINT
                wait_until(lambda: r.last_trace["start_ns"] != before, "the message to begin")
                os.kill(writer.pid, signal.SIGSTOP)
                wait_blocked(r, sleeps(r), what="the get")
                signal.pthread_kill(main, signal.SIGINT)

            t, box = in_thread(stop_writer_then_interrupt)
            old = signal.signal(signal.SIGINT, signal.default_int_handler)
            try:
                with pytest.raises(KeyboardInterrupt):
                    r.get(timeout=TIMEOUT)
            finally:
                signal.signal(signal.SIGINT, old)
            t.join(TIMEOUT)
            assert box == {"value": None}
            os.kill(writer.pid, signal.SIGCONT)
            got = r.get(timeout=TIMEOUT)
            assert len(got) == len(big) and got == big
            assert r.get(timeout=TIMEOUT) == b"after"
            assert r.stats["messages"] == 2
    finally:
        os.kill(writer.pid, signal.SIGCONT)
        writer.join(TIMEOUT)


@pytest.mark.parametrize("method", ["get", "recv"])
def test_a_message_taken_without_waiting_as_a_handler_raises_is_the_next_call_s(method):
    """A message already there is taken with the GIL held (the fast path); a handler
    that raises as that C call returns (emulated: the endpoint's call is wrapped) leaves
    it to the next call, which returns it before the one after it."""
    with rdmaq.Writer(1, transport="shm") as w, rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=TIMEOUT)
        put, take = (w.send, r.recv) if method == "recv" else (w.put, r.get)
        put(b"first", timeout=TIMEOUT)
        put(b"second", timeout=TIMEOUT)
        real = r._try_recv

        def handler_raises_as_it_returns(*args):
            r._try_recv = real
            rc = real(*args)
            raise Interrupted(rc)

        r._try_recv = handler_raises_as_it_returns
        with pytest.raises(Interrupted) as e:
            take(timeout=TIMEOUT)
        assert e.value.args == (0,) and r.stats["messages"] == 1  # C had taken it
        assert take(timeout=TIMEOUT) == b"first"
        assert take(timeout=TIMEOUT) == b"second"
        with pytest.raises(TimeoutError):  # a call that raised with nothing taken: nothing kept
            take(timeout=0)
        put(b"third", timeout=TIMEOUT)
        assert take(timeout=TIMEOUT) == b"third"
        assert r.stats["messages"] == 3


def test_close_from_a_handler_that_interrupted_a_call_on_the_endpoint_is_refused():
    """close() in a signal handler that interrupted a get on the same reader would free
    what the get still uses: it raises instead, out of the get, and the reader stays open."""
    with rdmaq.Writer(1, transport="shm") as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=TIMEOUT)

        def handler(signum, frame):
            r.close()

        old = signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        try:
            with pytest.raises(RuntimeError, match="reader close: called while this thread's call on this "
                                                   "reader is under way"):
                r.get(timeout=TIMEOUT)
        finally:
            _disarm(old)
        w.put(b"after", timeout=TIMEOUT)
        assert r.get(timeout=TIMEOUT) == b"after"
        r.close()
