"""pytest plugin of a coverage run (tests/mutation/cover.py): which lines each test runs.

Around each test: Python's coverage context becomes the test's node id (in
this process, and through RDMAQ_MUT_TEST in every process it starts), and
the C counters go to a directory of the test's own (GCOV_PREFIX, inherited
by its children; this process's counters are written out after the test by
the coverage build's rdmaq_mut_gcov_flush).  tests.json lists the tests:
node id, counters directory, seconds, outcome.
"""
import ctypes
import json
import os
import time

import pytest

_DIR = os.environ["RDMAQ_MUT_COVDIR"]
_tests = []
_flush = None


def _gcov_flush():
    global _flush
    if _flush is None:
        import rdmaq._rdmaq as ext
        _flush = ctypes.CDLL(ext.__file__).rdmaq_mut_gcov_flush
    _flush()


def _context(name):
    import coverage
    cov = coverage.Coverage.current()
    if cov is not None:
        cov.switch_context(name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    idx = len(_tests)
    rec = {"nodeid": item.nodeid, "gcda": f"{os.path.basename(_DIR)}-{idx}", "outcome": "passed"}
    _tests.append(rec)
    _gcov_flush()  # what ran between tests is nobody's
    os.environ["GCOV_PREFIX"] = os.path.join(_DIR, "gcda", rec["gcda"])
    os.environ["RDMAQ_MUT_TEST"] = item.nodeid
    _context(item.nodeid)
    t0 = time.monotonic()
    yield
    rec["seconds"] = round(time.monotonic() - t0, 3)
    _gcov_flush()
    _context("")
    os.environ["GCOV_PREFIX"] = os.path.join(_DIR, "gcda", "between")
    os.environ["RDMAQ_MUT_TEST"] = ""
    _save()  # after every test: a run that a time limit ends keeps what it measured


def _save():
    tmp = os.path.join(_DIR, "tests.json.tmp")
    with open(tmp, "w") as f:
        json.dump(_tests, f)
    os.replace(tmp, os.path.join(_DIR, "tests.json"))


def pytest_runtest_logreport(report):
    if report.failed:
        _tests[-1]["outcome"] = "failed"
    elif report.skipped and _tests[-1]["outcome"] == "passed":
        _tests[-1]["outcome"] = "skipped"


def pytest_sessionfinish(session):
    _save()
