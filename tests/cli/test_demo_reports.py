"""`rdmaq demo` when a reader does not get every message: what it prints and its exit
status, with made-up reader reports (the real run is in test_cli.py)."""
import argparse
import hashlib
import queue

import pytest

import rdmaq
from rdmaq import demo


@pytest.fixture
def writer():
    with rdmaq.Writer(1, transport="shm") as w:
        r = rdmaq.Reader(w.handle, 0)  # attached, never reads: 3 small messages fit the ring
        w.wait_ready(timeout=60)
        yield w
        r.close()


def _run(w, reports, monkeypatch, n_procs=None):
    monkeypatch.setattr(demo, "RESULT_TIMEOUT_S", 0.2)
    results = queue.Queue()
    for item in reports:
        results.put(item)
    a = argparse.Namespace(messages=3, size=10, readers=len(reports))
    return demo._broadcast(w, a, [None] * (n_procs or len(reports)), results)


def _digest(count=3, size=10):
    d = hashlib.sha256()
    for i in range(count):
        d.update(demo.message(i, size))
    return d.hexdigest()


STATS = {"spins": 1, "sleeps": 2}


def test_every_reader_intact(writer, monkeypatch, capsys):
    assert _run(writer, [(0, _digest(), STATS, None)], monkeypatch) == 0
    out = capsys.readouterr()
    assert " msg/s to every reader (" in out.out
    assert "reader 0: all messages intact and in order  spins=1 sleeps=2" in out.out
    assert out.err == ""


def test_a_reader_with_other_bytes(writer, monkeypatch, capsys):
    assert _run(writer, [(0, _digest(size=11), STATS, None)], monkeypatch) == 1
    out = capsys.readouterr()
    assert "reader 0: MISMATCH  spins=1 sleeps=2" in out.out
    assert "some readers did not get every message intact and in order" in out.err


def test_a_reader_that_failed(writer, monkeypatch, capsys):
    reports = [(1, _digest(), STATS, None), (0, None, None, "PeerDeadError: writer (pid 1) died")]
    assert _run(writer, reports, monkeypatch) == 1
    out = capsys.readouterr().out.splitlines()
    i = out.index("reader 0: FAILED: PeerDeadError: writer (pid 1) died")  # sorted by reader
    assert out[i + 1] == "reader 1: all messages intact and in order  spins=1 sleeps=2"


def test_readers_that_never_report(writer, monkeypatch, capsys):
    assert _run(writer, [(0, _digest(), STATS, None)], monkeypatch, n_procs=3) == 1
    assert "only 1 of 3 readers reported within 0.2 s" in capsys.readouterr().err


def test_each_message_is_its_index_repeated():
    assert demo.message(1, 10) == (1).to_bytes(8, "little") + b"\x01\x00"
    assert demo.message(258, 16) == (258).to_bytes(8, "little") * 2
    assert demo.message(7, 3) == b"\x07\x00\x00"


def test_a_message_of_any_size_is_that_long():
    for size in (1, 7, 8, 9, 100, 1000):
        assert len(demo.message(5, size)) == size


def test_a_reader_that_fails_reports_one_line():
    results = queue.Queue()
    demo._reader(rdmaq.Handle("shm", 1, rdmaq.handle.ShmInfo("rdmaq-no-such-queue", "")), 0, 3, results)
    index, digest, stats, error = results.get(timeout=10)
    assert (index, digest, stats) == (0, None, None)
    assert error.startswith("QueueNotFoundError: attach reader 0: no rdmaq queue rdmaq-no-such-queue here")


class _WriterThatTakesAll:
    """Takes every message at once: the progress lines alone decide what is printed."""
    stats = {"spins": 0}

    def put(self, msg, timeout):
        pass


class _TickingClock:
    """A clock that advances one second at each reading: no real time is measured."""
    def __init__(self):
        self.now = -1.0

    def perf_counter(self):
        self.now += 1.0
        return self.now


def test_progress_is_checked_every_256_messages_and_due_at_its_second(monkeypatch, capsys):
    # t0 = 0, the first progress line is due at 1; the check after message 256 reads 1.
    monkeypatch.setattr(demo, "time", _TickingClock())
    results = queue.Queue()
    results.put((0, _digest(count=256, size=10), STATS, None))
    a = argparse.Namespace(messages=256, size=10, readers=1)
    assert demo._broadcast(_WriterThatTakesAll(), a, [None], results) == 0
    sent = [line for line in capsys.readouterr().out.splitlines() if line.startswith("sent ")]
    assert sent == ["sent 256 of 256 messages"]


def test_the_writer_stats_are_printed(writer, monkeypatch, capsys):
    assert _run(writer, [(0, _digest(), STATS, None)], monkeypatch) == 0
    assert f"writer: {writer.stats}" in capsys.readouterr().out.splitlines()


def test_messages_of_one_byte_are_a_valid_demo():
    assert demo.build_parser().parse_args(["--size", "1"]).size == 1


class _HungReader:
    """A reader process that outlives the demo's 5 s grace: it records what is done to it."""
    def __init__(self, calls, **_):
        self.calls, self.pid = calls, None

    def start(self):
        self.pid = 1
        self.calls.append("start")

    def join(self, timeout=None):
        self.calls.append(("join", timeout))

    def is_alive(self):
        return "kill" not in self.calls

    def kill(self):
        self.calls.append("kill")


def test_a_hung_reader_is_killed_and_reaped(monkeypatch, capsys):
    calls = []
    ctx = argparse.Namespace(Queue=queue.Queue, Process=lambda **kw: _HungReader(calls, **kw))
    monkeypatch.setattr(demo, "quiet_spawn_context", lambda: ctx)
    monkeypatch.setattr(demo, "READY_TIMEOUT_S", 0.1)  # the reader never attaches
    assert demo.main(["--readers", "1", "--transport", "shm"]) == 1
    assert "TimeoutError" in capsys.readouterr().err
    assert calls == ["start", ("join", 5), "kill", ("join", None)]
