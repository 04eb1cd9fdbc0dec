"""A reader run as the VM's second host (`rxe-peer python tests/verbs/vpeer.py HANDLE COUNT`).

HANDLE is the pickled rdmaq.Handle, hex-encoded.  Prints one JSON line:
the digest of what arrived, the RDMA device used, and this process's stats.
"""
import hashlib
import json
import pickle
import sys

import rdmaq
from rdmaq.transport import verbs


def main():
    handle = pickle.loads(bytes.fromhex(sys.argv[1]))
    index, count = int(sys.argv[2]), int(sys.argv[3])
    with rdmaq.Reader(handle, index) as r:
        r.wait_ready(timeout=120)
        d = hashlib.sha256()
        for _ in range(count):
            d.update(r.get(timeout=120))
        device = r._backend._ctx.port.device
        print(json.dumps({"digest": d.hexdigest(), "device": device, "stats": r.stats,
                          "verbs": verbs.process_stats()}), flush=True)


if __name__ == "__main__":
    main()
