"""Forged and mangled handles (hypothesis): ``rdmaq.Reader(handle, index)``
raises ValueError or TypeError naming what was wrong, and never crashes,
hangs, attaches to the wrong thing or raises anything else.

One field is spoiled at a time, so the error must name that field.  A
well-formed handle whose queue is gone is a runtime fault instead:
``rdmaq.QueueNotFoundError``.
"""
import copy
import dataclasses
import os
import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rdmaq
from rdmaq.handle import HANDLE_VERSION, TRANSPORTS, ShmInfo, VerbsInfo

# a queue per example: fewer in the emulated VM, where one costs ~0.1-1 s
SETTINGS = settings(max_examples=20 if os.environ.get("RDMAQ_VM") else 150,
                    deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

junk = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                 st.text(max_size=20), st.binary(max_size=20),
                 st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))
huge_or_negative = st.one_of(st.integers(max_value=-1),
                             st.integers(min_value=1 << 31, max_value=1 << 70))
not_an_int = junk.filter(lambda v: not isinstance(v, int) or isinstance(v, bool))


class _Fresh:
    """A new queue per example (the previous one closed): an example that
    wrongly attaches a reader must not spoil the next one's index."""

    def __init__(self, transport):
        self.transport = transport
        self._writer = None

    def handle(self):
        self.close()
        self._writer = rdmaq.Writer(2, transport=self.transport)
        return self._writer.handle

    def close(self):
        if self._writer is not None:
            self._writer.close()
            self._writer = None


@pytest.fixture
def writer(transport):
    fresh = _Fresh(transport)
    yield fresh
    fresh.close()


def _expect_refused(handle, index, field):
    """Reader(handle, index) must raise ValueError/TypeError naming ``field``."""
    try:
        r = rdmaq.Reader(handle, index)
    except (ValueError, TypeError) as e:
        assert field in str(e), f"{type(e).__name__} does not name {field!r}: {e}"
        return
    r.close()
    raise AssertionError(f"a handle with a bad {field} was accepted: {handle!r}, index {index!r}")


def _with(handle, **changes):
    fields = dict(transport=handle.transport, n_readers=handle.n_readers,
                  info=handle.info, version=handle.version)
    fields.update(changes)
    return rdmaq.Handle(**fields)


def test_the_real_handle_attaches(writer):
    """The baseline the forgeries are made from."""
    h = writer.handle()
    h = pickle.loads(pickle.dumps(h))
    for i in range(2):
        rdmaq.Reader(h, i).close()


@SETTINGS
@given(index=st.one_of(huge_or_negative, not_an_int, st.just(2)))
def test_bad_index(writer, index):
    h = writer.handle()
    _expect_refused(h, index, "index")


@SETTINGS
@given(version=junk.filter(lambda v: v != HANDLE_VERSION))
def test_bad_version(writer, version):
    h = writer.handle()
    _expect_refused(_with(h, version=version), 0, "version")


@SETTINGS
@given(transport=junk.filter(lambda v: v not in list(TRANSPORTS)))
def test_bad_transport(writer, transport):
    h = writer.handle()
    _expect_refused(_with(h, transport=transport), 0, "transport")


def test_other_transport_s_handle(writer):
    h = writer.handle()
    other = "verbs" if h.transport == "shm" else "shm"
    try:
        r = rdmaq.Reader(_with(h, transport=other), 0)
    except (ValueError, TypeError) as e:
        assert "handle" in str(e) or other in str(e) or "info" in str(e), e
    else:
        r.close()
        raise AssertionError(f"a {h.transport} handle relabelled {other} attached")


@SETTINGS
@given(n_readers=st.one_of(huge_or_negative, not_an_int, st.just(0)))
def test_bad_n_readers(writer, n_readers):
    h = writer.handle()
    _expect_refused(_with(h, n_readers=n_readers), 0, "n_readers")


# A dict (what info was before typed handles), a list, ..., or the other transport's info.
OTHER_INFO = {"shm": VerbsInfo(2, "tcp://127.0.0.1:1", ("127.0.0.1", 1), "ab", bytes(16), 1, "h",
                               "d", "00" * 16, 4096, 8, 1 << 20),
              "verbs": ShmInfo("rdmaq-x", "")}


@SETTINGS
@given(data=st.data(), info=st.one_of(st.none(), st.lists(st.text(max_size=5), max_size=3),
                                      st.text(max_size=10), st.integers(), st.binary(max_size=10),
                                      st.dictionaries(st.text(max_size=5), st.text(max_size=5))))
def test_info_of_another_type(writer, data, info):
    h = writer.handle()
    if data.draw(st.booleans()):
        info = OTHER_INFO[h.transport]
    _expect_refused(_with(h, info=info), 0, "info")


def _fields(info):
    return sorted(f.name for f in dataclasses.fields(info))


@SETTINGS
@given(data=st.data())
def test_info_field_missing(writer, data):
    """A handle pickled by another release may lack a field: named, not an AttributeError."""
    h = writer.handle()
    key = data.draw(st.sampled_from(_fields(h.info)))
    info = copy.copy(h.info)
    object.__delattr__(info, key)
    _expect_refused(_with(h, info=info), 0, key)


@SETTINGS
@given(data=st.data(), value=junk)
def test_info_field_of_the_wrong_type(writer, data, value):
    h = writer.handle()
    key = data.draw(st.sampled_from(_fields(h.info)))
    real = getattr(h.info, key)
    if type(value) is type(real):
        return  # a well-typed value is the next tests' business
    _expect_refused(_with(h, info=dataclasses.replace(h.info, **{key: value})), 0, key)


@pytest.fixture
def shm_writer():
    fresh = _Fresh("shm")
    yield fresh
    fresh.close()


@SETTINGS
@given(cut=st.sampled_from(["\0", "\0x", "/", "/../", "a/b"]), where=st.sampled_from(["start", "end"]))
def test_shm_name_with_nul_or_slash(shm_writer, cut, where):
    h = shm_writer.handle()
    name = h.info.name
    bad = cut + name if where == "start" else name + cut
    _expect_refused(_with(h, info=dataclasses.replace(h.info, name=bad)), 0, "name")


def test_shm_name_of_no_queue(shm_writer):
    """A well-formed handle whose queue is gone is a runtime fault, not a bad argument."""
    h = shm_writer.handle()
    info = dataclasses.replace(h.info, name=h.info.name + "-gone")
    with pytest.raises(rdmaq.QueueNotFoundError, match="no rdmaq queue"):
        rdmaq.Reader(_with(h, info=info), 0)


@SETTINGS
@given(name=st.text(st.characters(blacklist_characters="\0/"), min_size=300, max_size=5000))
def test_shm_name_too_long(shm_writer, name):
    h = shm_writer.handle()
    _expect_refused(_with(h, info=dataclasses.replace(h.info, name=name)), 0, "name")


# ------------------------------------------------- every field of the handle itself
HANDLE_FIELDS = [f.name for f in dataclasses.fields(rdmaq.Handle)]


@pytest.mark.parametrize("key", HANDLE_FIELDS)
def test_handle_field_missing(writer, key):
    """A handle pickled by another release may lack any field, even one with a
    default (version): named, never an AttributeError nor the default."""
    h = copy.copy(writer.handle())
    object.__delattr__(h, key)
    _expect_refused(h, 0, key)


@SETTINGS
@given(data=st.data(), value=junk)
def test_handle_field_of_the_wrong_type(writer, data, value):
    h = writer.handle()
    key = data.draw(st.sampled_from(HANDLE_FIELDS))
    if type(value) is type(getattr(h, key)):
        return  # a well-typed value is test_handle_field_corrupt's business
    _expect_refused(_with(h, **{key: value}), 0, key)


# Well-typed but wrong: a strategy for each field of Handle, given the real
# handle (the test below fails on a new field without one).  The info's own
# fields are corrupted above and per transport.
CORRUPT = {
    "transport": lambda h: st.text(max_size=10).filter(lambda v: v not in list(TRANSPORTS)),
    "n_readers": lambda h: st.one_of(huge_or_negative, st.just(0)),
    "info": lambda h: st.just(OTHER_INFO[h.transport]),
    "version": lambda h: st.integers().filter(lambda v: v != HANDLE_VERSION),
}


def test_every_handle_field_has_a_corruption():
    assert sorted(CORRUPT) == sorted(HANDLE_FIELDS)


@SETTINGS
@given(data=st.data())
def test_handle_field_corrupt(writer, data):
    h = writer.handle()
    key = data.draw(st.sampled_from(HANDLE_FIELDS))
    _expect_refused(_with(h, **{key: data.draw(CORRUPT[key](h))}), 0, key)


def test_shm_handle_of_another_boot(shm_writer):
    """A well-formed handle of another host is no bad input: its queue is not here."""
    h = shm_writer.handle()
    info = dataclasses.replace(h.info, boot_id="0" * 36)
    with pytest.raises(rdmaq.QueueNotFoundError, match="boot_id"):
        rdmaq.Reader(_with(h, info=info), 0)


def test_a_boot_id_of_up_to_64_characters_is_well_formed(shm_writer):
    """info.boot_id may have up to 64 characters: one of 64 is another host's (its queue
    is not here), one of 65 is a corrupt handle naming the field."""
    h = shm_writer.handle()
    with pytest.raises(rdmaq.QueueNotFoundError, match="boot_id"):
        rdmaq.Reader(_with(h, info=dataclasses.replace(h.info, boot_id="0" * 64)), 0)
    _expect_refused(_with(h, info=dataclasses.replace(h.info, boot_id="0" * 65)), 0, "info.boot_id")
