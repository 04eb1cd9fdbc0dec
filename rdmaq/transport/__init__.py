"""The transports: what creates the C ring endpoints and connects them.

``rdmaq.Writer``/``rdmaq.Reader`` (rdmaq/queue.py) drive the ring through a
transport's cffi library; a transport only creates the C objects and does
whatever its readers need before the ring is ready (verbs: the rendezvous
that connects QPs).  Each transport is a module that fits :class:`Transport`:
``shm`` (rdmaq/transport/shm.py) and ``verbs`` (rdmaq/transport/verbs/),
listed with their handles' info types in ``rdmaq.handle.TRANSPORTS``.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, cast

from ..handle import TRANSPORTS

if TYPE_CHECKING:
    from ..handle import Handle


class RingConfig(TypedDict):
    """struct rdmaq_config: one ring's geometry and its writer's spin."""

    n_readers: int
    slot_bytes: int
    slots: int
    max_message: int
    spin_ns: int


class Backend(Protocol):
    """One endpoint's transport side: the C object and its life around it."""

    @property
    def ptr(self) -> Any:
        """struct rdmaq_writer * or struct rdmaq_reader *, for the ring's C calls."""

    def before_ready(self, deadline: float | None) -> None:
        """Whatever must happen before the ring's own wait_ready (a monotonic deadline)."""

    def extra_stats(self) -> dict[str, int]:
        """The transport's counters, added to the endpoint's ``stats``."""

    def close(self) -> None:
        """Release what the transport holds beyond the C object (its owner destroys that)."""


class WriterBackend(Backend, Protocol):
    @property
    def handle(self) -> Handle:
        """What readers attach with."""


class Transport(Protocol):
    """A transport module."""

    NAME: str  # its key in rdmaq.handle.TRANSPORTS
    ffi: Any  # the cffi FFI and library of its extension
    lib: Any

    def available(self) -> bool:
        """Can it run here (verbs: an active RDMA port)?  transport="auto" asks."""

    def create_writer(self, config: RingConfig, **options: Any) -> WriterBackend:
        """The writer of a new queue; ``options`` are the transport's own keywords."""

    def attach_reader(self, handle: Handle, index: int, spin_ns: int) -> Backend:
        """Reader ``index`` of the queue ``handle`` names (a handle of this transport,
        whose common fields ``Handle.check`` has checked)."""


def _unknown(name: str) -> ValueError:
    return ValueError(f"unknown transport {name!r}: choose one of auto, {', '.join(TRANSPORTS)}")


def load(name: str) -> Transport:
    """The transport called ``name``; ValueError if unknown or not built here."""
    registered = TRANSPORTS.get(name)
    if registered is None:
        raise _unknown(name)
    try:
        return cast(Transport, importlib.import_module(registered.module))
    except ImportError as e:  # built without its library (verbs: libibverbs), or it does not load
        raise ValueError(f"transport {name!r} is not available: {e}") from e


def resolve(name: str) -> str:
    """``name`` checked; "auto": the first of TRANSPORTS that loads here and is available."""
    if name != "auto":
        if name not in TRANSPORTS:
            raise _unknown(name)
        return name
    for candidate in TRANSPORTS:
        try:
            if load(candidate).available():
                return candidate
        except ValueError:
            continue
    raise ValueError(f"transport 'auto': none of {', '.join(TRANSPORTS)} is available here "
                     "(`rdmaq doctor` says why)")
