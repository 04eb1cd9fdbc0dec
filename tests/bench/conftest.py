"""tests/bench: the benchmark harness's functional tests and pytest-benchmark micro-benchmarks.

Kept out of the default test run (testpaths = tests/core); tests/bench/ci.sh runs them with
--benchmark-disable, so each micro-benchmark body runs once as a plain functional check.
"""


def pytest_configure(config):
    config.addinivalue_line("markers", "bench: micro-benchmark (pytest-benchmark); "
                                       "run with --benchmark-disable in CI")
