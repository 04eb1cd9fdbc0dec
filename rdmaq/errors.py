"""Exceptions, and the one place C error codes become them.

Bad arguments and bad handles raise ``ValueError``/``TypeError`` naming
what was wrong; a timeout raises the builtin ``TimeoutError``; every
other failure is an ``rdmaq.Error`` subclass carrying the errno.
"""
from __future__ import annotations

import errno
import os
from typing import Any


class Error(RuntimeError):
    """Base class of rdmaq's own errors; ``.errno`` is the C core's error code (or None)."""

    def __init__(self, message: str, err: int | None = None) -> None:
        super().__init__(message)
        self.errno = err


class ClosedError(Error):
    """This endpoint was closed (possibly from another thread)."""


class PeerClosedError(Error):
    """The peer closed the queue cleanly; every message before that was delivered."""


class PeerDeadError(Error):
    """A peer process died; the message names which."""


class ProtocolError(Error):
    """The ring holds something the protocol forbids: corruption or a version mismatch."""


class QueueNotFoundError(Error):
    """No queue by that handle here: its writer is gone or closed, it is already
    connected, or it lives on another host."""


class IndexInUseError(Error):
    """Another reader already attached this reader index."""


class SharedMemoryFullError(Error):
    """/dev/shm cannot hold the queue; the message says how much it needs."""


class MessageTooLarge(Error, ValueError):
    """A message above the queue's max_message_bytes."""


class ForkedError(Error):
    """An endpoint used in a process fork()ed from the one that made it: its queue
    is the parent's (make endpoints in the process that uses them)."""


_BY_ERRNO: dict[int, type[Error]] = {
    errno.ECANCELED: ClosedError,
    errno.EBADF: ClosedError,
    errno.EPIPE: PeerClosedError,
    errno.EOWNERDEAD: PeerDeadError,
    errno.EMSGSIZE: MessageTooLarge,
    errno.EBADMSG: ProtocolError,
    errno.EPROTO: ProtocolError,
    errno.ENOENT: QueueNotFoundError,
    errno.EBUSY: IndexInUseError,
    errno.ENOSPC: SharedMemoryFullError,
    errno.ESTALE: ForkedError,
}


def raise_for(rc: int, what: str, lib: Any, ffi: Any) -> None:
    """Turn a negative errno from the C core into the matching exception."""
    if rc >= 0:
        return
    err = -rc
    detail = ffi.string(lib.rdmaq_errmsg()).decode(errors="replace")
    msg = f"{what}: {detail or os.strerror(err)}"
    if err == errno.ETIMEDOUT:
        raise TimeoutError(msg)
    if err in (errno.EINVAL, errno.ENAMETOOLONG):
        raise ValueError(msg)
    raise _BY_ERRNO.get(err, Error)(msg, err)
