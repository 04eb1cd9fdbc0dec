"""The documented attributes of the exceptions (docs/api.md, "Errors"): the class of
each failure, ``.errno`` (the C core's code), and what the message names."""
import errno
import os
import threading

import pytest

import rdmaq
from children import TIMEOUT
from observe import blocked_call
from rdmaq import errors
from rdmaq._rdmaq import ffi, lib


def test_every_rdmaq_error_is_a_runtime_error_with_errno():
    e = rdmaq.Error("x", errno.EIO)
    assert isinstance(e, RuntimeError) and e.errno == errno.EIO and str(e) == "x"
    assert rdmaq.Error("y").errno is None
    for cls in (rdmaq.ClosedError, rdmaq.PeerClosedError, rdmaq.PeerDeadError, rdmaq.ProtocolError,
                rdmaq.QueueNotFoundError, rdmaq.IndexInUseError, rdmaq.SharedMemoryFullError,
                rdmaq.MessageTooLarge):
        assert issubclass(cls, rdmaq.Error)
    assert issubclass(rdmaq.MessageTooLarge, ValueError)
    assert not issubclass(rdmaq.ClosedError, ValueError)


@pytest.mark.parametrize("err, cls", [
    (errno.ECANCELED, rdmaq.ClosedError),
    (errno.EBADF, rdmaq.ClosedError),
    (errno.EPIPE, rdmaq.PeerClosedError),
    (errno.EOWNERDEAD, rdmaq.PeerDeadError),
    (errno.EMSGSIZE, rdmaq.MessageTooLarge),
    (errno.EBADMSG, rdmaq.ProtocolError),
    (errno.EPROTO, rdmaq.ProtocolError),
    (errno.ENOENT, rdmaq.QueueNotFoundError),
    (errno.EBUSY, rdmaq.IndexInUseError),
    (errno.ENOSPC, rdmaq.SharedMemoryFullError),
    (errno.EIO, rdmaq.Error),  # anything else: the base class, errno kept
    (errno.ENOMEM, rdmaq.Error),
])
def test_each_errno_of_the_core_becomes_its_exception(err, cls):
    with pytest.raises(cls) as e:
        errors.raise_for(-err, "what", lib, ffi)
    assert type(e.value) is cls
    assert e.value.errno == err
    assert str(e.value).startswith("what: ")


@pytest.mark.parametrize("err, cls", [(errno.ETIMEDOUT, TimeoutError), (errno.EINVAL, ValueError),
                                      (errno.ENAMETOOLONG, ValueError)])
def test_timeouts_and_bad_arguments_are_builtin_exceptions(err, cls):
    with pytest.raises(cls) as e:
        errors.raise_for(-err, "what", lib, ffi)
    assert type(e.value) is cls  # not an rdmaq.Error: callers catch the builtin
    assert str(e.value).startswith("what: ")


@pytest.mark.parametrize("rc", [0, 1, 7])
def test_success_raises_nothing(rc):
    errors.raise_for(rc, "what", lib, ffi)


def test_without_a_message_from_the_core_the_errno_is_named():
    """A thread whose core never set a message gets strerror's text."""
    box = {}

    def fresh_thread():
        try:
            errors.raise_for(-errno.EIO, "what", lib, ffi)
        except rdmaq.Error as e:
            box["e"] = e

    t = threading.Thread(target=fresh_thread)
    t.start()
    t.join(TIMEOUT)
    assert str(box["e"]) == "what: Input/output error"


def test_the_core_s_message_follows_what_failed(transport):
    with rdmaq.Writer(1, transport=transport, max_message_bytes=10) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.put(bytes(10), timeout=TIMEOUT)
        with pytest.raises(rdmaq.MessageTooLarge) as e:
            w.put(bytes(11), timeout=TIMEOUT)
        assert e.value.errno == errno.EMSGSIZE
        assert str(e.value) == "writer put: message of 11 bytes exceeds max_message_bytes=10"
        assert r.get(timeout=TIMEOUT) == bytes(10)
        r.close()


def test_a_queue_that_is_gone_names_itself_and_why(transport):
    if transport != "shm":
        pytest.skip("shm: the handle names a segment")
    w = rdmaq.Writer(1, transport="shm")
    h = w.handle
    w.close()
    with pytest.raises(rdmaq.QueueNotFoundError) as e:
        rdmaq.Reader(h, 0)
    assert e.value.errno == errno.ENOENT
    assert h.info.name in str(e.value) and "writer is gone or closed" in str(e.value)


def test_an_index_attached_twice_names_the_index_and_the_holder():
    with rdmaq.Writer(2, transport="shm") as w:
        r = rdmaq.Reader(w.handle, 1)
        with pytest.raises(rdmaq.IndexInUseError) as e:
            rdmaq.Reader(w.handle, 1)
        assert e.value.errno == errno.EBUSY
        assert str(e.value) == (f"attach reader 1: reader index 1 is already attached (pid {os.getpid()})")
        r.close()


def test_closed_endpoints_raise_closed_error(transport):
    w = rdmaq.Writer(1, transport=transport)
    r = rdmaq.Reader(w.handle, 0)
    w.wait_ready(timeout=TIMEOUT)
    r.close()
    with pytest.raises(rdmaq.ClosedError, match="reader is closed"):
        r.get(timeout=0)
    with pytest.raises(rdmaq.ClosedError, match="reader is closed"):
        r.wait_ready(timeout=0)
    w.close()
    with pytest.raises(rdmaq.ClosedError, match="writer is closed"):
        w.put(b"x", timeout=0)
    w.close()  # twice: nothing
    r.close()


def test_a_peer_s_close_after_the_last_message(transport):
    w = rdmaq.Writer(1, transport=transport)
    r = rdmaq.Reader(w.handle, 0)
    w.wait_ready(timeout=TIMEOUT)
    w.put(b"last", timeout=TIMEOUT)
    w.close()
    assert r.get(timeout=TIMEOUT) == b"last"
    for _ in range(2):  # and stays so
        with pytest.raises(rdmaq.PeerClosedError) as e:
            r.get(timeout=TIMEOUT)
        assert e.value.errno == errno.EPIPE
        assert str(e.value).startswith("reader get: writer closed the queue")
    r.close()


def test_the_last_reader_s_close_is_the_writer_s_peer_closed(transport):
    with rdmaq.Writer(2, transport=transport) as w:
        rs = [rdmaq.Reader(w.handle, i) for i in range(2)]
        w.wait_ready(timeout=TIMEOUT)
        rs[0].close()
        w.put(b"to one", timeout=TIMEOUT)  # one reader left: fine
        rs[1].close()
        with pytest.raises(rdmaq.PeerClosedError) as e:
            w.put(b"to none", timeout=TIMEOUT)
        assert e.value.errno == errno.EPIPE
        assert str(e.value) == "writer put: all 2 readers have closed or were dropped"


def test_a_timeout_is_a_builtin_timeout_error_naming_the_call(transport):
    with rdmaq.Writer(1, transport=transport) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=TIMEOUT)
        with pytest.raises(TimeoutError) as e:
            r.get(timeout=0.01)
        assert not isinstance(e.value, rdmaq.Error)
        assert str(e.value) == "reader get: timed out"
        r.close()


def _can_unshare():
    import shutil
    import subprocess
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


FULL_SHM_CHILD = """
import rdmaq, sys
try:
    rdmaq.Writer(1, transport="shm", slot_bytes=int(sys.argv[1]), slots=int(sys.argv[2]))
except rdmaq.SharedMemoryFullError as e:
    print(e.errno, e, flush=True)
"""


@pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare -m for a 2 MiB /dev/shm")
@pytest.mark.parametrize("slot_bytes, slots, need, free", [
    (1 << 16, 64, "4.0 MiB (4194816 bytes)", "2.0 MiB (2097152 bytes)"),
    (1 << 20, 2048, "2.0 GiB (2147484160 bytes)", "0.0 GiB (2097152 bytes)"),  # the need's unit
    (1 << 20, 1023, "1023.0 MiB (1072693760 bytes)", "2.0 MiB (2097152 bytes)"),  # GiB from 1 GiB on
    ((1 << 29) - 256, 2, "1.0 GiB (1073741824 bytes)", "0.0 GiB (2097152 bytes)"),  # 1 GiB exactly, with the header
])
def test_a_full_dev_shm_says_how_much_the_queue_needs(slot_bytes, slots, need, free):
    import subprocess
    import sys
    p = subprocess.run(["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o size=2m tmpfs /dev/shm && exec "$0" "$@"',
                        sys.executable, "-c", FULL_SHM_CHILD, str(slot_bytes), str(slots)],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    err, text = p.stdout.split(" ", 1)
    assert int(err) == errno.ENOSPC
    assert f"this queue needs {need}, {free} is free" in text, text


def test_recv_like_get_waits_for_ready_first():
    """A writer that closes before its queue was ready: recv, as get, says so (shm: the
    reader sees the ring's ready and closed marks; a verbs reader learns it from the
    rendezvous, test_lifecycle.py)."""
    w = rdmaq.Writer(1, transport="shm")
    r = rdmaq.Reader(w.handle, 0)
    w.close()
    for call in (r.recv, r.get):
        with pytest.raises(rdmaq.PeerClosedError, match="writer closed the queue before it was ready"):
            call(timeout=TIMEOUT)
    r.close()


def test_a_get_that_slept_leaves_the_thread_s_last_error_as_it_was():
    """rdmaq_errmsg() is the detail of the thread's last error: a sleep that ended well is none."""
    with rdmaq.Writer(1, transport="shm") as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=TIMEOUT)

        def fail_then_sleep():
            assert lib.rdmaq_shm_segment_stale(b"") == -errno.EINVAL  # the thread's last error
            last = ffi.string(lib.rdmaq_errmsg())
            r.get(timeout=TIMEOUT)
            return last, ffi.string(lib.rdmaq_errmsg())

        t, box = blocked_call(r, fail_then_sleep, "get")
        w.put(b"x")
        t.join(TIMEOUT)
        last, after = box["value"]
        assert after == last == b"queue name must have 1..200 characters"
        r.close()
