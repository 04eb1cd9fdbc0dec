"""`rdmaq vllm check` where vLLM finds no device: a CUDA build of vLLM on a machine without a
GPU (what `pip install vllm` gives there) is named as such, with the install that works,
instead of vLLM's bare "Failed to infer device type". vLLM itself is faked here; the vllm
tier runs the real check against a CUDA build (tests/vllm/test_check.py)."""
import importlib.metadata
import importlib.util

import pytest

from rdmaq.vllm import cli


@pytest.fixture
def vllm_found(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "vllm" else real(name, *a))

    def found(version, device):
        monkeypatch.setattr(cli, "_vllm_version", lambda: (version, "vllm"))
        monkeypatch.setattr(cli, "_device_type", lambda: device)
    return found


@pytest.mark.parametrize("version, words", [
    ("0.33.0", ["vLLM 0.33.0 is a CUDA build of vLLM on a machine without a GPU",
                "Failed to infer device type", "use `rdmaq vllm install-cpu`"]),
    ("0.33.0+rocm700", ["a ROCm build of vLLM on a machine without a GPU", "rdmaq vllm install-cpu"]),
    ("0.32.0+cpu", ["a CPU build", "VLLM_LOGGING_LEVEL=DEBUG"]),
])
def test_no_device_names_the_build_and_the_fix(vllm_found, capsys, version, words):
    vllm_found(version, "")
    assert cli.main(["check"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rdmaq vllm: ") and len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, err


def test_a_device_found_goes_on_to_the_plugin_checks(vllm_found, monkeypatch, capsys):
    vllm_found("0.33.0", "cuda")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    assert cli.main(["check"]) == 1
    out, err = capsys.readouterr()
    assert "vLLM's device here: cuda" in out
    assert "entry point 'rdmaq' is missing" in err


def test_vllm_plugins_must_list_rdmaq_when_set(vllm_found, monkeypatch, capsys):
    vllm_found("0.33.0", "cuda")
    entry = importlib.metadata.EntryPoint("rdmaq", cli.ENTRY_POINT, "vllm.general_plugins")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [entry])
    monkeypatch.setattr(cli, "_flag_added", lambda: True)
    monkeypatch.setenv("VLLM_PLUGINS", "lora,other")
    assert cli.main(["check"]) == 1
    assert "VLLM_PLUGINS='lora,other' does not list rdmaq: vLLM will not load it" in capsys.readouterr().err
    monkeypatch.setenv("VLLM_PLUGINS", "lora, rdmaq ")
    assert cli.main(["check"]) == 0
    assert "VLLM_PLUGINS: 'lora, rdmaq '" in capsys.readouterr().out
    monkeypatch.delenv("VLLM_PLUGINS")
    assert cli.main(["check"]) == 0
    out = capsys.readouterr().out
    assert "VLLM_PLUGINS: unset (every plugin loads)" in out and "rdmaq vllm: the plugin is active" in out
