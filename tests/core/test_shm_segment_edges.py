"""The shm transport's leftover check (rdmaq_shm_segment_stale), which every new
writer runs on each segment in /dev/shm: it must cost no file descriptor."""
import os

import rdmaq
from rdmaq.transport.shm import lib


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_the_stale_check_closes_the_segment_it_opened():
    """Checking a live writer's segment opens it to read the header: the descriptor
    is closed again, or a process creating writers for days runs out of them."""
    with rdmaq.Writer(1, transport="shm", slot_bytes=256, slots=4) as w:
        name = w.handle.info.name.encode()
        assert lib.rdmaq_shm_segment_stale(name) == 0  # its writer lives
        before = _open_fds()
        for _ in range(20):
            assert lib.rdmaq_shm_segment_stale(name) == 0
        assert _open_fds() == before
