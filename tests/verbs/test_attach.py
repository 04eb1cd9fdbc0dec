"""verbs-only lifecycle: attaching to a writer that does not serve, or is gone.

The lifecycle checks both transports share live in tests/core/test_lifecycle.py.
"""
import dataclasses
import os
import signal

import pytest

import rdmaq
from children import idle_writer, start


def test_reader_wait_ready_times_out_when_writer_does_not_serve(procs, results):
    """The writer exists but never calls wait_ready/put: the reader's timeout holds."""
    procs.append(start(idle_writer, "verbs", results))
    handle = results.get(timeout=120)
    r = rdmaq.Reader(handle, 0)
    with pytest.raises(TimeoutError, match="did not answer in time"):
        r.wait_ready(timeout=0.5)
    r.close()


def test_reader_of_a_gone_writer_fails_fast(procs, results):
    procs.append(start(idle_writer, "verbs", results))
    handle = results.get(timeout=120)
    os.kill(procs[0].pid, signal.SIGKILL)
    procs[0].join(30)
    with pytest.raises(rdmaq.PeerDeadError, match=r"cannot reach writer \(pid"):
        rdmaq.Reader(handle, 0)


def test_corrupt_verbs_handle():
    with rdmaq.Writer(1, transport="verbs") as w:
        bad = rdmaq.Handle("verbs", 1, dataclasses.replace(w.handle.info, queue="x"))
        with pytest.raises(ValueError, match="corrupt verbs handle: field 'info.queue'"):
            rdmaq.Reader(bad, 0)
        old = rdmaq.Handle("verbs", 1, dataclasses.replace(w.handle.info, proto=99))
        with pytest.raises(ValueError, match="protocol 99"):
            rdmaq.Reader(old, 0)
