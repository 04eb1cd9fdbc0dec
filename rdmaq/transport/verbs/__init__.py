"""verbs transport: rings written with RDMA WRITE over per-CPU RC QPs.

The data path is C (``rdmaq._rdmaq_verbs``); this package is the bootstrap,
one module per concern:

* ``device``: the RDMA device context, process identity and counters, the C structs;
* ``wire``: the values the bootstrap exchanges (handle info included), each
  checked field by field;
* ``protocol``: the ATTACH/ATTACHED messages and their answers;
* ``net``: liveness connections, addresses, zmq sockets;
* ``writer`` and ``reader``: the two ends of the rendezvous.
"""
from __future__ import annotations

from ..._rdmaq_verbs import ffi, lib
from ...handle import Handle
from .device import available, process_stats
from .reader import ReaderBackend
from .writer import NAME, create_writer

__all__ = ["NAME", "ffi", "lib", "create_writer", "attach_reader", "available", "process_stats"]


def attach_reader(handle: Handle, index: int, spin_ns: int) -> ReaderBackend:
    return ReaderBackend(handle, index, spin_ns)
