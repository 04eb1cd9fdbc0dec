"""Coverage of every Python process of a coverage run (tests/mutation/cover.py).

On PYTHONPATH only during that run: with RDMAQ_MUT_COVDIR set, each process
(pytest itself, and every child a test spawns, which inherits the variable)
measures rdmaq's lines under the context RDMAQ_MUT_TEST names, the test that
was running when it started; pytest's own process switches contexts per test
(covplugin.py).
"""
import atexit
import os

_dir = os.environ.get("RDMAQ_MUT_COVDIR")
if _dir:
    try:
        import coverage
    except ImportError:  # a venv without coverage (the run checks the main one)
        coverage = None
    if coverage is not None:
        _cov = coverage.Coverage(data_file=os.path.join(_dir, ".coverage"), data_suffix=True,
                                 config_file=False, source=[os.environ["RDMAQ_MUT_SOURCE"]],
                                 context=os.environ.get("RDMAQ_MUT_TEST") or None)
        # silent: tests check what their children print
        _cov.set_option("run:disable_warnings", ["no-data-collected", "module-not-imported",
                                                 "module-not-measured", "already-imported",
                                                 "couldnt-parse", "no-ctracer"])
        # a fork()ed child (multiprocessing's workers, a test's children) leaves by
        # os._exit, which skips atexit: it saves there too (coverage.py 7.10 and later),
        # under the context of the test that forked it
        if coverage.version_info >= (7, 10):
            _cov.set_option("run:patch", ["_exit"])
        _cov.start()

        def _save():
            _cov.stop()
            _cov.save()

        atexit.register(_save)
