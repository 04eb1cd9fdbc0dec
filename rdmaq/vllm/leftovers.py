"""vLLM's own files left behind by a server that was stopped hard (Ctrl-C on ``vllm serve``).

vLLM names its torch FileStore ``$TMPDIR/vllm_dist_<hex>`` and, on CPU, its all-reduce
buffers in /dev/shm after it (``vllm_dist_<hex>...``); its ZMQ ipc sockets (the engine's
handshake and RPC sockets, its own MessageQueue's) are files named by a UUID in
``$VLLM_RPC_BASE_PATH``, the temporary directory by default, which libzmq leaves when the
socket closes.  A process killed before its cleanup (vLLM SIGKILLs its EngineCore on
shutdown) leaves them, with vLLM's queue as with rdmaq's.  ``rdmaq doctor`` lists them;
``--clean`` removes those whose owner is gone and that are this user's: a vllm_dist_* file
that no live process maps or holds while no vLLM process runs (a FileStore is opened per
operation, so a live server's need not hold it); a socket file that no live socket is bound
to (/proc/net/unix).  Importing this imports no vLLM.
"""
from __future__ import annotations

import dataclasses
import os
import re
import stat
import tempfile

PREFIX = "vllm_dist_"
SHM = "/dev/shm"


@dataclasses.dataclass
class Leftover:
    path: str
    size: int
    uid: int
    why_kept: str | None  # None: its owner is gone, --clean removes it


# vLLM's get_open_zmq_ipc_path(): ipc://$VLLM_RPC_BASE_PATH/<uuid4>
_ZMQ_IPC_NAME = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
UNIX_SOCKETS = "/proc/net/unix"


def places() -> list[str]:
    """Where vLLM puts them: /dev/shm, its RPC base path (when set) and the temporary
    directory (vLLM's tempfile's)."""
    rpc = os.environ.get("VLLM_RPC_BASE_PATH")
    return list(dict.fromkeys([SHM, *([rpc] if rpc else []), tempfile.gettempdir(), "/tmp"]))


def _is_vllms(name: str, mode: int) -> bool:
    return name.startswith(PREFIX) or (stat.S_ISSOCK(mode) and _ZMQ_IPC_NAME.fullmatch(name) is not None)


def bound_sockets() -> set[str] | None:
    """Paths of the unix sockets live ones are bound to (this network namespace's), or
    None when the kernel does not say."""
    try:
        with open(UNIX_SOCKETS) as f:
            next(f)  # the header
            return {fields[7] for fields in (line.split() for line in f) if len(fields) > 7}
    except (OSError, StopIteration):
        return None


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
    """Every vllm_dist_* entry and ZMQ socket file of vLLM's in :func:`places`, with why it
    is kept (None: removable)."""
    found, sockets = [], set()
    for d in places():
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for n in names:
            path = os.path.join(d, n)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if _is_vllms(n, st.st_mode):
                found.append(Leftover(path, st.st_size, st.st_uid, None))
                if stat.S_ISSOCK(st.st_mode):
                    sockets.add(path)
    if not found:
        return found
    used = in_use()
    running = vllm_pids()
    bound = bound_sockets() if sockets else set()
    for lo in found:
        if lo.path in sockets:
            if bound is None:
                lo.why_kept = f"cannot tell whether a socket is bound to it ({UNIX_SOCKETS})"
            elif lo.path in bound:
                lo.why_kept = "a live socket is bound to it"
            elif lo.uid != os.geteuid():
                lo.why_kept = f"owned by uid {lo.uid}"
        elif lo.path in used:
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
