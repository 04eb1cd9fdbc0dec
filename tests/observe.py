"""Waiting for observable states instead of sleeping.

A test that must prove a call is really blocked before it acts (close(),
shutdown(), a put that should wake it) waits until the endpoint's
``stats["sleeps"]`` has grown: the C core counts a sleep just before the
wait blocks in the kernel, after it has announced the sleep to its peer, so
a wake-up or a cancel sent from then on reaches it.  ``.stats`` is read from
the test thread while the other thread is blocked.

Stdlib only (tests/vllm imports it from another venv).
"""
import os
import signal
import threading
import time

POLL_S = 0.001
LIMIT_S = 60  # a backstop; pytest-timeout usually ends a stuck test first


def wait_until(predicate, what, limit=LIMIT_S):
    """Poll ``predicate`` until true; fail naming ``what`` after ``limit`` s."""
    end = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"still waiting for {what} after {limit} s")
        time.sleep(POLL_S)


def sleeps(endpoint):
    return endpoint.stats["sleeps"]


def wait_blocked(endpoint, sleeps_before, thread=None, what="the call"):
    """Wait until ``endpoint`` has slept more than ``sleeps_before`` times
    (its blocked call is in the kernel), with ``thread`` still running it."""
    def blocked():
        if thread is not None and not thread.is_alive():
            raise AssertionError(f"{what} returned instead of blocking")
        return sleeps(endpoint) > sleeps_before

    wait_until(blocked, f"{what} to block (stats['sleeps'] > {sleeps_before})")


def in_thread(fn):
    """Run ``fn`` in a thread; the box gets its ``value`` or its ``error``."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def blocked_call(endpoint, fn, what):
    """Start ``fn`` (a call on ``endpoint`` that must block) in a thread and return
    ``(thread, box)`` once it sleeps in the kernel (see ``wait_blocked``)."""
    before = sleeps(endpoint)
    t, box = in_thread(fn)
    wait_blocked(endpoint, before, t, what)
    return t, box


def process_state(pid):
    """The kernel's one-letter state of a process (R, S, T for stopped...)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def kill_stopped(proc):
    """SIGKILL a child that reports and then stops itself (children.report_and_stop),
    once it has stopped: its report is wholly sent, no lock of the queue held."""
    wait_until(lambda: process_state(proc.pid) in "Tt", f"process {proc.pid} to stop")
    os.kill(proc.pid, signal.SIGKILL)
