"""What a test run left behind: /dev/shm entries and socket or file-store files that no live
process uses any more.

vLLM's processes create POSIX shared memory (its MessageQueue rings, the CPU backend's
``vllm_dist_*`` all-reduce buffers), ZMQ ``ipc://`` socket files and a ``vllm_dist_*`` file
store under $TMPDIR; a process that is SIGKILLed (``vllm serve`` does that to its EngineCore)
cannot remove its own.  An entry counts as left behind when it is new since a snapshot and no
live process maps it, holds it open, or (a socket) is bound to it.

    python leftovers.py snapshot FILE            # before the run
    python leftovers.py check FILE [DIR...]      # after: list, remove, exit 1 if any

DIR: private temporary directories of the run (its $TMPDIR), where every socket and
``vllm_dist_*`` file is the run's own.
"""
from __future__ import annotations

import os
import stat
import sys

SHM = "/dev/shm"


def shm_entries() -> set[str]:
    try:
        return {os.path.join(SHM, n) for n in os.listdir(SHM)}
    except OSError:
        return set()


def in_use() -> set[str]:
    """Paths some live process maps, has open, or has a unix socket bound to."""
    used = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    i = line.find("/")
                    if i >= 0:
                        used.add(line[i:].rstrip("\n").removesuffix(" (deleted)"))
        except OSError:
            pass
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                used.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                pass
    try:
        with open("/proc/net/unix") as f:
            next(f, None)
            for line in f:
                parts = line.split()
                if len(parts) >= 8 and parts[7].startswith("/"):
                    used.add(parts[7])
    except OSError:
        pass
    return used


def _run_files(dirs) -> set[str]:
    """Sockets and vLLM file stores under the run's private directories."""
    out = set()
    for d in dirs:
        for root, _, files in os.walk(d):
            for name in files:
                path = os.path.join(root, name)
                try:
                    mode = os.lstat(path).st_mode
                except OSError:
                    continue
                if stat.S_ISSOCK(mode) or name.startswith("vllm_dist_"):
                    out.add(path)
    return out


def left_behind(before: set[str], dirs=()) -> list[str]:
    """New /dev/shm entries and run sockets/file stores that nothing uses any more."""
    candidates = (shm_entries() - before) | _run_files(dirs)
    if not candidates:
        return []
    used = in_use()
    return sorted(p for p in candidates if p not in used)


def remove(paths) -> None:
    for p in paths:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


def main(argv) -> int:
    if len(argv) >= 2 and argv[0] == "snapshot":
        with open(argv[1], "w") as f:
            f.write("\n".join(sorted(shm_entries())))
        return 0
    if len(argv) >= 2 and argv[0] == "check":
        with open(argv[1]) as f:
            before = set(f.read().split("\n"))
        left = left_behind(before, argv[2:])
        if not left:
            print("leftovers: none (no new /dev/shm entry, socket or vllm_dist_* file left)")
            return 0
        print(f"leftovers: FAIL: {len(left)} left behind by the run (removed now):")
        for p in left:
            print(f"  {p}")
        remove(left)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
