"""A cell leaves none of vLLM's ZMQ ipc socket files behind: its processes get a folder of
the cell's own as VLLM_RPC_BASE_PATH, removed when the cell ends, also by Ctrl-C (vLLM's
queue leaves the files of the sockets it bound, and a killed one never closes them).  The
cell's processes are made up: the writer binds a socket there, as vLLM's does, and Ctrl-C
comes as it starts."""
import os
import stat
import tempfile
import types
import uuid

import pytest

from rdmaq.bench.micro import runner
from rdmaq.bench.step import main as step


class _Ctx:
    """A spawn context whose first process binds a socket in its adapter's
    VLLM_RPC_BASE_PATH when made and is interrupted by Ctrl-C as it starts."""

    def __init__(self):
        self.bound = []

    def Pipe(self):  # noqa: N802 - multiprocessing's name
        return object(), object()

    def RawArray(self, *args):  # noqa: N802
        return None

    def Process(self, target, args, daemon):  # noqa: N802
        adapter = args[1]
        ctx = self

        class Proc:
            pid = None

            def __init__(self):
                path = os.path.join(adapter.env["VLLM_RPC_BASE_PATH"], str(uuid.uuid4()))
                os.mknod(path, 0o600 | stat.S_IFSOCK)  # what a closed ipc:// socket leaves
                ctx.bound.append(path)

            def start(self):
                raise KeyboardInterrupt

        return Proc()


@pytest.fixture
def tmpdir_of_the_cell(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("VLLM_RPC_BASE_PATH", raising=False)
    return tmp_path


def test_a_micro_cell_stopped_by_ctrl_c_leaves_no_socket_file(tmpdir_of_the_cell, monkeypatch):
    ctx = _Ctx()
    monkeypatch.setattr(runner, "quiet_spawn_context", lambda: ctx)
    with pytest.raises(KeyboardInterrupt):
        runner.run_cell("vllm", 1, None, 0, False, [], 0.0, lambda *a: None)
    assert ctx.bound and all(os.path.dirname(p) != str(tmpdir_of_the_cell) for p in ctx.bound)
    assert list(tmpdir_of_the_cell.iterdir()) == []


def test_a_step_cell_stopped_by_ctrl_c_leaves_no_socket_file(tmpdir_of_the_cell, monkeypatch):
    ctx = _Ctx()
    monkeypatch.setattr(step, "quiet_spawn_context", lambda: ctx)
    args = types.SimpleNamespace(barrier="spin", device="cpu")
    with pytest.raises(KeyboardInterrupt):
        step.run_cell("vllm", 1, args, None, None, 0, None, 0, lambda *a: None)
    assert ctx.bound
    assert list(tmpdir_of_the_cell.iterdir()) == []
