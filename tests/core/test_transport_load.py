"""Choosing a transport by name (rdmaq/transport/__init__.py)."""
import sys

import pytest

from rdmaq import transport


def test_known_transports_load():
    assert transport.load("shm").NAME == "shm"


def test_a_verbs_transport_that_does_not_import_is_a_clear_value_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "rdmaq.transport.verbs", None)  # as if not built
    monkeypatch.delattr(transport, "verbs", raising=False)
    with pytest.raises(ValueError, match="transport 'verbs' is not available"):
        transport.load("verbs")


def test_an_unknown_transport():
    with pytest.raises(ValueError, match="unknown transport 'tcp': choose one of auto, verbs, shm"):
        transport.load("tcp")
