"""Every reader gets every message exactly once, in order, intact."""
import hashlib
import random

import pytest

import rdmaq
from conftest import start
from readers import checksum_reader


def _collect(results, n):
    got = [results.get(timeout=300) for _ in range(n)]
    for g in got:
        assert g[1] == "ok", f"reader {g[0]}: {g[1:]}"
    return got


@pytest.mark.parametrize("n_readers", [1, 2, 4, 8])
def test_100k_random_size_messages_checksummed_in_order(n_readers, procs, results):
    count = 100_000
    rng = random.Random(n_readers)
    # Mostly vLLM-like small steps, some spanning several slots.
    sizes = [rng.choice((8, 40, 300, 2000, 9000)) + rng.randrange(64) for _ in range(count)]
    sizes[::997] = [rng.randrange(20_000, 70_000) for _ in sizes[::997]]
    blob = rng.randbytes(80_000)
    with rdmaq.Writer(n_readers, transport="shm", slot_bytes=4096, slots=32) as w:
        procs += [start(checksum_reader, w.handle, i, count, results) for i in range(n_readers)]
        w.wait_ready(timeout=60)
        digest = hashlib.sha256()
        for seq, size in enumerate(sizes):
            head = seq.to_bytes(8, "little")
            off = seq % 1000
            body = blob[off : off + size]
            digest.update(head)
            digest.update(body)
            w.put([head, body], timeout=60)
        got = _collect(results, n_readers)
        assert {g[2] for g in got} == {digest.hexdigest()}
        assert w.stats["messages"] == count
        assert all(g[3]["messages"] == count for g in got)


def test_empty_message_round_trips(procs, results):
    with rdmaq.Writer(1, transport="shm") as w:
        procs.append(start(checksum_reader, w.handle, 0, 3, results))
        w.wait_ready(timeout=60)
        for seq in range(3):
            w.put(seq.to_bytes(8, "little"))
        assert _collect(results, 1)[0][1] == "ok"
    with rdmaq.Writer(1, transport="shm") as w, rdmaq.Reader(w.handle, 0) as r:
        w.put(b"")
        assert r.get(timeout=5) == bytearray()


def test_same_process_writer_and_reader_with_several_buffers():
    with rdmaq.Writer(2, transport="shm") as w:
        r0, r1 = rdmaq.Reader(w.handle, 0), rdmaq.Reader(w.handle, 1)
        w.put([b"ab", bytearray(b"cd"), memoryview(b"ef")])
        assert r0.get(timeout=5) == b"abcdef"
        assert r1.get(timeout=5) == b"abcdef"
        r0.close()
        r1.close()
