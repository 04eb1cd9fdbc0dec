"""The queues under test, behind one small adapter interface.

Every queue is driven by the same writer/reader loops (rdmaq.bench.proc); an
adapter only knows how to build its queue object and which two bound methods
send and receive a Python object. Each queue runs with its production
settings: vLLM's with those of the executor's ``rpc_broadcast_mq``
(``VLLM_MQ_MAX_CHUNK_BYTES_MB`` = 16 MiB chunks, 10 chunks) and the worker
busy loop's ``dequeue(indefinite=True)``; rdmaq's with its defaults and its
object API (``send``/``recv``, pickle protocol 5), which is what a drop-in for
``MessageQueue.enqueue``/``dequeue`` calls.
"""

from __future__ import annotations

import functools
import importlib.util
import os

# vLLM executor defaults (vllm/envs.py VLLM_MQ_MAX_CHUNK_BYTES_MB, multiproc_executor.py)
VLLM_MAX_CHUNK_BYTES = 16 * 1024 * 1024
VLLM_MAX_CHUNKS = 10


class QueueAdapter:
    """Base class; subclasses are picklable and hold configuration only."""

    name = "?"

    def available(self) -> str | None:
        """None when usable here, else the reason it is skipped (cheap, parent side)."""
        raise NotImplementedError

    def prepare(self) -> None:
        """Import heavy modules in the child before anything is timed."""

    # writer side
    def create_writer(self, n_readers: int):
        """Return (writer_object, picklable_handle)."""
        raise NotImplementedError

    def writer_ready(self, w) -> None:
        raise NotImplementedError

    def sender(self, w):
        """A callable taking one object: the queue's own send method."""
        raise NotImplementedError

    def close_writer(self, w) -> None:
        pass

    # reader side
    def open_reader(self, handle, index: int):
        raise NotImplementedError

    def reader_ready(self, r) -> None:
        raise NotImplementedError

    def receiver(self, r):
        """A callable taking no argument that blocks until the next object."""
        raise NotImplementedError

    def close_reader(self, r) -> None:
        pass

    def writer_tracer(self, w):
        """A callable returning the last send's (start, copied, published) ns, or None."""
        return None

    def reader_tracer(self, r):
        """A callable returning the last receive's (publish stamp, seen, copied, how), or None."""
        return None

    def reader_counters(self, r):
        """A callable returning the reader's own counters (dict of ints), or None."""
        return None

    def version(self) -> str | None:
        return None


class RdmaqAdapter(QueueAdapter):
    def __init__(self, transport: str):
        self.transport = transport
        self.name = f"rdmaq-{transport}"

    def available(self):
        if importlib.util.find_spec("rdmaq") is None:
            return "rdmaq is not installed"
        try:
            import rdmaq
        except Exception as e:  # broken build: say so rather than crash the run
            return f"import rdmaq failed: {e!r}"
        if not hasattr(rdmaq, "Writer"):
            return "rdmaq has no Writer (core not built yet?)"
        if self.transport == "verbs":
            if importlib.util.find_spec("rdmaq._rdmaq_verbs") is None:
                return "rdmaq was built without verbs (no libibverbs headers at build time)"
            from rdmaq.transport import verbs

            if not verbs.available():
                return "no ACTIVE RDMA port (see `rdmaq doctor`)"
        return None

    def prepare(self):
        import rdmaq  # noqa: F401

    def create_writer(self, n_readers):
        import rdmaq

        w = rdmaq.Writer(n_readers, transport=self.transport)
        return w, w.handle

    def writer_ready(self, w):
        w.wait_ready(timeout=120)

    def sender(self, w):
        return w.send

    def close_writer(self, w):
        w.close()

    def open_reader(self, handle, index):
        import rdmaq

        return rdmaq.Reader(handle, index)

    def reader_ready(self, r):
        r.wait_ready(timeout=120)

    def receiver(self, r):
        return r.recv

    def close_reader(self, r):
        r.close()

    def writer_tracer(self, w):
        def trace():
            t = w.last_trace
            return t["start_ns"], t["mid_ns"], t["end_ns"]
        return trace

    def reader_counters(self, r):
        return lambda: r.stats

    def reader_tracer(self, r):
        hows = {"none": 0, "ready": 1, "spin": 2, "window": 3, "woken": 4}

        def trace():
            t = r.last_trace
            return t["start_ns"], t["mid_ns"], t["end_ns"], hows.get(t["how"], 0)
        return trace

    def version(self):
        try:
            from importlib.metadata import version

            return version("rdmaq")
        except Exception:
            return None


class VllmAdapter(QueueAdapter):
    name = "vllm"

    def available(self):
        if importlib.util.find_spec("vllm") is None:
            return "vllm is not installed (pip install --no-deps vllm==0.33.0; see docs/benchmarks.md)"
        if importlib.util.find_spec("torch") is None:
            return "vllm needs torch (pip install torch first)"
        if importlib.util.find_spec("zmq") is None:
            return "vllm's MessageQueue needs pyzmq"
        return None

    def prepare(self):
        # Quiet INFO logs; no remote readers, so no network probing is needed.
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
        # The queue never uses the platform object on this path; the CPU platform keeps
        # vLLM's import from loading its CUDA kernels on a GPU host (or needing them).
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        from vllm.distributed.device_communicators.shm_broadcast import MessageQueue  # noqa: F401

    def _mq(self):
        from vllm.distributed.device_communicators.shm_broadcast import MessageQueue

        return MessageQueue

    def create_writer(self, n_readers):
        mq = self._mq()(n_readers, n_readers, max_chunk_bytes=VLLM_MAX_CHUNK_BYTES,
                        max_chunks=VLLM_MAX_CHUNKS)
        return mq, mq.export_handle()

    def writer_ready(self, w):
        w.wait_until_ready()

    def sender(self, w):
        return w.enqueue

    def open_reader(self, handle, index):
        return self._mq().create_from_handle(handle, index)

    def reader_ready(self, r):
        r.wait_until_ready()

    def receiver(self, r):
        # What WorkerProc.worker_busy_loop calls.
        return functools.partial(r.dequeue, indefinite=True)

    def close_reader(self, r):
        r.shutdown()

    def version(self):
        try:
            from importlib.metadata import version

            return version("vllm")
        except Exception:
            try:
                import vllm

                return getattr(vllm, "__version__", None)
            except Exception:
                return None


ADAPTERS = {
    "rdmaq-shm": lambda: RdmaqAdapter("shm"),
    "rdmaq-verbs": lambda: RdmaqAdapter("verbs"),
    "vllm": VllmAdapter,
}


def make_adapter(name: str) -> QueueAdapter:
    try:
        return ADAPTERS[name]()
    except KeyError:
        raise ValueError(f"unknown queue {name!r}; choose from {', '.join(ADAPTERS)}") from None
