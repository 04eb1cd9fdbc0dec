"""rdmaq/fields.py: the checks every value from another process goes through (a
handle, the verbs bootstrap's messages), each at its boundaries, and the error
naming the field and what was wrong."""
import pickle

import pytest

from rdmaq import fields
from rdmaq.fields import Bad


def _bad(fn, *args):
    with pytest.raises(Bad) as e:
        fn(*args)
    return str(e.value)


def test_an_error_names_the_field_and_why():
    e = Bad("pool.qps[3][0]", "is missing")
    assert (e.field, e.why) == ("pool.qps[3][0]", "is missing")
    assert str(e) == "field 'pool.qps[3][0]' is missing"


def test_an_error_crosses_processes_whole():
    """Pickled (a worker process's error sent back, multiprocessing), it stays the same error."""
    e = pickle.loads(pickle.dumps(Bad("pool.qps[3][0]", "is missing")))
    assert type(e) is Bad and (e.field, e.why) == ("pool.qps[3][0]", "is missing")
    assert str(e) == "field 'pool.qps[3][0]' is missing"


def test_values_are_shown_cut_to_60_characters():
    assert fields.show("x" * 58) == repr("x" * 58)  # 60 with its quotes: whole
    assert fields.show("x" * 59) == repr("x" * 59)[:57] + "..."
    assert len(fields.show(list(range(100)))) == 60


@pytest.mark.parametrize("lo, hi, good, bad", [(0, 10, [0, 10], [-1, 11]), (1, 1, [1], [0, 2])])
def test_integers_at_their_bounds(lo, hi, good, bad):
    for v in good:
        assert fields.integer(v, "f", lo, hi) == v
    for v in bad:
        assert _bad(fields.integer, v, "f", lo, hi) == f"field 'f' must be in {lo}..{hi}, got {v}"
    assert _bad(fields.integer, True, "f", lo, hi) == "field 'f' must be an integer, got True"
    assert _bad(fields.integer, 1.0, "f", lo, hi) == "field 'f' must be an integer, got 1.0"


def test_text_at_its_length_and_characters():
    assert fields.text("a" * 5, "t", 5) == "a" * 5
    assert _bad(fields.text, "a" * 6, "t", 5) == "field 't' is longer than 5 characters"
    assert fields.text(" ~", "t", 5) == " ~"  # printable ASCII, both ends
    assert "has characters it may not have" in _bad(fields.text, "a\x1f", "t", 5)
    assert "has characters it may not have" in _bad(fields.text, "a\x7f", "t", 5)
    assert _bad(fields.text, b"a", "t", 5) == "field 't' must be a string, got b'a'"


def test_hex_bytes_exactly_so_many():
    assert fields.hexbytes("00ff", "h", 2) == b"\x00\xff"
    assert "must be 2 bytes as 4 lowercase hex digits" in _bad(fields.hexbytes, "00f", "h", 2)
    assert "longer than 4 characters" in _bad(fields.hexbytes, "00ff0", "h", 2)
    assert "has characters" in _bad(fields.hexbytes, "00FF", "h", 2)


def test_raw_bytes_exactly_so_many():
    assert fields.raw_bytes(b"abcd", "r", 4) == b"abcd"
    for v in (b"abc", b"abcde", "abcd", bytearray(b"abcd")):
        assert _bad(fields.raw_bytes, v, "r", 4).startswith("field 'r' must be 4 bytes, got")


def test_arrays_at_their_lengths():
    assert fields.array([1], "a", 1, 2) == [1]
    assert fields.array((1, 2), "a", 1, 2) == (1, 2)
    assert _bad(fields.array, [], "a", 1, 2) == "field 'a' must have 1..2 entries, got 0"
    assert _bad(fields.array, [1, 2, 3], "a", 1, 2) == "field 'a' must have 1..2 entries, got 3"
    assert _bad(fields.array, {1: 2}, "a", 0, 2) == "field 'a' must be a list, got {1: 2}"


def test_flags_are_booleans_only():
    assert fields.flag(True, "b") is True and fields.flag(False, "b") is False
    assert _bad(fields.flag, 1, "b") == "field 'b' must be true or false, got 1"


def test_json_objects_from_a_peer():
    assert fields.loads(b'{"a": 1}', "msg") == {"a": 1}
    assert _bad(fields.loads, b"[1]", "msg") == "field 'msg' must be an object, got [1]"
    assert _bad(fields.loads, b"{", "msg") == "field 'msg' is not valid JSON (JSONDecodeError)"
    assert _bad(fields.loads, b"\xff", "msg") == "field 'msg' is not valid JSON (UnicodeDecodeError)"
    assert _bad(fields.loads, b"[" * 100000, "msg") == "field 'msg' is not valid JSON (RecursionError)"


def test_keys_and_attributes_that_are_missing():
    assert fields.get({"k": 0}, "k") == 0
    assert _bad(fields.get, {}, "k") == "field 'k' is missing"
    assert _bad(fields.get, {}, "k", "msg.k") == "field 'msg.k' is missing"

    class Obj:
        a = None

    assert fields.attr(Obj(), "a", "o.a") is None  # present, even if None
    assert _bad(fields.attr, Obj(), "b", "o.b") == "field 'o.b' is missing"


def test_the_unsigned_widths_are_what_their_names_say():
    # the verbs bootstrap's rkeys, endpoint ids and protocol versions are U32, its QP numbers U24
    assert (fields.U24, fields.U32, fields.U64) == (2**24 - 1, 2**32 - 1, 2**64 - 1)
    assert fields.integer(2**32 - 1, "rkey", 0, fields.U32) == 2**32 - 1
