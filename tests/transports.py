"""The transports the suite runs on, and whether verbs can run here."""
import functools
import os

from rdmaq.handle import TRANSPORTS as _REGISTERED

SHM = "/dev/shm"

TRANSPORTS = tuple(_REGISTERED)


@functools.cache
def why_no_verbs():
    """None when the verbs transport can run here, else the reason it cannot."""
    try:
        from rdmaq.transport import verbs
    except ImportError as e:
        return f"verbs transport not built ({e}): install libibverbs-dev and rebuild"
    if not verbs.available():
        return ("no ACTIVE RDMA port on this machine (no NIC, no rdma_rxe): run "
                "`tests/rxe/vm-run -- python -m pytest --transport verbs tests/core tests/verbs tests/doctor`")
    return None


def shm_leftovers(name):
    """/dev/shm entries whose name starts with a queue's segment name."""
    return sorted(n for n in os.listdir(SHM) if n.startswith(name))
