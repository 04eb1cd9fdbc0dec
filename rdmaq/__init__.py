"""rdmaq: a one-writer / N-reader broadcast ring over RDMA or shared memory.

    w = rdmaq.Writer(4)                 # this process writes
    h = w.handle                        # pickle it to the readers
    r = rdmaq.Reader(h, i)              # in reader process i
    w.send(obj); r.recv()
"""
import sys as _sys
from pathlib import Path as _Path

from . import _source_tree

if not _source_tree.extension_found():
    # a source tree without its extension, found first on sys.path (a script run inside the
    # checkout): the installed rdmaq takes its place, else the error says what to run
    _installed = _source_tree.installed_elsewhere(_sys.path, _Path(__file__).resolve().parent)
    if _installed is None:
        raise ImportError(_source_tree.not_built_message(), name="rdmaq._rdmaq")
    _source_tree.load_installed(_installed)
else:
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
