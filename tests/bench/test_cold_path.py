"""The path of one message, cold and warm, rdmaq against vLLM's MessageQueue in one run
(pytest-benchmark; groups "cold-SIZE" and "warm-SIZE" put the two queues side by side).

One process holds each queue's writer and reader, so no wait is timed: only each queue's
send + receive path of the tuple a vLLM worker gets.  "cold" disturbs the CPU's caches
before each message (untimed: a write through a buffer larger than the last-level cache
of most machines), as a sleep or a long spin between paced messages does; that cold path
is what a reader pays after every wait.  With --benchmark-disable each body runs once and
the asserts make it a plain functional check.
"""
import importlib.util
import os
import threading

import pytest

pytestmark = pytest.mark.bench

SIZES = [64, 2048, 40 * 1024]
THRASH_BYTES = 64 << 20
_thrash = bytearray(THRASH_BYTES)


def _disturb_caches():
    # one write per 64-byte line: every line of the buffer is fetched and dirtied
    _thrash[::64] = b"\x01" * (THRASH_BYTES // 64)


@pytest.fixture(scope="module", params=["rdmaq-shm", "vllm"])
def queue(request):
    """(send, receive) of a one-reader queue whose both ends live in this process."""
    if request.param == "rdmaq-shm":
        import rdmaq

        w = rdmaq.Writer(1, transport="shm")
        r = rdmaq.Reader(w.handle, 0)
        t = threading.Thread(target=r.wait_ready, kwargs={"timeout": 30})
        t.start()
        w.wait_ready(timeout=30)
        t.join()
        yield "rdmaq-shm", w.send, r.recv
        r.close()
        w.close()
        return
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("missing dependency: vllm (tests/bench/ci.sh installs it --no-deps)")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from vllm.distributed.device_communicators.shm_broadcast import MessageQueue

    w = MessageQueue(1, 1)
    box = {}

    def attach():
        box["r"] = MessageQueue.create_from_handle(w.export_handle(), 0)
        box["r"].wait_until_ready()

    t = threading.Thread(target=attach)
    t.start()
    w.wait_until_ready()
    t.join(30)
    r = box["r"]
    yield "vllm", w.enqueue, r.dequeue
    r.shutdown()
    w.shutdown()


def _message(size):
    return ("execute_model", 7, 123456789, os.urandom(size))


@pytest.mark.parametrize("path", ["cold", "warm"])
@pytest.mark.parametrize("size", SIZES)
def test_send_receive(benchmark, queue, size, path):
    name, send, receive = queue
    benchmark.group = f"{path}-{size}"
    benchmark.name = name
    msg = _message(size)

    def once():
        send(msg)
        return receive()

    if path == "cold":
        got = benchmark.pedantic(once, setup=_disturb_caches, rounds=200, warmup_rounds=5)
    else:
        got = benchmark(once)
    assert got == msg
