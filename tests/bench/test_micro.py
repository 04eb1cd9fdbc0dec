"""Micro-benchmarks (pytest-benchmark): put/get round trip and the C core's per-message cost.

One process holds the writer and a reader of a 1-reader shm ring, so these time the
software path (copy, ring protocol, cffi crossing, pickling), not a cross-core wake-up;
`rdmaq bench` measures that. With --benchmark-disable each body runs once and the
asserts make it a plain functional check.
"""
import threading

import pytest

pytestmark = pytest.mark.bench

SIZES = [64, 2048, 40 * 1024]


@pytest.fixture
def pair():
    import rdmaq

    w = rdmaq.Writer(1, transport="shm")
    r = rdmaq.Reader(w.handle, 0)
    t = threading.Thread(target=r.wait_ready, kwargs={"timeout": 30})
    t.start()
    w.wait_ready(timeout=30)
    t.join()
    yield w, r
    r.close()
    w.close()


@pytest.mark.parametrize("size", SIZES)
def test_put_get_round_trip(benchmark, pair, size):
    w, r = pair
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)

    def once():
        w.put(payload)
        return r.get()

    got = benchmark(once)
    assert got == payload


@pytest.mark.parametrize("size", SIZES)
def test_send_recv_object_round_trip(benchmark, pair, size):
    w, r = pair
    obj = ("execute_model", (b"\x01" * size,), {"non_block": True}, 0)

    def once():
        w.send(obj)
        return r.recv()

    assert benchmark(once) == obj


@pytest.mark.parametrize("size", [64, 2048])
def test_c_core_per_message(benchmark, pair, size):
    """rdmaq_writer_put + rdmaq_reader_peek + rdmaq_reader_read through cffi, no Python API layer."""
    w, r = pair
    wb, rb = w._backend, r._backend
    ffi, lib = w._ffi, w._lib  # the transport's cffi module
    src = ffi.new("char[]", b"\xab" * size)
    iov = ffi.new("struct rdmaq_iovec *", {"base": src, "len": size})
    dst = ffi.new("char[]", size)
    mlen = ffi.new("uint64_t *")
    put, peek, read = lib.rdmaq_writer_put, lib.rdmaq_reader_peek, lib.rdmaq_reader_read
    wp, rp = wb.ptr, rb.ptr
    batch = 100

    def hundred():
        for _ in range(batch):
            if put(wp, iov, 1, -1) or peek(rp, mlen, -1) or read(rp, dst, mlen[0], -1):
                raise RuntimeError(ffi.string(lib.rdmaq_errmsg()).decode())
        return mlen[0]

    assert benchmark(hundred) == size
    assert ffi.buffer(dst, size)[:] == b"\xab" * size
    benchmark.extra_info["messages_per_round"] = batch
