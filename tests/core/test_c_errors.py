"""Bad input that only the C core can see reaches Python as the documented
exception (rdmaq/errors.py maps the negative errno), with the C message."""
import errno

import pytest

import rdmaq


def test_index_beyond_the_queue_s_readers(transport):
    """A handle claiming more readers than the queue has: the Python range
    check passes, the C attach refuses it."""
    with rdmaq.Writer(2, transport=transport) as w:
        h = w.handle
        forged = rdmaq.Handle(h.transport, 5, dict(h.info), h.version)
        # shm: the C attach checks the index against the segment; verbs: the writer
        # compares the handle's geometry with its own at the rendezvous.
        with pytest.raises(ValueError, match="reader index 3 out of range: queue has 2 readers"
                                             "|handle describes rings of .*'n_readers': 5"):
            rdmaq.Reader(forged, 3)
        readers = [rdmaq.Reader(w.handle, i) for i in range(2)]  # the queue is unharmed
        w.put(b"ok", timeout=30)
        assert [r.get(timeout=30) for r in readers] == [b"ok", b"ok"]
        for r in readers:
            r.close()


def test_ring_above_16_gib_is_refused_by_the_core(transport):
    with pytest.raises(ValueError, match="larger than 16 GiB"):
        rdmaq.Writer(1, transport=transport, slot_bytes=1 << 20, slots=1 << 15)


def test_each_extension_reports_its_own_errors():
    """Each extension links its own copy of the engine (csrc/sources.mk), so
    each has its own thread-local rdmaq_errmsg(): a backend reads errors
    through its own lib.  The verbs extension links no shm code."""
    from rdmaq import _rdmaq as shm

    verbs = pytest.importorskip("rdmaq._rdmaq_verbs")
    cfg = shm.ffi.new("struct rdmaq_config *", {"n_readers": 0, "slot_bytes": 4096, "slots": 8,
                                                "max_message": 1})
    out = shm.ffi.new("struct rdmaq_writer **")
    assert shm.lib.rdmaq_shm_writer_create(out, cfg) == -errno.EINVAL
    assert verbs.lib.rdmaq_sched_slice_probe(1) == -errno.EINVAL

    def message(ext):
        return ext.ffi.string(ext.lib.rdmaq_errmsg()).decode()

    assert message(shm).startswith("n_readers must be in 1..")
    assert message(verbs).startswith("slice must be in")
    assert not hasattr(verbs.lib, "rdmaq_shm_writer_create")
    assert not hasattr(shm.lib, "rdmaq_verbs_ctx_open")
