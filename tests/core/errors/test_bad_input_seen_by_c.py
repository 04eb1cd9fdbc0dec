"""Bad input that only the C core can see reaches Python as the documented
exception (rdmaq/errors.py maps the negative errno), with the C message."""
import errno

import pytest

import rdmaq
from rdmaq._rdmaq import ffi, lib


def test_index_beyond_the_queue_s_readers(transport):
    """A handle claiming more readers than the queue has: the Python range
    check passes, the C attach refuses it."""
    with rdmaq.Writer(2, transport=transport) as w:
        h = w.handle
        forged = rdmaq.Handle(h.transport, 5, h.info, h.version)
        with pytest.raises(ValueError, match="reader index 3 out of range: queue has 2 readers"):
            rdmaq.Reader(forged, 3)
        readers = [rdmaq.Reader(w.handle, i) for i in range(2)]  # the queue is unharmed
        w.put(b"ok", timeout=30)
        assert [r.get(timeout=30) for r in readers] == [b"ok", b"ok"]
        for r in readers:
            r.close()


def test_ring_above_16_gib_is_refused_by_the_core(transport):
    with pytest.raises(ValueError, match="larger than 16 GiB"):
        rdmaq.Writer(1, transport=transport, slot_bytes=1 << 20, slots=1 << 15)


# rdmaq.h's bounds of struct rdmaq_config: (field, lowest, highest)
CONFIG_LIMITS = [
    ("n_readers", 1, lib.RDMAQ_MAX_READERS),
    ("slot_bytes", lib.RDMAQ_MIN_SLOT_BYTES, lib.RDMAQ_MAX_SLOT_BYTES),
    ("slots", lib.RDMAQ_MIN_SLOTS, lib.RDMAQ_MAX_SLOTS),
]


def _errmsg():
    return ffi.string(lib.rdmaq_errmsg()).decode()


@pytest.mark.parametrize("field, lo, hi", CONFIG_LIMITS, ids=[c[0] for c in CONFIG_LIMITS])
def test_python_and_the_core_refuse_the_same_geometry(field, lo, hi):
    """One set of limits (rdmaq.h): a value just outside is refused by Writer's own
    check and by the C core, both quoting the header's bounds."""
    good = {"n_readers": 1, "slot_bytes": 1024, "slots": 8}
    for bad in (lo - 1, hi + 1):
        args = dict(good, **{field: bad})
        with pytest.raises(ValueError, match=f"{field} must be in {lo}..{hi}, got {bad}"):
            rdmaq.Writer(args.pop("n_readers"), transport="shm", **args)
        cfg = ffi.new("struct rdmaq_config *", dict(good, max_message=1 << 20, **{field: bad}))
        assert lib.rdmaq_shm_writer_create(ffi.new("struct rdmaq_writer **"), cfg) == -errno.EINVAL
        assert f"{field} must be" in _errmsg() and f"{lo}..{hi}, got {bad}" in _errmsg()


def test_python_and_the_core_refuse_the_same_waiting():
    spin_max, slice_min, slice_max = (lib.RDMAQ_MAX_SPIN_NS, lib.RDMAQ_MIN_SLICE_NS,
                                      lib.RDMAQ_MAX_SLICE_NS)
    for kw, match in [({"spin_us": spin_max // 1000 + 1}, f"spin_us must be in 0..{spin_max // 1000}"),
                      ({"slice_us": slice_min // 1000 - 1}, f"{slice_min // 1000}..{slice_max // 1000}"),
                      ({"slice_us": slice_max // 1000 + 1}, f"slice_us must be in 0..{slice_max // 1000}")]:
        with pytest.raises(ValueError, match=match):
            rdmaq.Writer(1, transport="shm", **kw)
    with rdmaq.Writer(1, transport="shm") as w:
        for wc, why in [({"spin_ns": spin_max + 1}, f"at most {spin_max} ns"),
                        ({"slice_ns": slice_min - 1}, f"{slice_min}..{slice_max} ns"),
                        ({"slice_ns": slice_max + 1}, f"{slice_min}..{slice_max} ns")]:
            rc = lib.rdmaq_writer_set_wait(w._ptr, ffi.new("struct rdmaq_wait_config *", wc))
            assert rc == -errno.EINVAL and why in _errmsg(), (wc, _errmsg())
