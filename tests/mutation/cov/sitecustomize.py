"""Coverage of every Python process of a coverage run (tests/mutation/cover.py).

On PYTHONPATH only during that run: with RDMAQ_MUT_COVDIR set, each process
(pytest itself, and every child a test spawns, which inherits the variable)
measures rdmaq's lines under the context RDMAQ_MUT_TEST names, the test that
was running when it started; pytest's own process switches contexts per test
(covplugin.py).

A process that leaves by os._exit writes the C counters of the coverage
build first (build.py's rdmaq_mut_gcov_flush), as an exit would.
"""
import atexit
import os
import sys

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

    # A fork()ed child's C counters (ring.c's fork count, a child's calls into the
    # core) are written at exit, which os._exit skips: it writes them first, under
    # the GCOV_PREFIX of the test that forked it.
    _os_exit = os._exit

    def _exit(status):
        ext = sys.modules.get("rdmaq._rdmaq")
        if ext is not None:
            try:
                import ctypes
                ctypes.CDLL(ext.__file__).rdmaq_mut_gcov_flush()
            except (OSError, AttributeError):  # not the coverage build
                pass
        _os_exit(status)

    os._exit = _exit
