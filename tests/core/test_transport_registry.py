"""A transport is a line in rdmaq.handle.TRANSPORTS and a module that fits
rdmaq.transport.Transport.  This test module is one: "relay", the shm transport
underneath with a handle info of its own, registered for each test's duration."""
import pickle
import sys
from dataclasses import dataclass

import pytest

import rdmaq
from rdmaq import handle
from rdmaq.handle import Handle, Registered, ShmInfo
from rdmaq.transport import shm

NAME = "relay"
ffi, lib = shm.ffi, shm.lib


@dataclass(frozen=True)
class RelayInfo:
    segment: str


def available():
    return True


def create_writer(config, **options):
    backend = shm.create_writer(config, **options)
    backend.handle = Handle(NAME, config["n_readers"], RelayInfo(backend.handle.info.name))
    return backend


def attach_reader(h, index, spin_ns):
    return shm.attach_reader(Handle("shm", h.n_readers, ShmInfo(h.info.segment, "")), index, spin_ns)


@pytest.fixture
def registry():
    """rdmaq.handle.TRANSPORTS with "relay" added (in place: it is the one table), restored
    after the test."""
    saved = dict(handle.TRANSPORTS)
    handle.TRANSPORTS[NAME] = Registered(__name__, RelayInfo)
    yield handle.TRANSPORTS
    handle.TRANSPORTS.clear()
    handle.TRANSPORTS.update(saved)


def test_a_registered_transport_carries_messages(registry):
    assert rdmaq.resolve_transport(NAME) == NAME
    with rdmaq.Writer(1, transport=NAME) as w:
        assert w.transport == NAME and type(w.handle.info) is RelayInfo
        with rdmaq.Reader(pickle.loads(pickle.dumps(w.handle)), 0) as r:
            assert r.transport == NAME
            w.put(b"relayed", timeout=30)
            assert r.get(timeout=30) == b"relayed"
    with pytest.raises(ValueError, match=f"unknown transport 'udp': choose one of auto, .*{NAME}"):
        rdmaq.Writer(1, transport="udp")
    with pytest.raises(TypeError, match=f"handle info must be a RelayInfo for transport '{NAME}'"):
        rdmaq.Reader(Handle(NAME, 1, ShmInfo("x", "")), 0)


def test_auto_takes_the_first_available_in_table_order(registry):
    listed = dict(registry)
    registry.clear()
    registry["missing"] = Registered("rdmaq.transport.no_such_module", RelayInfo)
    registry[NAME] = listed[NAME]
    registry.update(listed)
    assert rdmaq.resolve_transport("auto") == NAME  # "missing" does not load: skipped
    with pytest.raises(ValueError, match="transport 'missing' is not available: No module named"):
        rdmaq.Writer(1, transport="missing")


class _Recorded:
    """A relay backend whose release (Backend.close) is written down in ``released``."""

    def __init__(self, inner, role, released):
        self._inner, self._role, self._released = inner, role, released

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def close(self):
        self._released.append(self._role)
        self._inner.close()


def test_closing_an_endpoint_releases_its_transport_backend_once(registry, monkeypatch):
    """Backend.close (what the transport holds beyond the C object) is called by the
    endpoint's close(), once: not before, not again by a second close()."""
    released = []
    module = sys.modules[__name__]
    make_writer, make_reader = module.create_writer, module.attach_reader
    monkeypatch.setattr(module, "create_writer",
                        lambda config, **o: _Recorded(make_writer(config, **o), "writer", released))
    monkeypatch.setattr(module, "attach_reader",
                        lambda h, index, spin_ns: _Recorded(make_reader(h, index, spin_ns), "reader", released))
    w = rdmaq.Writer(1, transport=NAME)
    r = rdmaq.Reader(w.handle, 0)
    w.put(b"relayed", timeout=30)
    assert r.get(timeout=30) == b"relayed"
    assert released == []
    r.close()
    assert released == ["reader"]
    w.close()
    assert released == ["reader", "writer"]
    r.close()
    w.close()
    assert released == ["reader", "writer"]
