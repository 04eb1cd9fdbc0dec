"""shm transport backend: one segment in /dev/shm, futex wake-ups."""
import os

from . import errors
from ._rdmaq import ffi, lib
from .handle import Handle

NAME = "shm"
SHM_DIR = "/dev/shm"
PREFIX = "rdmaq-"


def _boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def sweep_stale():
    """Unlink segments of writers that died before their readers attached.

    Returns the names removed.  Only segments this user may open are
    looked at; a live writer's segment is never touched.
    """
    removed = []
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


class WriterBackend:
    """Creates the C writer; the public Writer drives it through ffi/lib."""

    ffi = ffi
    lib = lib

    def __init__(self, config):
        """config: dict of struct rdmaq_config fields."""
        sweep_stale()
        cfg = ffi.new("struct rdmaq_config *", config)
        out = ffi.new("struct rdmaq_writer **")
        errors.raise_for(lib.rdmaq_shm_writer_create(out, cfg), "shm writer", lib, ffi)
        self.ptr = out[0]
        name = ffi.string(lib.rdmaq_shm_writer_name(self.ptr)).decode()
        self.handle = Handle(NAME, cfg.n_readers, {"name": name, "boot_id": _boot_id()})

    def before_ready(self, deadline):
        """Nothing to rendezvous: readers find the segment by name."""

    def close(self):
        """Nothing beyond the C object to release."""


class ReaderBackend:
    ffi = ffi
    lib = lib

    def __init__(self, handle, index, spin_ns):
        boot_id = handle.info.get("boot_id", "")
        if not isinstance(boot_id, str):
            raise ValueError(f"corrupt shm handle: info['boot_id'] must be a str, got {boot_id!r}")
        if boot_id and boot_id != _boot_id():
            raise ValueError("this shm handle was made on another host (or before a reboot); "
                             "use transport='verbs' for readers on other hosts")
        name = handle.info_str("name")
        out = ffi.new("struct rdmaq_reader **")
        errors.raise_for(lib.rdmaq_shm_reader_attach(out, name.encode(), index, spin_ns),
                         f"attach reader {index}", lib, ffi)
        self.ptr = out[0]

    def before_ready(self, deadline):
        pass

    def close(self):
        pass
