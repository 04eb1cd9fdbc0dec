"""The small picklable token a writer hands to its readers, and the transports it can name.

A handle names its transport and carries that transport's details: a
:class:`ShmInfo` or a :class:`VerbsInfo`.  Handles pickle to a few hundred
bytes.  A handle comes back from the caller, maybe from another host, so a
reader checks all of it before use: ``Handle.check`` the common fields and
the info's type, the transport every field of its info.

``TRANSPORTS`` is the one list of transports: name, module, info type.  The
info types live here, beside it, because a handle unpickles by their module
path, also where a transport's extension does not load.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TypeGuard

from ._rdmaq import lib as _core

HANDLE_VERSION = 3  # 3: typed transport info (2: a dict)
MAX_READERS: int = _core.RDMAQ_MAX_READERS  # the C core's limit (rdmaq.h)


@dataclass(frozen=True)
class ShmInfo:
    """A shm queue: its segment in /dev/shm, and the boot that made it."""

    name: str
    boot_id: str  # /proc/sys/kernel/random/boot_id of the writer's host; "" unknown


@dataclass(frozen=True)
class VerbsInfo:
    """A verbs queue: where its writer takes ATTACH requests, and its rings' geometry."""

    proto: int  # the bootstrap's protocol version
    endpoint: str  # the writer's zmq ROUTER, tcp://HOST:PORT
    live: tuple[str, int]  # the writer's liveness listener (ip, port)
    queue: str  # this queue's id, hex
    writer: bytes  # the writer process's id (16 bytes)
    pid: int  # the writer's pid and host, for messages
    host: str
    device: str  # the writer's RDMA device and port GID (hex), for messages
    gid: str
    slot_bytes: int
    slots: int
    max_message: int


TransportInfo = ShmInfo | VerbsInfo


@dataclass(frozen=True)
class Registered:
    """A transport: the module that makes its endpoints (imported when first used;
    rdmaq/transport/__init__.py says what it provides) and the info its handles carry."""

    module: str
    info: type[TransportInfo]


# Every transport, in the order transport="auto" tries them: the first whose module loads
# here and says available().  A new transport is a line here, its info above and its module.
TRANSPORTS: dict[str, Registered] = {
    "verbs": Registered("rdmaq.transport.verbs", VerbsInfo),
    "shm": Registered("rdmaq.transport.shm", ShmInfo),
}


@dataclass(frozen=True)
class Handle:
    """Everything a reader needs to attach: which transport, and its details."""

    transport: str
    n_readers: int
    info: TransportInfo
    version: int = HANDLE_VERSION

    def check(self, index: object) -> None:
        """Raise ValueError/TypeError naming the field if this handle or ``index`` is unusable."""
        if not isinstance(self, Handle):
            raise TypeError(f"not an rdmaq.Handle: {type(self).__name__}")
        # A handle pickled by another release may lack a field (the class's
        # default would hide a missing version).
        for f in fields(Handle):
            if f.name not in vars(self):
                raise ValueError(f"handle field {f.name!r} is missing: writer and reader run "
                                 "different rdmaq releases, or the handle was altered")
        if not _is_int(self.version):
            raise TypeError(f"handle version must be an int, got {type(self.version).__name__}")
        if self.version != HANDLE_VERSION:
            raise ValueError(f"handle version {self.version} is not {HANDLE_VERSION}: "
                             "writer and reader run different rdmaq releases")
        if not isinstance(self.transport, str):
            raise TypeError(f"handle transport must be a str, got {type(self.transport).__name__}")
        registered = TRANSPORTS.get(self.transport)
        if registered is None:
            raise ValueError(f"handle is for unknown transport {self.transport!r}")
        info_type = registered.info
        if not _is_int(self.n_readers):
            raise TypeError(f"handle n_readers must be an int, got {type(self.n_readers).__name__}")
        if not 1 <= self.n_readers <= MAX_READERS:
            raise ValueError(f"handle n_readers must be in 1..{MAX_READERS}, got {self.n_readers}")
        if type(self.info) is not info_type:
            raise TypeError(f"handle info must be a {info_type.__name__} for transport "
                            f"{self.transport!r}, got {type(self.info).__name__}")
        if not _is_int(index):
            raise TypeError(f"reader index must be an int, got {type(index).__name__}")
        if not 0 <= index < self.n_readers:
            raise ValueError(f"reader index {index} out of range: queue has {self.n_readers} readers")


def _is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)
