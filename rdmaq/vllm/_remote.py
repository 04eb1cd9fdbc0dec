"""Remote (cross-host) readers without RDMA: vLLM's ZMQ TCP XPUB/SUB path.

Same socket pattern, handshake and wire format as vLLM's ``MessageQueue``
(``send_multipart([pickle, oob...])``, ``b"READY"``), so a vLLM reader could
read it too.  Unlike vLLM's, a blocked remote reader can be woken by
``close()`` from another thread (an inproc PAIR in its poller).
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

import zmq

import rdmaq

_POLL_SLICE_MS = 100


def rdma_device_active() -> bool:
    """True when rdmaq's transport "auto" would pick verbs (an ACTIVE RDMA
    port and the verbs extension built)."""
    return rdmaq.resolve_transport("auto") == "verbs"


def _close_zmq(pid: int, ctx: zmq.Context[Any], sockets: list[zmq.Socket[Any]]) -> None:
    # Like vLLM: close sockets before term() so term() cannot block; and never
    # from a forked child, which does not own the parent's context.
    if os.getpid() != pid:
        return
    for s in sockets:
        s.close(linger=0)
    ctx.term()


class RemoteWriter:
    def __init__(self, n_reader: int, connect_ip: str | None):
        from vllm.utils.network_utils import get_ip, is_valid_ipv6_address

        self.n_reader = n_reader
        self.closed = False
        self._ctx = zmq.Context()
        self.socket = self._ctx.socket(zmq.XPUB)
        self.socket.setsockopt(zmq.XPUB_VERBOSE, True)
        ip = connect_ip or get_ip()
        self.ipv6 = is_valid_ipv6_address(ip)
        if self.ipv6:
            self.socket.setsockopt(zmq.IPV6, 1)
            ip = f"[{ip}]"
        # Port 0: the kernel picks it, so concurrent writers never collide.
        self.socket.bind(f"tcp://{ip}:0")
        port = self.socket.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1]
        self.addr = f"tcp://{ip}:{port}"
        fin = weakref.finalize(self, _close_zmq, os.getpid(), self._ctx, [self.socket])
        fin.atexit = False

    def wait_ready(self) -> None:
        """One subscription per remote reader, then READY to all of them."""
        seen = 0
        while seen < self.n_reader:
            if self.closed:
                raise rdmaq.ClosedError("remote writer closed while waiting for readers")
            if self.socket.poll(_POLL_SLICE_MS):
                self.socket.recv()
                seen += 1
        self.socket.send(b"READY")

    def send(self, buffers: list[Any]) -> None:
        self.socket.send_multipart(buffers, copy=False)

    def close(self) -> None:
        self.closed = True


class RemoteReader:
    def __init__(self, addr: str, ipv6: bool):
        self._ctx = zmq.Context()
        self.socket = self._ctx.socket(zmq.SUB)
        self.socket.setsockopt_string(zmq.SUBSCRIBE, "")
        if ipv6:
            self.socket.setsockopt(zmq.IPV6, 1)
        self.socket.connect(addr)
        path = f"inproc://rdmaq-cancel-{id(self)}-{os.getpid()}"
        self._cancel_w = self._ctx.socket(zmq.PAIR)
        self._cancel_w.bind(path)
        self._cancel_r = self._ctx.socket(zmq.PAIR)
        self._cancel_r.connect(path)
        self._poller = zmq.Poller()
        self._poller.register(self.socket, zmq.POLLIN)
        self._poller.register(self._cancel_r, zmq.POLLIN)
        self._lock = threading.Lock()
        self.closed = False
        fin = weakref.finalize(
            self,
            _close_zmq,
            os.getpid(),
            self._ctx,
            [self.socket, self._cancel_w, self._cancel_r],
        )
        fin.atexit = False

    def recv(self, timeout: float | None = None) -> list[zmq.Frame]:
        """Next message's frames; TimeoutError, or rdmaq.ClosedError once closed."""
        if self.closed:
            raise rdmaq.ClosedError("remote reader closed")
        timeout_ms = None if timeout is None else max(0, int(timeout * 1000))
        events = dict(self._poller.poll(timeout=timeout_ms))
        if self._cancel_r in events or self.closed:
            raise rdmaq.ClosedError("remote reader closed")
        if self.socket not in events:
            raise TimeoutError
        return self.socket.recv_multipart(copy=False)

    def wait_ready(self) -> None:
        frames = self.recv(None)
        if len(frames) != 1 or frames[0].bytes != b"READY":
            raise RuntimeError(
                f"remote reader expected READY from the writer, got {len(frames)} "
                "frame(s) of something else"
            )

    def close(self) -> None:
        """Thread-safe: wakes a recv() blocked in another thread."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._cancel_w.send(b"\x00")
