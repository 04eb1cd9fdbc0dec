"""Every reader gets every message exactly once, in order, intact: over RDMA."""
import hashlib
import random
import threading

import pytest

import rdmaq
import rdmaq._verbs as V
from conftest import start
from vhelpers import checksum_reader, threaded_readers


def _collect(results, n):
    got = [results.get(timeout=600) for _ in range(n)]
    for g in got:
        assert g[1] == "ok", f"reader {g[0]}: {g[1:]}"
    return got


def _messages(count, seed, ring_bytes):
    """vLLM-like small steps, some spanning slots, a few longer than the ring."""
    rng = random.Random(seed)
    sizes = [rng.choice((8, 40, 300, 2000, 9000)) + rng.randrange(64) for _ in range(count)]
    sizes[5::97] = [rng.randrange(ring_bytes, 2 * ring_bytes) for _ in sizes[5::97]]
    blob = rng.randbytes(2 * ring_bytes + 1000)
    return sizes, blob


# Message counts stay modest: under TCG emulation each costs ~1 ms.
@pytest.mark.parametrize("n_readers,count", [(1, 1500), (4, 300), (8, 150)])
def test_random_size_messages_checksummed_in_order(n_readers, count, procs, results):
    slot_bytes, slots = 4096, 16
    sizes, blob = _messages(count, n_readers, slot_bytes * slots)
    with rdmaq.Writer(n_readers, transport="verbs", slot_bytes=slot_bytes, slots=slots) as w:
        procs += [start(checksum_reader, w.handle, i, count, results) for i in range(n_readers)]
        w.wait_ready(timeout=300)
        digest = hashlib.sha256()
        for seq, size in enumerate(sizes):
            head = seq.to_bytes(8, "little")
            body = blob[seq % 1000: seq % 1000 + size]
            digest.update(head)
            digest.update(body)
            w.put([head, body], timeout=120)
        got = _collect(results, n_readers)
        assert {g[2] for g in got} == {digest.hexdigest()}
        assert w.stats["messages"] == count
        assert all(g[3]["messages"] == count for g in got)
        # one doorbell per reader per flush, each one received
        assert all(g[4]["imm_received"] >= 1 for g in got)


def test_same_process_writer_and_readers():
    """Readers in the writer's process attach at once, over the loopback pool."""
    graves = V.process_stats()["graves"]
    with rdmaq.Writer(2, transport="verbs") as w:
        r0, r1 = rdmaq.Reader(w.handle, 0), rdmaq.Reader(w.handle, 1)
        w.put([b"ab", bytearray(b"cd"), memoryview(b"ef")])
        w.put(b"")
        assert r0.get(timeout=10) == b"abcdef"
        assert r1.get(timeout=10) == b"abcdef"
        assert r0.get(timeout=10) == bytearray()
        assert r1.get(timeout=10) == bytearray()
        r0.close()
        r1.close()
    # Both ends shut their liveness sockets: registered memory is released.
    assert V.process_stats()["graves"] <= graves


def test_wraparound_many_laps_preserves_order():
    with rdmaq.Writer(1, transport="verbs", slot_bytes=128, slots=2) as w:
        r = rdmaq.Reader(w.handle, 0)
        got = []
        t = threading.Thread(target=lambda: got.extend(r.get(timeout=60) for _ in range(1000)))
        t.start()
        for i in range(1000):
            w.put(i.to_bytes(4, "little") * (i % 20 + 1), timeout=60)
        t.join(120)
        assert [int.from_bytes(m[:4], "little") for m in got] == list(range(1000))
        assert all(len(m) == 4 * (i % 20 + 1) for i, m in enumerate(got))
        r.close()


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
    assert V.process_stats()["qps_live"] >= 1
