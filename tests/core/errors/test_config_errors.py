"""Configuration errors: a wrong type for a wait option, a transport 'auto' that finds
nothing usable, an option the transport does not take.  Each fails before anything is
created, with a message that says why."""
import pytest

import rdmaq
import rdmaq.transport as transport
from children import TIMEOUT


def test_writer_restore_slice_must_be_a_bool():
    """1 would pass for True in C: a bool is asked for, as for anticipate."""
    with pytest.raises(TypeError, match="restore_slice must be a bool, got int"):
        rdmaq.Writer(1, transport="shm", restore_slice=1)


def test_reader_restore_slice_must_be_a_bool_and_a_bad_one_takes_no_index():
    """The reader checks it before attaching: index 0 stays free."""
    with rdmaq.Writer(1, transport="shm") as w:
        with pytest.raises(TypeError, match="restore_slice must be a bool, got str"):
            rdmaq.Reader(w.handle, 0, restore_slice="yes")
        with rdmaq.Reader(w.handle, 0, restore_slice=True) as r:
            w.wait_ready(timeout=TIMEOUT)
            w.put(b"ok", timeout=TIMEOUT)
            assert r.get(timeout=TIMEOUT) == b"ok"


class _Unavailable:
    @staticmethod
    def available():
        return False


def _nothing_loads(name):
    raise ValueError(f"transport {name!r} is not available: not built here")


@pytest.mark.parametrize("why", ["unavailable", "not built"])
def test_auto_with_no_usable_transport_raises_and_points_at_doctor(monkeypatch, why):
    """'auto' that finds no transport loading and available says so (ValueError
    naming them and `rdmaq doctor`) rather than handing back no transport."""
    monkeypatch.setattr(transport, "load",
                        (lambda name: _Unavailable()) if why == "unavailable" else _nothing_loads)
    with pytest.raises(ValueError, match=r"transport 'auto': none of .* is available here.*rdmaq doctor"):
        transport.resolve("auto")
    with pytest.raises(ValueError, match="transport 'auto': none of"):
        rdmaq.Writer(1, transport="auto")


def test_options_given_to_shm_are_refused_by_name():
    """shm takes no transport options: one meant for verbs is refused, not silently dropped."""
    with pytest.raises(TypeError, match="^transport 'shm' takes no options, got device, gid_index$"):
        rdmaq.Writer(1, transport="shm", gid_index=3, device="rxe0")
