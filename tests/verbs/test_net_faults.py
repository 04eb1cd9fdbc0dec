"""Network faults between the SoftRoCE VM's two hosts, under a running queue.

The writer is this process on rxe0 (veth0, 192.0.2.1); the other end runs
as the second host (`rxe-peer`, rxe1 on veth1, 192.0.2.2) and checks every
message it gets (tests/verbs/vstream.py: a torn, repeated or missing
message is reported as such).  `rxe-net` (tests/rxe/net) takes links down
and up, shapes them with tc netem, deletes and re-creates rxe devices.

What must hold: a fault RC can ride out (a short flap, loss, delay,
duplicates) loses nothing; one it cannot gives each end a clear error
naming the peer, within the liveness timeout (RDMAQ_VERBS_LIVENESS_S),
never a hang, and nothing torn or repeated before it.  docs/verbs.md
records what was measured.
"""
import json
import os
import pickle
import queue
import re
import shutil
import subprocess
import sys
import threading
import time

import pytest
from vstream import check, message

import rdmaq

HERE = os.path.dirname(os.path.abspath(__file__))
DEV0 = os.environ.get("RDMAQ_VM_DEV0", "rxe0")
DEV1 = os.environ.get("RDMAQ_VM_DEV1", "rxe1")
pytestmark = pytest.mark.skipif(
    not (os.environ.get("RDMAQ_VM_DEV1") and shutil.which("rxe-peer") and shutil.which("rxe-net")),
    reason="needs the SoftRoCE VM's second host (tests/rxe/vm-run provides rxe1, rxe-peer, rxe-net)")

GEOMETRY = {"slot_bytes": 2048, "slots": 16}
WAIT = 120  # never reached when things work; generous for the emulated VM


def rxe_net(*args, timeout=WAIT):
    r = subprocess.run(["rxe-net", *args], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"rxe-net {' '.join(args)}: {r.stderr}"


@pytest.fixture
def net():
    """Both links up, routed, without netem, before and after the test."""
    rxe_net("reset")
    yield rxe_net
    rxe_net("reset")


def port_state(dev):
    with open(f"/sys/class/infiniband/{dev}/ports/1/state") as f:
        return f.read().split(":")[-1].strip()


def counter(dev, name):
    """An rxe hardware counter (rdma statistic): RC's own view of what it did."""
    with open(f"/sys/class/infiniband/{dev}/ports/1/hw_counters/{name}") as f:
        return int(f.read())


def retransmissions():
    """RC retries (timeouts, sequence NAKs) of both hosts' requesters."""
    return counter(DEV0, "completer_retry_err") + counter(DEV1, "completer_retry_err")


def wait_until(pred, what, timeout=WAIT):
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


class Peer:
    """tests/verbs/vstream.py run as the second host; its JSON lines, live."""

    def __init__(self, *args):
        self.proc = subprocess.Popen(["rxe-peer", sys.executable, os.path.join(HERE, "vstream.py"), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.events = queue.Queue()
        self.count = 0  # messages it has reported so far
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.events.put(json.loads(line))
        self.events.put(None)

    def next(self, *kinds, timeout=WAIT):
        """The next event of one of these kinds (progress is noted on the way)."""
        while True:
            try:
                ev = self.events.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"the peer said nothing for {timeout} s (waiting for {kinds})") from None
            if ev is None:
                self.proc.wait(30)
                raise AssertionError(f"the peer exited ({self.proc.returncode}) before {kinds}: "
                                     f"{self.proc.stderr.read()[-3000:]}")
            self.count = ev.get("count", self.count)
            if ev["event"] in kinds:
                return ev

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


@pytest.fixture
def peers():
    started = []
    yield lambda *args: started.append(Peer(*args)) or started[-1]
    for p in started:
        p.kill()


class Streamer:
    """Puts message(0), message(1), ... from a thread until told to stop or put fails."""

    def __init__(self, w, timeout=WAIT):
        self.w, self.timeout = w, timeout
        self.sent = 0
        self.error = None
        self.limit = None
        self.go = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            while self.limit is None or self.sent < self.limit:
                self.w.put(message(self.sent), timeout=self.timeout)
                self.sent += 1
        except Exception as e:
            self.error = e

    def finish(self, total):
        """Stop after `total` messages; returns once they are all put (or put failed)."""
        self.limit = total
        self.thread.join(WAIT * 3)
        assert not self.thread.is_alive(), "put hung"


def remote_reader(peers, w, get_timeout=WAIT):
    peer = peers("read", pickle.dumps(w.handle).hex(), "0", str(get_timeout))
    w.wait_ready(timeout=300)
    ready = peer.next("ready")
    return peer, ready["pid"]


def _writer():
    return rdmaq.Writer(1, transport="verbs", device=DEV0, **GEOMETRY)


def test_cut_shorter_than_liveness_is_retransmitted_and_loses_nothing(net, peers, monkeypatch):
    """Every packet dropped both ways for a while, links up (a cut cable
    beyond the hosts), with WRITEs in flight; the liveness timeout is long
    here so that host speed cannot matter.  RC retransmits: every message
    arrives once, whole, in order."""
    monkeypatch.setenv("RDMAQ_VERBS_LIVENESS_S", "120")
    with _writer() as w:
        peer, _ = remote_reader(peers, w)
        s = Streamer(w)
        wait_until(lambda: s.sent >= 200, "200 messages put")
        retries = retransmissions()
        net("cut")
        # WRITEs (or credits) were in flight: RC's retry timer fires while cut.
        wait_until(lambda: retransmissions() > retries, "a retransmission while the path is cut")
        net("clear")
        s.finish(s.sent + 300)
        end = peer.next("end", "bad") if s.error else None
        assert s.error is None, f"{s.error!r}; peer: {end}"
    end = peer.next("end", "bad")
    assert end["event"] == "end" and end["type"] == "PeerClosedError", end
    assert end["count"] == s.sent


def test_cut_longer_than_liveness_names_the_peer_on_both_ends(net, peers, monkeypatch):
    monkeypatch.setenv("RDMAQ_VERBS_LIVENESS_S", "3")
    with _writer() as w:
        peer, pid = remote_reader(peers, w)
        s = Streamer(w)
        wait_until(lambda: s.sent >= 200, "200 messages put")
        net("cut")
        s.finish(10**9)  # put fails long before
        end = peer.next("end", "bad")
    assert isinstance(s.error, rdmaq.PeerDeadError), f"{s.error!r}; peer: {end}"
    assert re.search(rf"reader 0 \(pid {pid}\) became unreachable", str(s.error)), f"{s.error}; peer: {end}"
    assert end["event"] == "end" and end["type"] == "PeerDeadError", end
    assert re.search(rf"writer \(pid {os.getpid()}\) became unreachable", end["error"]), end
    assert end["count"] <= s.sent


def _new_queue_carries_50(peers):
    """After a fault has healed: a new queue to a new peer process runs."""
    with _writer() as w:
        peer, _ = remote_reader(peers, w)
        s = Streamer(w)
        s.finish(50)
        assert s.error is None, repr(s.error)
    end = peer.next("end", "bad")
    assert end["event"] == "end" and end["count"] == 50, end


def test_link_down_mid_stream_then_back(net, peers, monkeypatch):
    """`ip link set veth1 down` under the stream, then up.  The far host
    (veth0 loses carrier) retransmits; rxe fails what the near host posts
    while its link is down (a credit, here: local QP operation error), and
    its liveness connection gives up after RDMAQ_VERBS_LIVENESS_S.  Either
    way both ends name the other, nothing before is torn or repeated, and
    once the link is back a new queue runs over it."""
    monkeypatch.setenv("RDMAQ_VERBS_LIVENESS_S", "10")
    with _writer() as w:
        peer, pid = remote_reader(peers, w)
        s = Streamer(w)
        wait_until(lambda: s.sent >= 200, "200 messages put")
        net("down", "veth1")
        end = peer.next("end", "bad")
        s.finish(10**9)
    # rdmaq.Error: a runtime fault without a more specific type (the local port's state)
    assert end["event"] == "end" and end["type"] in ("Error", "PeerDeadError"), end
    assert re.search(rf"writer \(pid {os.getpid()}\)", end["error"]), end
    if end["type"] == "Error":
        assert f"local port {DEV1}:1 is down" in end["error"], end
    assert isinstance(s.error, rdmaq.PeerDeadError), repr(s.error)
    assert re.search(rf"reader 0 \(pid {pid}\) (died|became unreachable)", str(s.error)), str(s.error)
    net("up", "veth1")
    wait_until(lambda: port_state(DEV0) == "ACTIVE" and port_state(DEV1) == "ACTIVE", "both ports ACTIVE")
    _new_queue_carries_50(peers)


def test_loss_delay_and_duplicates_lose_and_repeat_nothing(net, peers):
    with _writer() as w:
        peer, _ = remote_reader(peers, w)
        dup = counter(DEV0, "duplicate_request") + counter(DEV1, "duplicate_request")
        for dev in ("veth0", "veth1"):
            net("netem", dev, "loss", "2%", "duplicate", "2%", "delay", "5ms", "2ms")
        s = Streamer(w)
        s.finish(150)
        assert s.error is None, repr(s.error)
    end = peer.next("end", "bad")
    assert end["event"] == "end" and end["type"] == "PeerClosedError", end
    assert end["count"] == 150
    # Duplicated requests did reach a responder, which dropped them.
    assert counter(DEV0, "duplicate_request") + counter(DEV1, "duplicate_request") > dup


def test_remote_reader_killed_mid_stream_is_named(peers):
    with _writer() as w:
        peer, pid = remote_reader(peers, w)
        s = Streamer(w)
        wait_until(lambda: s.sent >= 200, "200 messages put")
        peer.kill()
        s.finish(10**9)
    assert isinstance(s.error, rdmaq.PeerDeadError), repr(s.error)
    assert re.search(rf"reader 0 \(pid {pid}\) died", str(s.error)), str(s.error)


def test_remote_writer_killed_mid_stream_is_named(peers):
    peer = peers("write", str(WAIT), str(GEOMETRY["slot_bytes"]), str(GEOMETRY["slots"]))
    ev = peer.next("handle")
    with rdmaq.Reader(pickle.loads(bytes.fromhex(ev["handle"])), 0) as r:
        r.wait_ready(timeout=300)
        got = 0
        with pytest.raises(rdmaq.PeerDeadError, match=rf"writer \(pid {ev['pid']}\) died"):
            while True:
                msg = r.get(timeout=WAIT)
                assert check(got, msg) is None, check(got, msg)
                got += 1
                if got == 200:
                    peer.kill()
    assert got >= 200


def _uverbs_open_here(dev):
    """Does this process hold the device open (then deleting it would wait for us)?"""
    for d in os.listdir("/sys/class/infiniband_verbs"):
        try:
            with open(f"/sys/class/infiniband_verbs/{d}/ibdev") as f:
                if f.read().strip() != dev:
                    continue
        except OSError:
            continue
        node = f"/dev/infiniband/{d}"
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{fd}") == node:
                    return True
            except OSError:
                pass
    return False


def test_rxe_device_deleted_under_a_running_queue(peers):
    """`rdma link delete rxe1` while the peer streams over rxe1.  rxe has no
    disassociate_ucontext: the kernel holds the deletion (ib_uverbs_remove_one)
    until every process that opened the device has closed it, and the queue
    keeps working meanwhile.  Should a kernel take the device away instead,
    both ends must get a clear error; either way nothing hangs or tears."""
    assert not _uverbs_open_here(DEV1), f"this test process has {DEV1} open: deleting it would wait for us"
    deleter = None
    try:
        with _writer() as w:
            peer, pid = remote_reader(peers, w)
            s = Streamer(w)
            wait_until(lambda: s.sent >= 200, "200 messages put")
            deleter = subprocess.Popen(["rxe-net", "rxe-del", DEV1])
            wait_until(lambda: deleter.poll() is not None or _in_removal(deleter.pid),
                       "the deletion to reach the kernel")
            held = deleter.poll() is None
            s.finish(s.sent + 400)
            if held:
                assert s.error is None, repr(s.error)
            else:
                assert isinstance(s.error, rdmaq.Error), repr(s.error)
                assert "reader 0" in str(s.error), str(s.error)
        end = peer.next("end", "bad")
        assert end["event"] == "end", end
        if held:
            assert end["type"] == "PeerClosedError" and end["count"] == s.sent, end
        peer.proc.wait(WAIT)  # the peer's exit releases the device
        assert deleter.wait(WAIT) == 0
        deleter = None
    finally:
        if deleter is not None and deleter.poll() is None:
            deleter.kill()
        if not os.path.exists(f"/sys/class/infiniband/{DEV1}"):
            rxe_net("rxe-add", DEV1)
    # The re-created device carries a new queue to a new peer process.
    _new_queue_carries_50(peers)


def _in_removal(pid):
    """`rdma link delete` sleeps in the kernel, waiting for the device's users."""
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return "remove_one" in f.read()
    except OSError:
        return False
