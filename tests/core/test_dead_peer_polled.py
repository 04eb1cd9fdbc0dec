"""A dead peer is reported whatever the caller's timeouts: a reader polling ``get`` (or
``wait_ready``) with timeouts of 0, 1 ms or 50 ms after its writer was killed, or a writer
polling ``put`` after its reader was, gets PeerDeadError naming the dead process (the
liveness check runs every 100 ms of the endpoint's time, not of one call's), as a call
that blocks without a timeout does.  Messages put before the writer died are got first."""
import time

import pytest

import rdmaq
from children import TIMEOUT, idle_writer, ready_writer, sleepy_reader, start
from observe import kill_stopped

TIMEOUTS = [0, 0.001, 0.05, None]
# Far beyond the 100 ms check period: only a peer never reported reaches it.
DEADLINE_S = 30
SLOTS = 8


def _poll(call, timeout):
    """Call ``call(timeout)`` until it raises something other than TimeoutError (or
    DEADLINE_S passes: fail); what it returned meanwhile, and what it raised."""
    got = []
    end = time.monotonic() + DEADLINE_S
    while True:
        try:
            got.append(call(timeout))
        except TimeoutError:
            assert time.monotonic() < end, f"still timing out {DEADLINE_S} s after the peer died"
        except rdmaq.Error as e:
            return got, e


@pytest.mark.parametrize("timeout", TIMEOUTS, ids=str)
def test_a_reader_polling_learns_its_writer_died(transport, procs, results, shm_names, timeout):
    sent = [b"before", b"it died"]
    procs.append(start(ready_writer, transport, sent, results))
    handle = results.get(timeout=TIMEOUT)
    if transport == "shm":
        shm_names.append(handle.info.name)
    with rdmaq.Reader(handle, 0) as r:
        r.wait_ready(timeout=TIMEOUT)
        assert results.get(timeout=TIMEOUT) == "sent"
        kill_stopped(procs[0])
        procs[0].join(TIMEOUT)
        got, err = _poll(r.get, timeout)
        assert got == sent
        assert isinstance(err, rdmaq.PeerDeadError), repr(err)
        assert "writer" in str(err)
        with pytest.raises(rdmaq.PeerDeadError):  # and so on
            r.get(timeout=timeout)


@pytest.mark.parametrize("timeout", TIMEOUTS, ids=str)
def test_a_writer_polling_learns_its_reader_died(transport, procs, results, timeout):
    with rdmaq.Writer(1, transport=transport, slot_bytes=1024, slots=SLOTS) as w:
        victim = start(sleepy_reader, w.handle, 0, results)
        procs.append(victim)
        w.wait_ready(timeout=TIMEOUT)
        assert results.get(timeout=TIMEOUT)[1] == "attached"
        for i in range(SLOTS):  # the ring is full: the next put needs the reader's credit
            w.put(b"m%d" % i, timeout=TIMEOUT)
        kill_stopped(victim)
        victim.join(TIMEOUT)
        got, err = _poll(lambda t: w.put(b"next", timeout=t), timeout)
        assert got == []
        assert isinstance(err, rdmaq.PeerDeadError), repr(err)
        assert f"reader 0 (pid {victim.pid}" in str(err)
        assert w.dead_readers() == [0]


@pytest.mark.parametrize("timeout", TIMEOUTS, ids=str)
def test_a_reader_polling_wait_ready_learns_its_writer_died(transport, procs, results, shm_names,
                                                            timeout):
    """Before the queue is ready too: a writer killed before it served its readers."""
    procs.append(start(idle_writer, transport, results))
    handle = results.get(timeout=TIMEOUT)
    if transport == "shm":
        shm_names.append(handle.info.name)  # its segment outlives it
    r = rdmaq.Reader(handle, 0)
    try:
        kill_stopped(procs[0])
        procs[0].join(TIMEOUT)
        _, err = _poll(r.wait_ready, timeout)
        assert isinstance(err, rdmaq.PeerDeadError), repr(err)
        assert "writer" in str(err)
    finally:
        r.close()
