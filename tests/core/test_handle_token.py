"""A handle is a value: immutable, hashable, equal to its pickled copy, so a reader
cannot change the queue it names after the writer made it (README: "a small
picklable token")."""
import dataclasses
import pickle

import pytest

import rdmaq
from rdmaq.handle import HANDLE_VERSION, MAX_READERS, ShmInfo


def test_a_handle_cannot_be_changed():
    with rdmaq.Writer(2, transport="shm") as w:
        h = w.handle
        h.check(1)
        with pytest.raises(dataclasses.FrozenInstanceError):
            h.n_readers = 3
        with pytest.raises(dataclasses.FrozenInstanceError):
            h.info.name = "rdmaq-other"
        copy = pickle.loads(pickle.dumps(h))
        assert copy == h and hash(copy) == hash(h) and copy is not h
        assert {h: 1}[copy] == 1
        assert h.version == HANDLE_VERSION and h.n_readers == 2 and isinstance(h.info, ShmInfo)


def test_the_largest_queue_a_handle_names():
    h = rdmaq.Handle("shm", MAX_READERS, ShmInfo("rdmaq-x", ""))
    h.check(MAX_READERS - 1)
    assert MAX_READERS == 256
    with pytest.raises(ValueError, match="handle n_readers must be in 1..256, got 257"):
        rdmaq.Handle("shm", MAX_READERS + 1, ShmInfo("rdmaq-x", "")).check(0)
