"""A reader on the VM's second RDMA "host" (rxe1, 192.0.2.2), the writer on rxe0.

tests/rxe/peer-exec (`rxe-peer` in the VM) runs a command that sees only
rxe1, as another machine would; RoCEv2 traffic crosses the veth pair.
"""
import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys

import pytest

import rdmaq
from children import checksum_reader, start

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = pytest.mark.skipif(
    not (os.environ.get("RDMAQ_VM_DEV1") and shutil.which("rxe-peer")),
    reason="needs the SoftRoCE VM's second device (tests/rxe/vm-run provides rxe1 and rxe-peer)")


def test_reader_on_second_host_and_one_local(procs, results):
    count = 200
    dev0 = os.environ.get("RDMAQ_VM_DEV0", "rxe0")
    with rdmaq.Writer(2, transport="verbs", device=dev0, slot_bytes=2048, slots=16) as w:
        assert w.handle.info.device == dev0
        procs.append(start(checksum_reader, w.handle, 0, count, results))
        peer = subprocess.Popen(
            ["rxe-peer", sys.executable, os.path.join(HERE, "vpeer.py"),
             pickle.dumps(w.handle).hex(), "1", str(count)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            w.wait_ready(timeout=300)
            digest = hashlib.sha256()
            for seq in range(count):
                m = seq.to_bytes(8, "little") * (1 + seq * 7 % 900)  # up to ~7 KB: multi-slot
                digest.update(m)
                w.put(m, timeout=120)
            out, err = peer.communicate(timeout=300)
        finally:
            if peer.poll() is None:
                peer.kill()
        assert peer.returncode == 0, err
        got = json.loads(out.strip().splitlines()[-1])
        assert got["device"] == os.environ.get("RDMAQ_VM_DEV1", "rxe1")
        assert got["digest"] == digest.hexdigest()
        assert got["stats"]["messages"] == count
        local = results.get(timeout=300)
        assert local[1] == "ok" and local[2] == digest.hexdigest(), local
