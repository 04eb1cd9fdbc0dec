"""The one cffi build module (API mode, out-of-line).

Two extensions come out of csrc/: ``rdmaq._rdmaq`` (ring protocol + shm
transport, libc only) and, where libibverbs headers exist at build time,
``rdmaq._rdmaq_verbs`` (ring protocol + verbs transport, linking
libibverbs).  Keeping verbs in its own extension is what lets
``import rdmaq`` work on machines without rdma-core.
"""
import os

from cffi import FFI

CSRC = "csrc"
CFLAGS = ["-std=gnu11", "-O2", "-g", "-Wall", "-Wextra", "-fvisibility=hidden"]
CORE_SOURCES = ["ring.c", "wait.c", "cadence.c", "slice.c", "busy.c", "error.c", "shm.c"]
# ---- owned by the verbs transport ----
# shm.c too: rdmaq.h (cdef'd into both extensions) declares the shm entry points.
VERBS_SOURCES = ["shm.c", "verbs_stats.c", "verbs_proc.c", "verbs_choice.c", "verbs_hub.c",
                 "verbs_live.c", "verbs_grave.c", "verbs_ctx.c", "verbs_qp.c", "verbs_pool.c",
                 "verbs_ep.c", "verbs_writer.c", "verbs_reader.c"]
VERBS_HEADER = "rdmaq_verbs.h"
# ---- end ----


def _here(*parts):
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", *parts)


def _cdef(header):
    """A public header minus its preprocessor lines is a valid cdef."""
    with open(_here(CSRC, header)) as f:
        return "".join(line for line in f if not line.lstrip().startswith("#"))


def _sanitize_flags():
    # RDMAQ_SANITIZE=address,undefined builds an instrumented extension.
    s = os.environ.get("RDMAQ_SANITIZE")
    return [f"-fsanitize={s}", "-fno-omit-frame-pointer"] if s else []


VERBS_INCLUDE_DIRS = ("/usr/include", "/usr/local/include")


def verbs_skip_reason():
    """None when the verbs extension can be built here, else why it is not."""
    if os.environ.get("RDMAQ_NO_VERBS") == "1":
        return "RDMAQ_NO_VERBS=1 is set"
    if not any(os.path.exists(os.path.join(d, "infiniband", "verbs.h")) for d in VERBS_INCLUDE_DIRS):
        return (f"libibverbs headers not found (no infiniband/verbs.h in {', '.join(VERBS_INCLUDE_DIRS)}): "
                "install libibverbs-dev (Debian/Ubuntu; rdma-core-devel on Fedora/RHEL), then "
                "reinstall rdmaq")
    return None


def have_verbs():
    return verbs_skip_reason() is None


def _builder(module, headers, sources, libraries):
    ffi = FFI()
    ffi.cdef("".join(_cdef(h) for h in headers))
    ffi.set_source(
        module,
        "".join(f'#include "{h}"\n' for h in headers),
        sources=[os.path.join(CSRC, s) for s in sources],
        include_dirs=[CSRC],
        libraries=libraries,
        extra_compile_args=CFLAGS + _sanitize_flags(),
        extra_link_args=_sanitize_flags(),
    )
    return ffi


ffibuilder = _builder("rdmaq._rdmaq", ["rdmaq.h"], CORE_SOURCES, [])
verbs_ffibuilder = (
    _builder(
        "rdmaq._rdmaq_verbs",
        ["rdmaq.h", VERBS_HEADER],
        ["ring.c", "wait.c", "cadence.c", "slice.c", "busy.c", "error.c"] + VERBS_SOURCES,
        ["ibverbs"],
    )
    if VERBS_SOURCES and have_verbs()
    else None
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
