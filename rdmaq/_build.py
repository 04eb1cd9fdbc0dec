"""The one cffi build module (API mode, out-of-line).

Two extensions come out of csrc/, their sources listed in csrc/sources.mk:
``rdmaq._rdmaq`` (the ring engine and the shm transport, libc only) and,
where libibverbs headers exist at build time, ``rdmaq._rdmaq_verbs`` (the
ring engine and the verbs transport, linking libibverbs).  Keeping verbs in
its own extension is what lets ``import rdmaq`` work on machines without
rdma-core.  Each extension carries its own copy of the engine, hence its
own rdmaq_errmsg(): a backend reads errors through its own ``lib``.

cffi sees exactly the public headers, csrc/include/, minus their
preprocessor lines.
"""
import glob
import os
import re

from cffi import FFI

CSRC = "csrc"
INCLUDE = os.path.join(CSRC, "include")
CFLAGS = ["-std=gnu11", "-O2", "-g", "-Wall", "-Wextra", "-fvisibility=hidden"]
VERBS_INCLUDE_DIRS = ("/usr/include", "/usr/local/include")

_ASSIGN = re.compile(r"([A-Z][A-Z0-9_]*)\s*:?=\s*(.*)")


def _here(*parts):
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", *parts)


def read_sources(path=None):
    """csrc/sources.mk as {list name: [file, ...]}.

    It is a makefile fragment (tests/c/Makefile includes it) kept to
    ``NAME := file ...`` lines, comments and backslash continuations.
    """
    path = path or _here(CSRC, "sources.mk")
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    lists = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = _ASSIGN.fullmatch(line)
        if m is None:
            raise ValueError(f"{path}: not a `NAME := files` line: {line!r}")
        lists[m[1]] = m[2].split()
    return lists


SOURCES = read_sources()


def _cdef(header):
    """A public header minus its preprocessor lines is a valid cdef."""
    with open(_here(INCLUDE, header)) as f:
        return "".join(line for line in f if not line.lstrip().startswith("#"))


def _sanitize_flags():
    # RDMAQ_SANITIZE=address,undefined builds an instrumented extension.  Stripped by hand
    # (a blank value is unset, as rdmaq/settings.py reads it): setup.py loads this file alone.
    s = os.environ.get("RDMAQ_SANITIZE", "").strip()
    return [f"-fsanitize={s}", "-fno-omit-frame-pointer"] if s else []


def verbs_skip_reason():
    """None when the verbs extension can be built here, else why it is not."""
    if os.environ.get("RDMAQ_NO_VERBS", "").strip() == "1":
        return "RDMAQ_NO_VERBS=1 is set"
    if not any(os.path.exists(os.path.join(d, "infiniband", "verbs.h")) for d in VERBS_INCLUDE_DIRS):
        return (f"libibverbs headers not found (no infiniband/verbs.h in {', '.join(VERBS_INCLUDE_DIRS)}): "
                "install libibverbs-dev (Debian/Ubuntu; rdma-core-devel on Fedora/RHEL), then "
                "reinstall rdmaq")
    return None


def have_verbs():
    return verbs_skip_reason() is None


def _builder(module, headers, lists, libraries):
    ffi = FFI()
    ffi.cdef("".join(_cdef(h) for h in headers))
    ffi.set_source(
        module,
        "".join(f'#include "{h}"\n' for h in headers),
        sources=[os.path.join(CSRC, s) for name in lists for s in SOURCES[name]],
        # a changed header or source list rebuilds the extension too (and they go into the sdist)
        depends=[os.path.join(CSRC, "sources.mk")]
        + sorted(glob.glob(os.path.join(CSRC, "*.h")) + glob.glob(os.path.join(INCLUDE, "*.h"))),
        include_dirs=[INCLUDE, CSRC],
        libraries=libraries,
        extra_compile_args=CFLAGS + _sanitize_flags(),
        extra_link_args=_sanitize_flags(),
    )
    return ffi


ffibuilder = _builder("rdmaq._rdmaq", ["rdmaq.h", "rdmaq_shm.h"], ["CORE_SRCS", "SHM_SRCS"], [])
verbs_ffibuilder = (
    _builder("rdmaq._rdmaq_verbs", ["rdmaq.h", "rdmaq_verbs.h"], ["CORE_SRCS", "VERBS_SRCS"], ["ibverbs"])
    if have_verbs()
    else None
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
