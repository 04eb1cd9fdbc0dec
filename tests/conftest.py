"""Shared by every test directory: the transport under test, child processes.

Tests that take the ``transport`` fixture run once per selected transport:
``--transport shm``, ``--transport verbs`` (repeatable; default both).  verbs
needs an ACTIVE RDMA port; without one its cases skip with the reason.  On
the host (no RDMA) ``pytest tests/core`` runs the shm cases; the SoftRoCE VM
runs the verbs ones: ``tests/rxe/vm-run -- python -m pytest --transport verbs
tests/core tests/verbs``.  Tests in tests/core that do not take ``transport``
check the shm ring, the C core or serialization: they run when shm is
selected.

Every test has a time limit (pytest-timeout, ``timeout`` in pyproject.toml;
``@pytest.mark.timeout(N)`` where a test needs more).  Limits are multiplied
by RDMAQ_TIMEOUT_SCALE (default 1; 5 inside the emulated SoftRoCE VM, whose
guest runs 10-50x slower), and by 3 for the verbs cases.

RDMAQ_REQUIRE_ALL=1 (set by tests/run_all.sh, i.e. in CI) turns a skip for a
missing dependency into a failure: a skip whose reason starts with "could not
import" (pytest.importorskip) or "missing dependency", and, inside the VM,
"no ACTIVE RDMA port".  Without it a developer without vLLM or gcc gets
skips that say what is missing.

``--soak`` runs the soak tests at full size (10**6 messages).

Stdlib and pytest only: tests/vllm and tests/bench run in other venvs.
"""
import multiprocessing as mp
import os
import signal

import pytest

from transports import SHM, TRANSPORTS, shm_leftovers, why_no_verbs

CORE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "core")

IN_VM = bool(os.environ.get("RDMAQ_VM"))
REQUIRE_ALL = os.environ.get("RDMAQ_REQUIRE_ALL") == "1"
MISSING_DEPENDENCY = ("could not import", "missing dependency")
TIMEOUT_SCALE = float(os.environ.get("RDMAQ_TIMEOUT_SCALE") or (5 if IN_VM else 1))
VERBS_TIMEOUT_FACTOR = 3
SOAK_TIMEOUT = 3600  # --soak: 10**6 messages to 4 readers


def pytest_addoption(parser):
    parser.addoption("--transport", action="append", choices=TRANSPORTS,
                     help="run transport-parametrized tests on this transport "
                          "(repeatable; default: shm and verbs)")
    parser.addoption("--soak", action="store_true",
                     help="run the soak tests at full size (10**6 messages)")


def pytest_configure(config):
    config.addinivalue_line("markers", "soak: scaled down unless --soak is given")


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


def _scale_timeouts(config, items):
    """Scale each test's limit (its timeout mark, else the ini default)."""
    try:
        default = float(config.getini("timeout") or 0)
    except ValueError:  # pytest-timeout missing: its ini key is unknown
        return
    soak = config.getoption("soak")
    for item in items:
        mark = item.get_closest_marker("timeout")
        limit = float(mark.args[0]) if mark and mark.args else default
        if soak and item.get_closest_marker("soak"):
            limit, mark = SOAK_TIMEOUT, None
        if not limit:
            continue
        callspec = getattr(item, "callspec", None)
        factor = TIMEOUT_SCALE
        if callspec is not None and callspec.params.get("transport") == "verbs":
            factor *= VERBS_TIMEOUT_FACTOR
        if factor != 1 or mark is None:  # first, so that it is the closest mark
            item.add_marker(pytest.mark.timeout(limit * factor), append=False)


def _missing_dependency(reason):
    if reason.startswith(MISSING_DEPENDENCY):
        return True
    return IN_VM and "no ACTIVE RDMA port" in reason


def _skip_reason(report):
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
    else:
        reason = str(longrepr)
    return reason.removeprefix("Skipped: ")


def _fail_missing(report):
    """Under RDMAQ_REQUIRE_ALL=1, a skip for a missing dependency fails."""
    if not (REQUIRE_ALL and report.skipped):
        return
    if hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    if _missing_dependency(reason):
        report.outcome = "failed"
        report.longrepr = (f"RDMAQ_REQUIRE_ALL=1 (CI) forbids this skip: {reason}\n"
                           "install what is missing (tests/run_all.sh does), or unset "
                           "RDMAQ_REQUIRE_ALL to get a skip")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_missing(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_missing(outcome.get_result())


def pytest_collection_modifyitems(config, items):
    _scale_timeouts(config, items)
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


@pytest.fixture
def shm_names():
    """shm queue names a test registers: what is left of them in /dev/shm at
    the end (a failing or xfail test, a crashed writer) is removed."""
    names = []
    yield names
    for name in names:
        for left in shm_leftovers(name):
            try:
                os.unlink(os.path.join(SHM, left))
            except FileNotFoundError:
                pass
