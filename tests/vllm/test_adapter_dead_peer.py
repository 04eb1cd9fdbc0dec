"""A dead writer is reported through the vLLM adapter whatever the caller's waits: vLLM's
EngineCore polls its response queues with ``spin_until_readable`` (waits of 1 ms) and
``readable()`` (no wait), its workers ``dequeue``; each gets PeerDeadError naming the
writer once it was SIGKILLed, not TimeoutError or False for ever (the ring reader's
liveness check runs every 100 ms of its time, not of one call's).  Needs vLLM importable."""
from __future__ import annotations

import multiprocessing as mp
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("vllm")

import rdmaq  # noqa: E402
from children import TIMEOUT, ready_writer  # noqa: E402
from observe import kill_stopped  # noqa: E402
from rdmaq.vllm.queue import RdmaqHandle  # noqa: E402
from rdmaq.vllm.queue import RdmaqMessageQueue as MQ  # noqa: E402

# Far beyond the 100 ms check period: only a writer never reported reaches it.
DEADLINE_S = 30


def _spin(r):
    r.spin_until_readable([], time.monotonic() + 0.05)


def _readable(r):
    assert r.readable() is False


def _dequeue(r):
    r.dequeue(timeout=0.001)


@pytest.mark.parametrize("call", [_spin, _readable, _dequeue], ids=["spin_until_readable", "readable", "dequeue"])
def test_an_adapter_reader_polling_learns_its_writer_died(call):
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    writer = ctx.Process(target=ready_writer, args=("shm", [], out), daemon=True)
    writer.start()
    try:
        ring = out.get(timeout=TIMEOUT)
        r = MQ.create_from_handle(RdmaqHandle(local_reader_ranks=[0], ring=ring), 0)
        r.wait_until_ready()
        assert out.get(timeout=TIMEOUT) == "sent"
        kill_stopped(writer)
        writer.join(TIMEOUT)
        end = time.monotonic() + DEADLINE_S
        with pytest.raises(rdmaq.PeerDeadError, match="writer"):
            while time.monotonic() < end:
                try:
                    call(r)
                except TimeoutError:
                    pass
        r.shutdown()
    finally:
        if writer.is_alive():
            writer.kill()
        writer.join(TIMEOUT)
