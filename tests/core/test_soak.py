"""Soak: many random-size messages to several readers; every reader checks
every message (number, length, crc32) and the run's sha256.

Scaled down by default (a few seconds on shm); ``pytest --soak`` runs the
full size: 10**6 messages of 1 B..64 KiB plus 8 messages of 8 MiB to 4
readers (issue 11's soak).  Lost, duplicated, reordered or corrupted
messages fail it, naming the reader and the message.
"""
import hashlib
import random
import struct
import zlib

import pytest

import rdmaq
from children import SOAK_HEAD, soak_reader, soak_sizes, start

READERS = 4
# transport -> (messages, multi-MiB messages, their size): scaled / --soak
SCALED = {"shm": (20_000, 3, 3 << 20), "verbs": (1_500, 2, 2 << 20)}
FULL = {"shm": (1_000_000, 8, 8 << 20), "verbs": (100_000, 8, 8 << 20)}


@pytest.mark.soak
def test_soak_random_sizes_to_several_readers(transport, request, procs, results):
    full = request.config.getoption("soak")
    count, big, big_bytes = (FULL if full else SCALED)[transport]
    seed = random.randrange(1 << 30)
    sizes = soak_sizes(count, seed, big, big_bytes)
    blob = random.Random(seed).randbytes(max(sizes) + 4096)
    view = memoryview(blob)
    with rdmaq.Writer(READERS, transport=transport, slot_bytes=4096, slots=64) as w:
        procs += [start(soak_reader, w.handle, i, count, seed, big, big_bytes, results)
                  for i in range(READERS)]
        w.wait_ready(timeout=300)
        digest = hashlib.sha256()
        for seq, size in enumerate(sizes):
            off = (seq * 7919) % (len(blob) - size)
            body = view[off:off + size]
            head = struct.pack("<QI", seq, zlib.crc32(body))
            digest.update(head)
            digest.update(body)
            w.put([head, body], timeout=300)
        assert w.stats["messages"] == count
    got = sorted(results.get(timeout=600) for _ in range(READERS))
    for g in got:
        assert g[1] == "ok", f"reader {g[0]} (seed {seed}): {g[1]}: {g[2]}"
    assert {g[2] for g in got} == {digest.hexdigest()}
    assert all(g[3]["messages"] == count for g in got)
    assert all(g[3]["bytes"] == sum(sizes) + SOAK_HEAD * count for g in got)
