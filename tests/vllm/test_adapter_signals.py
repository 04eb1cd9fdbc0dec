"""The core endpoints' promise (README, Errors) through the vLLM adapter: an enqueue or
dequeue that raises did nothing, one that returns did its work once, and a message whose
objects fail to unpickle stays first (``readable()`` says it is there, without raising;
each ``dequeue`` raises that error).  Under a storm of SIGINTs (adapter_storm.py) no
object is lost or duplicated: scaled down by default (one run of 3,000 objects);
``pytest --soak`` runs ten of 30,000.  Needs vLLM importable."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("vllm")

from adapter_pair import pair  # noqa: E402

STORM = Path(__file__).resolve().parent / "adapter_storm.py"
SEED = 39
RUN_LIMIT_S = 600


def _pair():
    return pair(1, max_chunk_bytes=1 << 16)


class Unpicklable:
    """An object whose unpickling raises, each time (its own error, not a signal's)."""

    def __reduce__(self):
        return (_fail, ("its own error",))


def _fail(why):
    raise ValueError(why)


def test_a_message_that_fails_to_unpickle_stays_first_and_readable_says_it_is_there():
    w, r = _pair()
    try:
        w.enqueue(Unpicklable())
        w.enqueue("after it")
        r.spin_until_readable([], time.monotonic() + 60)
        for _ in range(2):
            assert r.readable() is True  # a yes/no question: never the unpickling error
        for _ in range(2):  # each dequeue raises it again: it was not taken
            with pytest.raises(ValueError, match="its own error"):
                r.dequeue(timeout=10)
            assert r.readable() is True
    finally:
        r.shutdown()
        w.shutdown()


@pytest.mark.parametrize("exc", [KeyboardInterrupt, TimeoutError], ids=["BaseException", "Exception"])
def test_a_dequeue_whose_unpickling_a_handler_interrupts_took_nothing(monkeypatch, exc):
    """A signal handler's exception while dequeue unpickles (KeyboardInterrupt, or the
    SIGALRM-timeout idiom's Exception): the dequeue raises it and the message is the next
    dequeue's."""
    from rdmaq.vllm import queue as rq

    w, r = _pair()
    try:
        w.enqueue({"n": 1})
        w.enqueue({"n": 2})
        real = rq.serialize.loads
        calls = []

        def interrupted(msg):
            calls.append(1)
            if len(calls) == 1:
                raise exc("the handler's")
            return real(msg)

        monkeypatch.setattr(rq.serialize, "loads", interrupted)
        with pytest.raises(exc, match="the handler's"):
            r.dequeue(timeout=10)
        assert r.dequeue(timeout=10) == {"n": 1}
        assert r.dequeue(timeout=10) == {"n": 2}
    finally:
        r.shutdown()
        w.shutdown()


@pytest.mark.soak
@pytest.mark.timeout(RUN_LIMIT_S)
def test_no_object_lost_or_duplicated_under_sigints(request):
    runs, objects = (10, 30_000) if request.config.getoption("soak") else (1, 3_000)
    p = subprocess.run([sys.executable, str(STORM), "--objects", str(objects), "--runs", str(runs),
                        "--seed", str(SEED)], capture_output=True, text=True,
                       timeout=runs * RUN_LIMIT_S)
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    reports = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(reports) == runs, p.stdout
    for report in reports:
        assert "error" not in report, report
        assert (report["lost"], report["duplicated"], report["corrupted"]) == (0, 0, 0), report
        # the storm reached both processes' calls (else it proves nothing)
        assert report["writer_signals"]["raised"] > 0 and report["reader_signals"]["raised"] > 0, report
