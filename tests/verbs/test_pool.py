"""Per-CPU QP pools: every queue between two processes shares one pool."""
import hashlib
import json
import os
import platform
import time

import zmq

import rdmaq
from children import CTX, start
from rdmaq.transport import verbs
from rdmaq.transport.verbs import device
from vhelpers import pool_peer, threaded_readers


def _delta(after, before, key):
    return after[key] - before[key]


def _setup_queue(commands, results, n_queue):
    """Create a queue, let the peer attach; return (writer, setup s, peer stats)."""
    t0 = time.perf_counter()
    w = rdmaq.Writer(1, transport="verbs", slot_bytes=1024, slots=8)
    commands.put(w.handle)
    w.wait_ready(timeout=300)
    setup_w = time.perf_counter() - t0
    msg = results.get(timeout=300)
    assert msg[0] == "attached", msg
    return w, setup_w, msg[1], msg[2]


def test_second_queue_between_same_processes_creates_no_qp(procs, results, results_dir):
    commands = CTX.Queue()
    procs.append(start(pool_peer, commands, results))
    device.open_context()  # device context and zmq exist before the clock starts
    zmq.Context.instance()
    assert results.get(timeout=300) == ("up",)
    before = verbs.process_stats()
    writers, timings, peer_stats = [], [], []
    for n in range(3):
        mid = verbs.process_stats()
        w, setup_w, setup_r, pstats = _setup_queue(commands, results, n)
        after = verbs.process_stats()
        writers.append(w)
        timings.append({"writer_s": setup_w, "reader_s": setup_r,
                        "qps_created": _delta(after, mid, "qps_created")})
        peer_stats.append(pstats)
        for k, wk in enumerate(writers):  # every queue still carries traffic
            wk.put(f"q{k}".encode(), timeout=60)
        for k in range(len(writers)):
            kind, data = results.get(timeout=120)
            assert kind == "got" and data == f"q{k}".encode()
    commands.put(None)

    qpp = int(os.environ.get("RDMAQ_QPS_PER_PEER") or 0) or None
    # Writer side: the first queue created the pool, the next two reused it.
    assert timings[0]["qps_created"] >= 1
    assert timings[1]["qps_created"] == 0 and timings[2]["qps_created"] == 0
    assert _delta(verbs.process_stats(), before, "pools_created") == 1
    assert _delta(verbs.process_stats(), before, "pools_reused") == 2
    # Reader side likewise: QPs created only while attaching the first queue.
    assert peer_stats[0]["qps_created"] >= 1
    assert peer_stats[2]["qps_created"] == peer_stats[0]["qps_created"]
    assert peer_stats[2]["pools_created"] == 1
    assert peer_stats[2]["pools_reused"] == 2
    if qpp:
        assert timings[0]["qps_created"] == qpp
    for w in writers:
        w.close()

    with open(os.path.join(results_dir, "rdmaq-setup-rxe.json"), "w") as f:
        json.dump({
            "what": "rdmaq verbs queue set-up between the same two processes (1 reader), "
                    "Python wall time; first builds the per-CPU QP pool, later ones reuse it",
            "host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
            "qps_per_peer": timings[0]["qps_created"],
            "queues": timings,
        }, f, indent=2)


def _capped(out):
    os.environ["RDMAQ_QPS_PER_PEER"] = "1"
    try:
        with rdmaq.Writer(1, transport="verbs") as w:
            r = rdmaq.Reader(w.handle, 0)
            w.put(b"one")
            ok = r.get(timeout=30) == b"one"
            r.close()
        out.put((ok, verbs.process_stats()))
    except Exception as e:
        out.put((False, repr(e)))


def test_qps_per_peer_caps_the_pool(procs, results):
    """RDMAQ_QPS_PER_PEER=1 (for rxe): the loopback pool has one QP pair."""
    procs.append(start(_capped, results))
    ok, stats = results.get(timeout=120)
    assert ok, stats
    assert stats["qps_created"] == 2  # one pair: both ends live in this process
    assert stats["pools_created"] == 1


def test_readers_in_one_process_share_one_pool(procs, results):
    """Four reader threads in one process: one pool to the writer, not four."""
    count = 100
    with rdmaq.Writer(4, transport="verbs", slot_bytes=1024, slots=8) as w:
        procs.append(start(threaded_readers, w.handle, [0, 1, 2, 3], count, results))
        w.wait_ready(timeout=300)
        digest = hashlib.sha256()
        for i in range(count):
            m = i.to_bytes(8, "little") * (1 + i % 300)
            digest.update(m)
            w.put(m, timeout=120)
        kind, errs, digests, before, after = results.get(timeout=600)
        assert not errs, errs
        assert set(digests.values()) == {digest.hexdigest()} and len(digests) == 4
        created = after["pools_created"] - before["pools_created"]
        assert created == 1, (before, after)
        assert after["qps_created"] - before["qps_created"] == after["qps_live"] - before["qps_live"]
        assert after["pools_reused"] - before["pools_reused"] == 3  # readers 2..4 of the process
        w.close()
    assert verbs.process_stats()["qps_live"] >= 1
