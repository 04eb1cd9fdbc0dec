"""`rdmaq demo`'s edges that a whole run does not show: the largest ring it accepts and
how long each of its readers waits for a message."""
from rdmaq import demo


def test_the_demo_accepts_a_ring_of_2_to_the_24_slots():
    """--slots is bounded by 1 << 24, inclusive: the largest ring the help allows is taken."""
    assert demo.build_parser().parse_args(["--slots", str(1 << 24)]).slots == 1 << 24


def test_a_demo_reader_waits_up_to_120_s_for_each_message(monkeypatch):
    """Each reader's get waits 120 s, long enough for a slow writer, then reports."""
    waits = []

    class FakeReader:
        stats = {}

        def __init__(self, handle, index):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def get(self, timeout=None):
            waits.append(timeout)
            return b"m"

    monkeypatch.setattr(demo.rdmaq, "Reader", FakeReader)
    results = []

    class Results:
        put = results.append

    demo._reader(None, 0, 3, Results)
    assert waits == [120, 120, 120]
    assert results[0][3] is None
