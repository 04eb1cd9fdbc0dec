"""vLLM's own files left behind by a server that was stopped hard (Ctrl-C on ``vllm serve``).

vLLM names its torch FileStore ``$TMPDIR/vllm_dist_<hex>`` and, on CPU, its all-reduce
buffers in /dev/shm after it (``vllm_dist_<hex>...``); a process killed before its cleanup
(vLLM SIGKILLs its EngineCore on shutdown) leaves them, with vLLM's queue as with rdmaq's.
``rdmaq doctor`` lists them; ``--clean`` removes those whose owner is gone: no live process
maps or holds the file, no vLLM process runs (a FileStore is opened per operation, so a live
server's need not hold it), and the file is this user's.  Importing this imports no vLLM.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile

PREFIX = "vllm_dist_"
SHM = "/dev/shm"


@dataclasses.dataclass
class Leftover:
    path: str
    size: int
    uid: int
    why_kept: str | None  # None: its owner is gone, --clean removes it


def places() -> list[str]:
    """Where vLLM puts them: /dev/shm, and the temporary directory (vLLM's tempfile's)."""
    return list(dict.fromkeys([SHM, tempfile.gettempdir(), "/tmp"]))


def _pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def in_use() -> dict[str, int]:
    """Path -> pid of a live process that maps it or holds it open (those this user may read)."""
    used: dict[str, int] = {}
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    i = line.find("/")
                    if i >= 0:
                        used.setdefault(line[i:].rstrip("\n").removesuffix(" (deleted)"), pid)
        except OSError:
            pass
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                used.setdefault(os.readlink(f"/proc/{pid}/fd/{fd}"), pid)
            except OSError:
                pass
    return used


def vllm_pids() -> list[int]:
    """Live vLLM processes: `vllm serve`, and the EngineCore and workers it titles VLLM::..."""
    out = []
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        first = os.path.basename(argv[0]).decode(errors="replace")
        if first == "vllm" or first.startswith("VLLM::") or (
                len(argv) > 1 and os.path.basename(argv[1]) == b"vllm"):  # python .../bin/vllm
            out.append(pid)
    return out


def survey() -> list[Leftover]:
    """Every vllm_dist_* entry of :func:`places`, with why it is kept (None: removable)."""
    found = []
    for d in places():
        try:
            names = sorted(n for n in os.listdir(d) if n.startswith(PREFIX))
        except OSError:
            continue
        for n in names:
            path = os.path.join(d, n)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            found.append(Leftover(path, st.st_size, st.st_uid, None))
    if not found:
        return found
    used = in_use()
    running = vllm_pids()
    for lo in found:
        if lo.path in used:
            lo.why_kept = f"in use by pid {used[lo.path]}"
        elif lo.uid != os.geteuid():
            lo.why_kept = f"owned by uid {lo.uid}"
        elif running:
            lo.why_kept = f"vLLM is running (pid {running[0]}): it may be that server's"
    return found


def remove_orphans(leftovers: list[Leftover]) -> list[str]:
    """Unlink those whose owner is gone; return their paths."""
    removed = []
    for lo in leftovers:
        if lo.why_kept is None:
            try:
                os.unlink(lo.path)
                removed.append(lo.path)
            except OSError:  # gone meanwhile, or not a file: leave it
                pass
    return removed
