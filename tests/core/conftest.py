"""Fixtures of tests/core (the suite's shared ones are in tests/conftest.py)."""
import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def c_build(tmp_path_factory):
    """One build folder (tests/c/Makefile's O=) for the C tests of a run: the
    objects several of them link (wait.o, cadence.o ... in each variant) are
    compiled once, not once per test.  RDMAQ_C_BUILD names a folder kept from
    run to run, where make rebuilds only what changed (the mutation sweep
    gives each of its trees one)."""
    kept = os.environ.get("RDMAQ_C_BUILD")
    if kept:
        Path(kept).mkdir(parents=True, exist_ok=True)
        return Path(kept)
    return tmp_path_factory.mktemp("c-build")
