"""Exceptions, and the one place C error codes become them."""
import errno
import os


class Error(RuntimeError):
    """Base class of rdmaq's own errors."""


class ClosedError(Error):
    """This endpoint was closed (possibly from another thread)."""


class PeerClosedError(Error):
    """The peer closed the queue cleanly; every message before that was delivered."""


class PeerDeadError(Error):
    """A peer process died; the message names which."""


class MessageTooLarge(ValueError):
    """A message above the queue's max_message_bytes."""


class ProtocolError(Error):
    """The ring holds something the protocol forbids: corruption or a version mismatch."""


def raise_for(rc, what, lib, ffi):
    """Turn a negative errno from the C core into the matching exception."""
    if rc >= 0:
        return
    err = -rc
    detail = ffi.string(lib.rdmaq_errmsg()).decode(errors="replace")
    msg = f"{what}: {detail or os.strerror(err)}"
    if err == errno.ETIMEDOUT:
        raise TimeoutError(msg)
    if err in (errno.ECANCELED, errno.EBADF):
        raise ClosedError(msg)
    if err == errno.EPIPE:
        raise PeerClosedError(msg)
    if err == errno.EOWNERDEAD:
        raise PeerDeadError(msg)
    if err == errno.EMSGSIZE:
        raise MessageTooLarge(msg)
    if err in (errno.EINVAL, errno.ENAMETOOLONG):
        raise ValueError(msg)
    if err in (errno.EBADMSG, errno.EPROTO):
        raise ProtocolError(msg)
    raise OSError(err, msg)
