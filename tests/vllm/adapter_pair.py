"""What the adapter's tests share: a writer and its one reader, ready, and a clock to move by
hand. Import after ``pytest.importorskip("vllm")``: the adapter needs vLLM."""

from __future__ import annotations

import threading

from rdmaq.vllm.queue import RdmaqMessageQueue as MQ


def pair(n_local=1, max_chunk_bytes=1 << 20, max_chunks=4):
    """A writer and its one reader, local (n_local 1: the ring) or remote (0: ZMQ), ready."""
    w = MQ(1, n_local, connect_ip="127.0.0.1", max_chunk_bytes=max_chunk_bytes,
           max_chunks=max_chunks)
    r = MQ.create_from_handle(w.export_handle(), 0 if n_local else -1)
    t = threading.Thread(target=w.wait_until_ready)
    t.start()
    r.wait_until_ready()
    t.join(timeout=30)
    assert not t.is_alive()
    return w, r


class Clock:
    """time.monotonic's stand-in: ``now`` moves only when a test moves it."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now
