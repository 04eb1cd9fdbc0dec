"""Endpoints and fork(): the queue belongs to the process that made the
endpoint.  A forked child that puts or gets on an inherited endpoint gets
rdmaq.ForkedError (it would steal the parent's sequence numbers or messages),
also while a parent thread held the endpoint at the fork, instead of hanging;
close() in the child leaves the queue be (test_readme_promises.py); the parent goes on."""
import os
import select
import signal

import rdmaq
from children import TIMEOUT
from observe import blocked_call

CHILD_BACKSTOP_S = 20  # the child answers at once; a child silent this long hung
FORKED = "ForkedError: {kind} {what}: {kind} belongs to the parent process (fork)"


def _in_child(action):
    """fork(); the child runs ``action`` and reports how it ended: "returned" or
    "ExceptionType: message".  A child that says nothing within the backstop hung."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, and exit hard
        try:
            action()
            out = "returned"
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            out = f"{type(e).__name__}: {e}"
        os.write(wfd, out.encode()[:4096])
        os._exit(0)
    os.close(wfd)
    try:
        ready, _, _ = select.select([rfd], [], [], CHILD_BACKSTOP_S)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            return "hung"
        return os.read(rfd, 4096).decode()
    finally:
        os.close(rfd)
        os.waitpid(pid, 0)


def test_child_put_on_an_inherited_writer_is_refused(transport):
    with rdmaq.Writer(1, transport=transport) as w, rdmaq.Reader(w.handle, 0) as r:
        w.put(b"before", timeout=TIMEOUT)
        out = _in_child(lambda: w.put(b"child", timeout=TIMEOUT))
        assert out.startswith(FORKED.format(kind="writer", what="put")), out
        # the parent's sequence numbers are its own: nothing lost, nothing extra
        w.put(b"parent", timeout=TIMEOUT)
        assert r.get(timeout=TIMEOUT) == b"before"
        assert r.get(timeout=TIMEOUT) == b"parent"


def test_child_get_on_an_inherited_reader_is_refused(transport):
    with rdmaq.Writer(1, transport=transport) as w, rdmaq.Reader(w.handle, 0) as r:
        w.put(b"one", timeout=TIMEOUT)
        w.put(b"two", timeout=TIMEOUT)
        out = _in_child(lambda: r.get(timeout=TIMEOUT))
        assert out.startswith(FORKED.format(kind="reader", what="get")), out
        out = _in_child(lambda: r.recv(timeout=TIMEOUT))
        assert out.startswith(FORKED.format(kind="reader", what="recv")), out
        # the parent receives every message, once
        assert r.get(timeout=TIMEOUT) == b"one"
        assert r.get(timeout=TIMEOUT) == b"two"


def test_child_forked_while_a_parent_thread_blocks_in_put_is_refused_not_hung(transport):
    with rdmaq.Writer(1, transport=transport, slot_bytes=128, slots=2) as w, \
            rdmaq.Reader(w.handle, 0) as r:
        w.put(b"1", timeout=TIMEOUT)
        w.put(b"2", timeout=TIMEOUT)
        t, box = blocked_call(w, lambda: w.put(b"3", timeout=TIMEOUT), "put on a full ring")
        # The child inherits the endpoint's lock held by a thread it does not have.
        out = _in_child(lambda: w.put(b"child", timeout=1))
        assert out.startswith(FORKED.format(kind="writer", what="put")), out
        assert [r.get(timeout=TIMEOUT) for _ in range(3)] == [b"1", b"2", b"3"]
        t.join(TIMEOUT)
        assert box == {"value": None}


def test_the_c_core_refuses_a_forked_child_too(transport):
    """For C callers (rdmaq.h): -ESTALE, whatever the transport."""
    with rdmaq.Writer(1, transport=transport) as w, rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=TIMEOUT)
        r.wait_ready(timeout=TIMEOUT)

        def c_put_and_get():
            msg = w._ffi.new("char[]", b"child")
            iov = w._ffi.new("struct rdmaq_iovec *", {"base": msg, "len": 5})
            rc = w._lib.rdmaq_writer_put(w._ptr, iov, 1, 0)
            w._check(rc, "put")

        out = _in_child(c_put_and_get)
        assert out.startswith("ForkedError: writer put: "), out
        assert "belongs to the parent process (fork)" in out
        w.put(b"parent", timeout=TIMEOUT)
        assert r.get(timeout=TIMEOUT) == b"parent"


def test_a_child_using_an_endpoint_closed_before_fork_is_told_it_is_closed(transport):
    """Closed is the first answer: the child learns why the endpoint is unusable, not
    only that it belongs to its parent."""
    w = rdmaq.Writer(1, transport=transport)
    w.close()
    out = _in_child(lambda: w.put(b"child", timeout=TIMEOUT))
    assert out == "ClosedError: writer is closed", out
