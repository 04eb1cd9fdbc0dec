import pytest

from command import kill_what_was_started


@pytest.fixture(autouse=True)
def _no_command_left_running():
    yield
    kill_what_was_started()
