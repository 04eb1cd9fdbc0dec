"""shm transport backend: rings in /dev/shm, futex wake-ups."""
import os
import secrets

from . import errors
from ._rdmaq import ffi, lib
from .handle import Handle

NAME = "shm"


def _boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def available():
    return os.path.isdir("/dev/shm")


class WriterBackend:
    """Creates the C writer; the public Writer drives it through ffi/lib."""

    ffi = ffi
    lib = lib

    def __init__(self, config):
        """config: dict of struct rdmaq_config fields."""
        cfg = ffi.new("struct rdmaq_config *", config)
        name = f"rdmaq-{os.getpid()}-{secrets.token_hex(6)}"
        out = ffi.new("struct rdmaq_writer **")
        errors.raise_for(lib.rdmaq_shm_writer_create(out, name.encode(), cfg), "shm writer", lib, ffi)
        self.ptr = out[0]
        self.handle = Handle(NAME, cfg.n_readers, {"name": name, "boot_id": _boot_id()})

    def before_ready(self, deadline):
        """Nothing to rendezvous: readers find the segment by name."""

    def close(self):
        """Nothing beyond the C object to release."""


class ReaderBackend:
    ffi = ffi
    lib = lib

    def __init__(self, handle, index, spin_ns):
        boot_id = handle.info.get("boot_id")
        if boot_id and boot_id != _boot_id():
            raise ValueError("this shm handle was made on another host (or before a reboot); "
                             "use transport='verbs' for readers on other hosts")
        name = handle.info.get("name")
        if not isinstance(name, str):
            raise ValueError(f"corrupt shm handle: no segment name in {handle.info!r}")
        out = ffi.new("struct rdmaq_reader **")
        errors.raise_for(lib.rdmaq_shm_reader_attach(out, name.encode(), index, spin_ns),
                         f"attach reader {index}", lib, ffi)
        self.ptr = out[0]

    def before_ready(self, deadline):
        pass

    def close(self):
        pass
