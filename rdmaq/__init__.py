"""rdmaq: a one-writer / N-reader broadcast ring over RDMA or shared memory.

    w = rdmaq.Writer(4)                 # this process writes
    h = w.handle                        # pickle it to the readers
    r = rdmaq.Reader(h, i)              # in reader process i
    w.send(obj); r.recv()
"""
from .errors import (
    ClosedError,
    Error,
    ForkedError,
    IndexInUseError,
    MessageTooLarge,
    PeerClosedError,
    PeerDeadError,
    ProtocolError,
    QueueNotFoundError,
    SharedMemoryFullError,
)
from .handle import Handle
from .queue import Reader, Writer
from .transport import resolve as resolve_transport

__all__ = [
    "Writer", "Reader", "Handle", "resolve_transport", "Error", "ClosedError",
    "PeerClosedError", "PeerDeadError", "MessageTooLarge", "ProtocolError", "QueueNotFoundError",
    "IndexInUseError", "SharedMemoryFullError", "ForkedError",
]
__version__ = "0.1.0"
