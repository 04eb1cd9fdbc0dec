"""tests/verbs: what only the verbs transport has (QP pools, a second host,
latency next to perftest).  The checks both transports share are tests/core's,
parametrized by ``transport`` (see tests/conftest.py); `rdmaq doctor` with a
device is tests/doctor's.

Tests skip with the reason when no ACTIVE RDMA port exists.  Everything verbs,
in the VM:

    tests/rxe/vm-run -- python -m pytest --transport verbs tests/core tests/verbs tests/doctor

Under rxe, tests run one at a time (pytest's default), which keeps the number
of busy QPs small.
"""
import os

import pytest

from transports import why_no_verbs

HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(config, items):
    reason = why_no_verbs()
    if not reason:
        return
    for item in items:
        if str(item.fspath).startswith(HERE + os.sep):
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def results_dir():
    """Where measured numbers go (next to perftest's, see tests/rxe/perftest-check.sh)."""
    d = os.environ.get("RDMAQ_RESULTS_DIR") or os.path.join(HERE, "..", "..", "results", "rxe")
    os.makedirs(d, exist_ok=True)
    return d
