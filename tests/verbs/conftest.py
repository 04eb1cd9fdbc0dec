"""The verbs suite: real RDMA (SoftRoCE in the VM, or a NIC).

Tests skip with the reason when no ACTIVE RDMA port exists; those marked
``no_device`` (doctor) run everywhere.  Run the whole suite in the VM:

    tests/rxe/vm-run -- python -m pytest tests/verbs

Readers run in spawned processes, as on a real TP deployment; helpers they
run live in vhelpers.py.  Under rxe, tests run one at a time (pytest's
default), which keeps the number of busy QPs small.
"""
import multiprocessing as mp
import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CTX = mp.get_context("spawn")


def _why_skip():
    try:
        import rdmaq._verbs as v
    except ImportError as e:
        return f"verbs transport not built ({e}): install libibverbs-dev and rebuild"
    if not v.available():
        return ("no ACTIVE RDMA port on this machine (no NIC, no rdma_rxe): run "
                "`tests/rxe/vm-run -- python -m pytest tests/verbs`")
    return None


WHY_SKIP = _why_skip()


def pytest_configure(config):
    config.addinivalue_line("markers", "no_device: runs without an RDMA device")
    config.addinivalue_line("markers", "vm: needs the SoftRoCE VM's second device (rxe1)")


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        if not str(item.fspath).startswith(here):
            continue
        if WHY_SKIP and not item.get_closest_marker("no_device"):
            item.add_marker(pytest.mark.skip(reason=WHY_SKIP))


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


@pytest.fixture
def results_dir():
    """Where measured numbers go (next to perftest's, see tests/rxe/perftest-check.sh)."""
    d = os.environ.get("RDMAQ_RESULTS_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "results", "rxe")
    os.makedirs(d, exist_ok=True)
    return d
