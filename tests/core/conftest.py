"""Fixtures of tests/core (the suite's shared ones are in tests/conftest.py)."""
import pytest


@pytest.fixture(scope="session")
def c_build(tmp_path_factory):
    """One build folder (tests/c/Makefile's O=) for the C tests of a run: the
    objects several of them link (wait.o, cadence.o ... in each variant) are
    compiled once, not once per test."""
    return tmp_path_factory.mktemp("c-build")
