"""shm transport: one segment in /dev/shm, futex wake-ups.

Readers find the segment by the name in the handle; nothing to rendezvous.
"""
from __future__ import annotations

import errno
import os
from typing import Any, cast

from .. import errors
from .._rdmaq import ffi, lib
from ..fields import Bad, attr, text
from ..handle import Handle, ShmInfo
from . import RingConfig

__all__ = ["NAME", "ffi", "lib", "available", "create_writer", "attach_reader", "sweep_stale", "check_info"]

NAME = "shm"
SHM_DIR = "/dev/shm"
PREFIX = "rdmaq-"


def available() -> bool:
    """Wherever rdmaq imports: a /dev/shm too small or missing is the writer's error, naming it."""
    return True


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def sweep_stale() -> list[str]:
    """Unlink segments of writers that died before their readers attached.

    Returns the names removed.  Only segments this user may open are
    looked at; a live writer's segment is never touched.
    """
    removed: list[str] = []
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(PREFIX):
            continue
        if lib.rdmaq_shm_segment_stale(name.encode()) == 1:
            try:
                os.unlink(os.path.join(SHM_DIR, name))
                removed.append(name)
            except OSError:
                pass
    return removed


def check_info(info: ShmInfo) -> ShmInfo:
    """The handle's info with every field checked; ValueError names a bad one."""
    try:
        name = text(attr(info, "name", "info.name"), "info.name", lib.RDMAQ_SHM_NAME_MAX)
        if not name or "/" in name:
            raise Bad("info.name", f"is not a segment name: {name!r}")
        boot_id = text(attr(info, "boot_id", "info.boot_id"), "info.boot_id", 64)
    except Bad as e:
        raise ValueError(f"corrupt shm handle: {e}") from None
    return ShmInfo(name, boot_id)


class WriterBackend:
    """The C writer of a new segment."""

    def __init__(self, config: RingConfig) -> None:
        sweep_stale()
        cfg = ffi.new("struct rdmaq_config *", config)
        out = ffi.new("struct rdmaq_writer **")
        errors.raise_for(lib.rdmaq_shm_writer_create(out, cfg), "shm writer", lib, ffi)
        self.ptr = out[0]
        name = ffi.string(lib.rdmaq_shm_writer_name(self.ptr)).decode()
        self.handle = Handle(NAME, cfg.n_readers, ShmInfo(name, _boot_id()))

    def before_ready(self, deadline: float | None) -> None:
        """Nothing to rendezvous: readers find the segment by name."""

    def extra_stats(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        """Nothing beyond the C object to release."""


class ReaderBackend:
    """The C reader, attached to the segment the handle names."""

    def __init__(self, handle: Handle, index: int, spin_ns: int) -> None:
        info = check_info(cast(ShmInfo, handle.info))  # Handle.check saw to its type
        if info.boot_id and info.boot_id != _boot_id():
            raise errors.QueueNotFoundError(
                "this shm handle was made on another host (or before a reboot): its info.boot_id "
                "is not this host's; use transport='verbs' for readers on other hosts", errno.ENOENT)
        out = ffi.new("struct rdmaq_reader **")
        errors.raise_for(lib.rdmaq_shm_reader_attach(out, info.name.encode(), index, spin_ns),
                         f"attach reader {index}", lib, ffi)
        self.ptr = out[0]

    def before_ready(self, deadline: float | None) -> None:
        pass

    def extra_stats(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        pass


def create_writer(config: RingConfig, **options: Any) -> WriterBackend:
    if options:
        raise TypeError(f"transport 'shm' takes no options, got {', '.join(sorted(options))}")
    return WriterBackend(config)


def attach_reader(handle: Handle, index: int, spin_ns: int) -> ReaderBackend:
    return ReaderBackend(handle, index, spin_ns)
