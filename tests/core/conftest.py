"""Helpers for multi-process tests: readers run in spawned processes."""
import multiprocessing as mp
import os
import signal

import pytest

CTX = mp.get_context("spawn")


def start(target, *args):
    p = CTX.Process(target=target, args=args, daemon=True)
    p.start()
    return p


@pytest.fixture
def procs():
    """Processes started through this list are killed at test end."""
    started = []
    yield started
    for p in started:
        if p.is_alive():
            os.kill(p.pid, signal.SIGKILL)
        p.join(10)


@pytest.fixture
def results():
    return CTX.Queue()
