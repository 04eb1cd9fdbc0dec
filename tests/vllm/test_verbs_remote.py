"""Remote readers of rdmaq's vLLM MessageQueue over real RDMA (SoftRoCE).

Skipped unless rdmaq's transport "auto" resolves to verbs (an ACTIVE RDMA
port), except in the SoftRoCE VM (tests/rxe/vm-run, ``RDMAQ_VM=1``), where a
missing device, torch or vLLM is a failure.  There ``rxe-peer`` runs a process
that sees only the second rxe device, i.e. a second "host": the remote readers
run there and read the ring over RDMA, the local one beside the writer.  The
verbs tier (tests/rxe/ci.sh) runs it with tests/vllm/ci.sh's venv-mq;
``tests/vllm/ci.sh --rxe`` too.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap

import pytest

import rdmaq


def _need(ok, why):
    if ok:
        return
    if os.environ.get("RDMAQ_VM") == "1":  # CI's verbs tier: a skip would hide a broken setup
        raise RuntimeError(f"{why} (in the SoftRoCE VM this test must run)")
    pytest.skip(why, allow_module_level=True)


_need(importlib.util.find_spec("torch") and importlib.util.find_spec("vllm"), "needs torch and vLLM")
_need(rdmaq.resolve_transport("auto") == "verbs", "no ACTIVE RDMA port: verbs transport unavailable")

N = 20
DIGEST = textwrap.dedent(
    """
    import hashlib

    def digest(obj):
        h = hashlib.sha256()
        def walk(o):
            if isinstance(o, (list, tuple)):
                h.update(b"[%d" % len(o)); [walk(x) for x in o]
            elif isinstance(o, dict):
                for k in sorted(o): h.update(repr(k).encode()); walk(o[k])
            elif hasattr(o, "numpy"):
                h.update(str(o.dtype).encode()); h.update(o.numpy().tobytes())
            elif hasattr(o, "tobytes"):
                h.update(str(o.dtype).encode()); h.update(o.tobytes())
            else:
                h.update(repr(o).encode())
        walk(obj)
        return h.hexdigest()[:16]
    """
)
exec(DIGEST)
# Imports first, then waits for the handle: the readers import vLLM while
# the writer does (minutes each under the VM's emulation).
READER = DIGEST + textwrap.dedent(
    """
    import json, os, pickle, sys, time
    from rdmaq.vllm.queue import RdmaqMessageQueue as MQ
    end = time.monotonic() + 900
    while not os.path.exists(sys.argv[1]):
        if time.monotonic() > end:
            sys.exit("no handle from the writer")
        time.sleep(0.05)
    handle = pickle.load(open(sys.argv[1], "rb"))
    mq = MQ.create_from_handle(handle, int(sys.argv[2]))
    mq.wait_until_ready()
    digests = []
    for _ in range(int(sys.argv[3])):
        obj = mq.dequeue(timeout=120)
        digests.append(digest(obj))
    print("RESULT " + json.dumps({"remote": mq._is_remote_reader,
                                  "transport": mq._transport, "digests": digests}))
    mq.shutdown()
    """
)


def _messages():
    import numpy as np
    import torch

    torch.manual_seed(0)
    out = []
    for i in range(N):
        if i % 5 == 4:
            out.append({"step": i, "t": torch.randn(768, 1024)})  # 3 MiB, out of band
        else:
            out.append(("execute_model", (list(range(i * 100)),), {}, np.arange(i)))
    return out


def _spawn(handle_path, rank, remote):
    peer = shutil.which("rxe-peer") if remote else None
    cmd = [sys.executable, "-c", READER, str(handle_path), str(rank), str(N)]
    return subprocess.Popen(
        ([peer] if peer else []) + cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(proc):
    out, err = proc.communicate(timeout=600)
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, err[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


# Each process imports torch and vLLM, which takes minutes under the VM's
# emulation (the three do it at once): one local and one remote reader.  (Several remote readers' slot
# mapping is tested with shm in test_queue.py.)  ``remote_ranks=None`` with one
# remote reader is vLLM's own case: the executor attaches with rank -1.
@pytest.mark.parametrize("n_local, remote_ranks", [(1, None)], ids=["local+remote(-1)"])
def test_remote_readers_read_the_ring_over_rdma(tmp_path, monkeypatch, n_local, remote_ranks):
    monkeypatch.setenv("VLLM_HOST_IP", "127.0.0.1")
    n_remote = len(remote_ranks) if remote_ranks else 1
    path = tmp_path / "handle.pkl"
    ranks = [(r, False) for r in range(n_local)]
    ranks += [(r, True) for r in (remote_ranks or [-1])]  # -1: as vLLM's executor
    procs = [_spawn(path, rank, remote) for rank, remote in ranks]
    w = None
    try:
        from rdmaq.vllm.queue import RdmaqMessageQueue as MQ

        w = MQ(n_local + n_remote, n_local, remote_reader_ranks=remote_ranks)
        h = w.export_handle()
        assert h.ring is not None and h.ring.transport == "verbs"
        assert h.remote_subscribe_addr is None  # no ZMQ fallback in use
        (tmp_path / "handle.tmp").write_bytes(pickle.dumps(h))
        os.replace(tmp_path / "handle.tmp", path)  # whole, or not there
        w.wait_until_ready()
        msgs = _messages()
        for m in msgs:
            w.enqueue(m)
        want = [digest(m) for m in msgs]  # noqa: F821 (defined by exec above)
        results = [_result(p) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if w is not None:
            w.shutdown()
    for (rank, remote), res in zip(ranks, results):
        assert res["remote"] == remote and res["transport"] == "verbs"
        assert res["digests"] == want, f"rank {rank}"
    assert os.environ.get("VLLM_HOST_IP") == "127.0.0.1"
