"""Shared by every test directory: the transport under test, child processes.

Tests that take the ``transport`` fixture run once per selected transport:
``--transport shm``, ``--transport verbs`` (repeatable; default both).  verbs
needs an ACTIVE RDMA port; without one its cases skip with the reason.  On
the host (no RDMA) ``pytest tests/core`` runs the shm cases; the SoftRoCE VM
runs the verbs ones: ``tests/rxe/vm-run -- python -m pytest --transport verbs
tests/core tests/verbs``.  Tests in tests/core that do not take ``transport``
check the shm ring, the C core or serialization: they run when shm is
selected.

Stdlib and pytest only: tests/vllm and tests/bench run in other venvs.
"""
import multiprocessing as mp
import os
import signal

import pytest

from transports import TRANSPORTS, why_no_verbs

CORE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "core")


def pytest_addoption(parser):
    parser.addoption("--transport", action="append", choices=TRANSPORTS,
                     help="run transport-parametrized tests on this transport "
                          "(repeatable; default: shm and verbs)")


def _selected(config):
    return config.getoption("transport") or list(TRANSPORTS)


def pytest_generate_tests(metafunc):
    if "transport" not in metafunc.fixturenames:
        return
    params = []
    for name in _selected(metafunc.config):
        marks = []
        if name == "verbs" and why_no_verbs():
            marks.append(pytest.mark.skip(reason=why_no_verbs()))
        params.append(pytest.param(name, marks=marks, id=name))
    metafunc.parametrize("transport", params)


def pytest_collection_modifyitems(config, items):
    if "shm" in _selected(config):
        return
    # shm not selected: drop tests/core's transport-independent tests.
    keep, drop = [], []
    for item in items:
        host_only = str(item.fspath).startswith(CORE + os.sep) and \
            "transport" not in getattr(item, "fixturenames", ())
        (drop if host_only else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


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
    """A queue children report into (spawn context, like children.start)."""
    return mp.get_context("spawn").Queue()
