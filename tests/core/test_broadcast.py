"""Every reader gets every message exactly once, in order, intact."""
import hashlib
import random

import pytest

import rdmaq
from children import checksum_reader, start, transport_stats

SLOT_BYTES, SLOTS = 4096, 16
# Under the VM's emulation a verbs message costs ~1 ms: fewer there.
COUNT = {"shm": {1: 100_000, 2: 100_000, 4: 100_000, 8: 100_000},
         "verbs": {1: 1500, 2: 600, 4: 300, 8: 150}}


def _collect(results, n):
    got = [results.get(timeout=600) for _ in range(n)]
    for g in got:
        assert g[1] == "ok", f"reader {g[0]}: {g[1:]}"
    return got


def _messages(count, seed):
    """vLLM-like small steps, some spanning slots, ~100 longer than the ring."""
    ring = SLOT_BYTES * SLOTS
    rng = random.Random(seed)
    sizes = [rng.choice((8, 40, 300, 2000, 9000)) + rng.randrange(64) for _ in range(count)]
    every = max(97, count // 100)
    sizes[5::every] = [rng.randrange(ring, 2 * ring) for _ in sizes[5::every]]
    return sizes, rng.randbytes(2 * ring + 1000)


@pytest.mark.parametrize("n_readers", [1, 2, 4, 8])
def test_random_size_messages_checksummed_in_order(transport, n_readers, procs, results):
    count = COUNT[transport][n_readers]
    sizes, blob = _messages(count, n_readers)
    with rdmaq.Writer(n_readers, transport=transport, slot_bytes=SLOT_BYTES, slots=SLOTS) as w:
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
        if transport == "verbs":  # one doorbell per reader per flush, each one received
            assert all(g[4]["imm_received"] >= 1 for g in got)


def test_empty_message_round_trips(transport, procs, results):
    with rdmaq.Writer(1, transport=transport) as w:
        procs.append(start(checksum_reader, w.handle, 0, 3, results))
        w.wait_ready(timeout=300)
        for seq in range(3):
            w.put(seq.to_bytes(8, "little"))
        assert _collect(results, 1)[0][1] == "ok"
    with rdmaq.Writer(1, transport=transport) as w, rdmaq.Reader(w.handle, 0) as r:
        w.put(b"")
        got = r.get(timeout=30)
        assert type(got) is bytearray and len(got) == 0  # get() returns a bytearray, even empty


def test_same_process_writer_and_readers_with_several_buffers(transport):
    """Readers in the writer's process attach at once (verbs: the loopback pool)."""
    before = transport_stats(transport)
    with rdmaq.Writer(2, transport=transport) as w:
        r0, r1 = rdmaq.Reader(w.handle, 0), rdmaq.Reader(w.handle, 1)
        w.put([b"ab", bytearray(b"cd"), memoryview(b"ef")])
        for r in (r0, r1):
            got = r.get(timeout=30)
            assert type(got) is bytearray and got == b"abcdef"
        r0.close()
        r1.close()
    if transport == "verbs":  # both ends shut their liveness sockets: memory released
        assert transport_stats(transport)["graves"] <= before["graves"]
