"""Edges of the vLLM adapter that test_queue.py's contract tests pass by: the ring size's
bounds, a drop-in's defaults, setup cancelled and placement's fallback, the process-group
factories' other paths (a stateless group's reader, an external writer handle, a blocking
single-reader queue), closing and the stats of forked and exiting processes, a shutdown as a
wait times out, spin_until_readable at its deadline, the reader's seat as a value.  Needs vLLM
importable (the vllm tier's venv-mq)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import multiprocessing
import os
import subprocess
import sys
import time
import types

import pytest

pytest.importorskip("torch")
pytest.importorskip("vllm")

import numpy as np  # noqa: E402
from adapter_pair import Clock as _Clock  # noqa: E402
from adapter_pair import pair as _pair  # noqa: E402

from observe import blocked_call, in_thread  # noqa: E402
from rdmaq.vllm import _geometry  # noqa: E402
from rdmaq.vllm import queue as rq  # noqa: E402
from rdmaq.vllm.placement import Seat, seat  # noqa: E402
from rdmaq.vllm.queue import RdmaqMessageQueue, VllmMessageQueue  # noqa: E402

MQ = RdmaqMessageQueue
FORK = multiprocessing.get_context("fork")
_held: list = []  # queues referenced from here alone (see the forked children below)


@pytest.fixture(autouse=True)
def _loopback(monkeypatch):
    monkeypatch.setenv("VLLM_HOST_IP", "127.0.0.1")
    monkeypatch.delenv("RDMAQ_VLLM_REMOTE", raising=False)
    monkeypatch.delenv("RDMAQ_VLLM_STATS_DIR", raising=False)
    monkeypatch.delenv("RDMAQ_VLLM_RING_BYTES", raising=False)


# ------------------------------------------------------------------ ring size
def test_the_default_ring_holds_4_mib_also_in_4_kib_slots():
    """Without RDMAQ_VLLM_RING_BYTES the ring is capped at exactly 4 MiB: small chunks
    (4 KiB slots) asking for more get 1024 slots, no more."""
    slot, slots = _geometry.ring_geometry(6000, 1000)
    assert (slot, slots) == (4096, 1024)
    assert slot * slots == 4 << 20


def test_ring_bytes_may_be_as_small_as_one_4_kib_slot(monkeypatch):
    """RDMAQ_VLLM_RING_BYTES's floor is the smallest slot, 4096 bytes, inclusive: 4096 is a
    valid setting and 4095 is refused with the floor in the message."""
    monkeypatch.setenv("RDMAQ_VLLM_RING_BYTES", "4096")
    assert _geometry.ring_geometry(100, 1) == (4096, 8)
    monkeypatch.setenv("RDMAQ_VLLM_RING_BYTES", "4095")
    with pytest.raises(ValueError, match="must be >= 4096, not 4095"):
        _geometry.ring_geometry(100, 1)


def test_a_queue_built_without_max_chunks_has_vllms_default_number_of_slots():
    """A drop-in keeps vLLM's constructor defaults: without max_chunks a ring of small
    chunks has vLLM's default number of them as slots (more than the floor of 8)."""
    default = inspect.signature(VllmMessageQueue.__init__).parameters["max_chunks"].default
    w = MQ(1, 1, max_chunk_bytes=4096, connect_ip="127.0.0.1")
    try:
        st = w.rdmaq_stats()
        assert (st["slot_bytes"], st["slots"]) == _geometry.ring_geometry(4096, default) == (4096, default)
    finally:
        w.shutdown()


def test_a_queue_built_without_max_chunk_bytes_sizes_its_ring_for_vllms_default(monkeypatch):
    """A drop-in keeps vLLM's constructor defaults: without max_chunk_bytes the ring is sized
    for vLLM's default chunk (24 MiB), visible when the ring cap does not hide it; 3 chunks,
    so that a default off by less than a slot (64 KiB) still changes the number of slots."""
    default = inspect.signature(VllmMessageQueue.__init__).parameters["max_chunk_bytes"].default
    monkeypatch.setenv("RDMAQ_VLLM_RING_BYTES", str(1 << 30))
    w = MQ(1, 1, max_chunks=3, connect_ip="127.0.0.1")
    try:
        st = w.rdmaq_stats()
        assert (st["slot_bytes"], st["slots"]) == _geometry.ring_geometry(default, 3)
    finally:
        w.shutdown()


# ---------------------------------------------------------- setup, placement
def test_a_writer_shut_down_while_waiting_for_its_remote_readers_is_cancelled():
    """wait_until_ready is collective; a writer whose remote readers never come is released
    by shutdown() from another thread with vLLM's RuntimeError("cancelled")."""
    w = MQ(1, 0, connect_ip="127.0.0.1")  # one remote reader, over ZMQ, that never subscribes
    th, box = in_thread(w.wait_until_ready)
    w.shutdown()
    th.join(timeout=60)
    assert not th.is_alive()
    assert isinstance(box.get("error"), RuntimeError) and str(box["error"]) == "cancelled", box


def test_remote_readers_without_ranks_in_ring_mode_go_over_zmq_and_the_log_says_why(
        monkeypatch, caplog):
    """RDMAQ_VLLM_REMOTE=ring with two remote readers whose ranks the writer is not told: the
    ring cannot seat them, so they read over ZMQ, and the writer's log gives the reason."""
    monkeypatch.setenv("RDMAQ_VLLM_REMOTE", "ring")
    with caplog.at_level(logging.INFO, logger="vllm.rdmaq"):
        w = MQ(3, 1, connect_ip="127.0.0.1")
    try:
        assert "rdmaq: 2 remote readers without known ranks use ZMQ TCP" in caplog.text
        h = w.export_handle()
        assert h.ring_remote_ranks is None and h.remote_subscribe_addr is not None
        assert w.rdmaq_stats()["remote"] == "zmq"
    finally:
        w.shutdown()


def test_a_ring_reader_whose_writer_shut_down_before_ready_is_told_so():
    """A ring reader's wait_until_ready waits for its writer: one whose writer shut down
    before the queue was ready raises PeerClosedError instead of returning as if ready."""
    import rdmaq

    w = MQ(1, 1, max_chunk_bytes=1 << 20, max_chunks=4)
    r = MQ.create_from_handle(w.export_handle(), 0)
    w.shutdown()
    try:
        with pytest.raises(rdmaq.PeerClosedError, match="writer closed the queue before it was ready"):
            r.wait_until_ready()
    finally:
        r.shutdown()


def test_a_handle_made_for_local_readers_alone_counts_no_remote_reader():
    """A handle built by hand from a ring's handle (local readers only, as a caller that
    made its own ring does) says there is no remote reader, and so do its readers."""
    import rdmaq

    ring = rdmaq.Writer(1, transport="shm")
    try:
        h = rq.RdmaqHandle(local_reader_ranks=[0], ring=ring.handle)
        assert (h.n_remote_reader, h.ring_remote_ranks) == (0, None)
        r = MQ.create_from_handle(h, 0)
        assert (r.n_local_reader, r.n_remote_reader) == (1, 0)
        r.shutdown()
    finally:
        ring.close()


@pytest.mark.parametrize("frames", [[b"a message"], [b"READY", b"and more"]],
                         ids=["another message", "READY with more frames"])
def test_a_remote_reader_whose_writer_sends_anything_but_ready_first_says_so(frames):
    """The ZMQ handshake: each remote reader subscribes, then the writer sends READY, one frame;
    a reader that gets anything else first raises instead of taking it for the stream's start."""
    w = MQ(1, 0, connect_ip="127.0.0.1")
    r = MQ.create_from_handle(w.export_handle(), -1)
    try:
        sock = w._remote.socket
        assert sock.poll(30_000), "the remote reader never subscribed"
        sock.recv()  # its subscription
        sock.send_multipart(frames)
        with pytest.raises(RuntimeError, match=f"expected READY from the writer, got {len(frames)} frame"):
            r.wait_until_ready()
    finally:
        r.shutdown()
        w.shutdown()


def test_rdmaq_vllm_gives_the_queue_classes_by_name_and_refuses_other_names():
    """``from rdmaq.vllm import MessageQueue`` is the adapter's queue (imported on first use,
    so that the plugin's import does not import vLLM); another name is an AttributeError."""
    import rdmaq.vllm

    assert rdmaq.vllm.MessageQueue is RdmaqMessageQueue
    assert rdmaq.vllm.RdmaqHandle is rq.RdmaqHandle and rdmaq.vllm.Handle is rq.RdmaqHandle
    with pytest.raises(AttributeError, match="module 'rdmaq.vllm' has no attribute 'Queue'"):
        rdmaq.vllm.Queue  # noqa: B018


# ------------------------------------------------------------ process groups
class _Group:
    """What create_from_process_group uses of a StatelessProcessGroup, one rank's side: its
    rank, the world's size, and a broadcast that keeps what is sent and gives the receiver
    ``received`` (what the writer's rank sent)."""

    def __init__(self, rank, world_size, received=None):
        self.rank, self.world_size, self.received, self.sent = rank, world_size, received, []

    def broadcast_obj(self, obj, src):
        if obj is None:
            return self.received
        self.sent.append((obj, src))
        return obj


@pytest.fixture
def one_node(monkeypatch):
    import vllm.distributed.parallel_state as ps

    monkeypatch.setattr(ps, "in_the_same_node_as", lambda pg, source_rank=0: [True] * pg.world_size)


def test_a_stateless_groups_reader_rank_reads_the_queue_whose_handle_it_received(one_node):
    """A reader rank of a StatelessProcessGroup takes the writer's handle from the group's
    broadcast and reads that queue."""
    w = MQ.create_from_process_group(_Group(0, 2), 1 << 20, 4, writer_rank=0, blocking=False)
    r = MQ.create_from_process_group(_Group(1, 2, received=w.export_handle()), 1 << 20, 4,
                                     writer_rank=0, blocking=False)
    try:
        th, box = in_thread(w.wait_until_ready)
        r.wait_until_ready()
        th.join(timeout=30)
        assert not th.is_alive() and "error" not in box, box
        w.enqueue({"step": 1})
        assert r.dequeue(timeout=10) == {"step": 1}
    finally:
        r.shutdown()
        w.shutdown()


def test_a_group_queue_built_without_writer_rank_is_written_by_vllms_default_rank(one_node):
    """A drop-in keeps vLLM's defaults: without writer_rank the group's rank 0 (vLLM's default)
    builds the queue as its writer and broadcasts the handle from itself."""
    default = inspect.signature(VllmMessageQueue.create_from_process_group).parameters[
        "writer_rank"].default
    group = _Group(default, 2)
    w = MQ.create_from_process_group(group, 1 << 20, 4, blocking=False)
    try:
        assert w._is_writer
        assert group.sent == [(w.export_handle(), default)]
    finally:
        w.shutdown()


def test_with_an_external_writer_handle_the_writer_rank_reads_that_queue_and_passes_it_on(
        one_node):
    """external_writer_handle: the queue was built elsewhere; the group's writer rank does not
    build one but reads the external queue at its own seat and broadcasts its handle."""
    external = MQ(2, 2, local_reader_ranks=[0, 1], connect_ip="127.0.0.1",
                  max_chunk_bytes=1 << 20, max_chunks=4)
    group = _Group(0, 2)
    mine = MQ.create_from_process_group(group, 1 << 20, 4, writer_rank=0,
                                        external_writer_handle=external.export_handle(),
                                        blocking=False)
    other = MQ.create_from_handle(external.export_handle(), 1)
    try:
        assert group.sent == [(external.export_handle(), 0)]
        assert not mine._is_writer and mine.local_reader_rank == 0
        th, box = in_thread(external.wait_until_ready)
        mine.wait_until_ready()
        other.wait_until_ready()
        th.join(timeout=30)
        assert not th.is_alive() and "error" not in box, box
        external.enqueue("to both")
        assert (mine.dequeue(timeout=10), other.dequeue(timeout=10)) == ("to both", "to both")
    finally:
        for mq in (other, mine, external):
            mq.shutdown()


def assert_ready_by_itself(w, readers):
    """The one reader attached while `w` was created (in a thread waiting in wait_until_ready)
    is ready without another call on the writer, and gets what it sends; then both shut down."""
    (r, th, box), = readers
    try:
        th.join(timeout=30)
        assert not th.is_alive() and "error" not in box, box
        w.enqueue("ready")
        assert r.dequeue(timeout=10) == "ready"
    finally:
        r.shutdown()
        w.shutdown()


def test_a_blocking_group_queue_is_ready_when_it_is_returned(one_node):
    """create_from_process_group(blocking=True), on the writer's rank: the queue it returns has
    waited for its reader, whose wait_until_ready therefore ends without another call on the
    writer.  The reader rank attaches as the handle is broadcast."""
    readers = []

    class Broadcast(_Group):
        def broadcast_obj(self, obj, src):
            r = MQ.create_from_handle(obj, 1)  # the reader rank's side of the handshake
            readers.append((r, *in_thread(r.wait_until_ready)))
            return super().broadcast_obj(obj, src)

    w = MQ.create_from_process_group(Broadcast(0, 2), 1 << 20, 4, writer_rank=0)
    assert_ready_by_itself(w, readers)


def test_a_blocking_single_reader_queue_is_ready_when_it_is_returned(monkeypatch):
    """create_from_process_group_single_reader(blocking=True), on a writer rank: the queue it
    returns has waited for its reader, whose wait_until_ready therefore ends without another
    call on the writer.  The group is this process: rank 1 of 2, rank 0 (the reader) attached
    by the gather."""
    import vllm.platforms.interface as platform_interface

    monkeypatch.setattr(platform_interface, "get_assigned_physical_gpu_ids", lambda: [0, 1])
    monkeypatch.setattr(rq.dist, "get_rank", lambda group=None: 1)
    monkeypatch.setattr(rq.dist, "get_world_size", lambda group=None: 2)
    readers = []

    def gather_object(obj, object_gather_list=None, dst=0, group=None):
        r = MQ.create_from_handle(obj, 0)  # the reader rank's side of the handshake
        readers.append((r, *in_thread(r.wait_until_ready)))

    monkeypatch.setattr(rq.dist, "gather_object", gather_object)
    w, handles = MQ.create_from_process_group_single_reader(None, 1 << 20, 4, reader_rank=0,
                                                            blocking=True)
    assert handles == []  # gathered on the reader's rank only
    assert_ready_by_itself(w, readers)


# ------------------------------------------------------------------- closing
class _Endpoint:
    def __init__(self, fails):
        self.fails, self.closed = fails, False

    def close(self):
        if self.fails:
            raise OSError("cannot close")
        self.closed = True


def test_the_finalizer_closes_the_other_endpoints_when_one_refuses(caplog):
    """A queue's finalizer runs at garbage collection, where an exception is only printed: one
    endpoint that fails to close leaves the next ones closed, nothing is raised, and the
    failure is in the debug log."""
    bad, good = _Endpoint(fails=True), _Endpoint(fails=False)
    with caplog.at_level(logging.DEBUG, logger="vllm.rdmaq"):
        rq._close_endpoints(os.getpid(), [bad, good])
    assert good.closed and not bad.closed
    assert "failed: cannot close" in caplog.text


def _exit_without_shutdown(out):
    _held[:] = _pair()  # held until the process ends, as a vLLM worker holds its queues
    _held[0].enqueue("one")
    out.put(_held[1].dequeue(timeout=10))
    # returns: multiprocessing's child leaves through os._exit(), past atexit


def test_a_multiprocessing_child_leaving_without_shutdown_writes_its_final_stats(
        monkeypatch, tmp_path):
    """vLLM's workers are multiprocessing children that may exit without shutting their
    queues down: their last numbers are still written, marked final."""
    monkeypatch.setenv("RDMAQ_VLLM_STATS_DIR", str(tmp_path))
    monkeypatch.setenv("RDMAQ_VLLM_STATS_INTERVAL", "3600")  # the child's rewriter: the final record only
    out = FORK.Queue()
    p = FORK.Process(target=_exit_without_shutdown, args=(out,))
    p.start()
    assert out.get(timeout=60) == "one"
    p.join(timeout=60)
    assert p.exitcode == 0
    records = [json.loads(f.read_text()) for f in tmp_path.glob(f"rdmaq-stats-{p.pid}-*.json")]
    assert sorted((r["role"], r["messages"], r["final"]) for r in records) == [
        ("local reader", 1, True), ("writer", 1, True)]


def _shut_inherited_down(stats_dir, out):
    for mq in _held:
        mq.shutdown()
    mine = [f.name for f in stats_dir.glob("*.json") if json.loads(f.read_text())["pid"] == os.getpid()]
    out.put(mine)


def test_a_forked_child_shutting_an_inherited_queue_down_writes_no_stats_and_leaves_it_open(
        monkeypatch, tmp_path):
    """vLLM forks processes that inherit the parent's queues: the child's shutdown() of them
    records nothing (the traffic was the parent's) and the parent's queue keeps working."""
    monkeypatch.setenv("RDMAQ_VLLM_STATS_DIR", str(tmp_path))
    _held[:] = _pair()
    try:
        out = FORK.Queue()
        p = FORK.Process(target=_shut_inherited_down, args=(tmp_path, out))
        p.start()
        assert out.get(timeout=60) == []  # the child's records, read in the child
        p.join(timeout=60)
        assert p.exitcode == 0
        _held[0].enqueue("still open")
        assert _held[1].dequeue(timeout=10) == "still open"
    finally:
        for mq in reversed(_held):
            mq.shutdown()
        _held.clear()


def test_stats_name_the_process_by_its_title_when_setproctitle_is_there(monkeypatch):
    """vLLM names its processes with setproctitle (VLLM::Worker_TP0...): the stats record
    that title, which says more than the command line."""
    import sys
    import types

    from rdmaq.vllm import _stats

    fake = types.ModuleType("setproctitle")
    fake.getproctitle = lambda: "VLLM::Worker_TP1"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "setproctitle", fake)
    assert _stats._process_title() == "VLLM::Worker_TP1"


# ------------------------------------------------------- spin_until_readable
def test_spin_until_readable_past_its_deadline_looks_without_waiting():
    """A deadline already passed: one look at the ring that does not block (timeout 0), not
    a wait of READABLE_WAIT_S beyond the caller's deadline."""
    w, r = _pair()
    try:
        asked = []
        take = r._take
        r._take = lambda timeout: asked.append(timeout) or take(timeout)
        r.spin_until_readable([], time.monotonic() - 1.0)
        assert asked == [0.0]
    finally:
        r.shutdown()
        w.shutdown()


# ---------------------------------------------------------------------- seat
def test_a_seat_is_an_immutable_value():
    """Where a rank reads is a value: equal seats hash alike (usable as keys) and a seat
    cannot be changed after placement."""
    s = seat(1, [0, 1], None, has_zmq=False)
    assert {s: "x"}[Seat("local", 1)] == "x"
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.index = 0  # type: ignore[misc]


# ----------------------------------------------------------------------- fork
def _drop_inherited(out):
    import gc
    import weakref

    refs = [weakref.ref(mq) for mq in _held]
    _held.clear()
    gc.collect()
    out.put("dropped" if all(ref() is None for ref in refs) else "still referenced")


def test_a_forked_child_dropping_inherited_queues_leaves_the_parents_open():
    """A forked child inherits the parent's queues (vLLM forks its workers); when the child
    drops them, their finalizers run there and must leave the parent's ring working."""
    _held[:] = _pair()
    try:
        out = FORK.Queue()
        p = FORK.Process(target=_drop_inherited, args=(out,))
        p.start()
        assert out.get(timeout=60) == "dropped"
        p.join(timeout=60)
        assert p.exitcode == 0
        assert not _held[0]._writer._closed and not _held[1]._reader._closed
        _held[0].enqueue({"after": "fork"})
        assert _held[1].dequeue(timeout=10) == {"after": "fork"}
    finally:
        for mq in reversed(_held):
            mq.shutdown()
        _held.clear()


# ------------------------------------------------------------------ more edges
def test_a_one_byte_chunk_has_a_ring():
    """max_chunk_bytes of 1 is positive: the smallest slot, not a ValueError."""
    slot, slots = _geometry.ring_geometry(1, 1)
    assert slot > 0 and slots >= 1


def test_the_writers_log_line_gives_the_rings_slots_and_slot_bytes(caplog):
    """With local readers the writer logs its ring's geometry, not 0 x 0."""
    with caplog.at_level(logging.INFO, logger="vllm.rdmaq"):
        w, r = _pair()
    try:
        slot, slots = _geometry.ring_geometry(1 << 20, 4)
        assert f"{slots} x {slot} B" in caplog.text
    finally:
        r.shutdown()
        w.shutdown()


def test_readable_on_a_closed_reader_endpoint_says_cancelled():
    """The ring reader closed under the queue: readable() raises vLLM's "cancelled",
    as dequeue does."""
    w, r = _pair()
    try:
        r._reader.close()
        with pytest.raises(RuntimeError, match="cancelled"):
            r.readable()
    finally:
        r.shutdown()
        w.shutdown()


def _timing_out_get(clock, step, times):
    """A get that lets ``step`` seconds pass and times out ``times`` times, then returns."""
    calls = []

    def get(timeout=None):
        calls.append(timeout)
        if len(calls) > times:
            return "message"
        clock.now += step
        raise TimeoutError
    return get


def test_a_long_wait_warns_once_per_interval_that_passed(monkeypatch):
    """Waits of 6 s against a 10 s warning interval, 30 s in all: three warnings (at 10,
    20 and 30 s passed), no more."""
    clock = _Clock()
    monkeypatch.setattr(rq, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    monkeypatch.setattr(rq._sb, "VLLM_RINGBUFFER_WARNING_INTERVAL", 10)
    warned = []
    monkeypatch.setattr(rq._sb, "logger", types.SimpleNamespace(info=lambda *a: warned.append(a)))
    me = types.SimpleNamespace(shutting_down=False)
    assert MQ._wait(me, _timing_out_get(clock, 6, 5), None, False) == "message"
    assert len(warned) == 3


def test_a_long_wait_waits_in_slices_of_one_warning_interval(monkeypatch):
    """Without a deadline, each slice of the wait lasts until the next warning is due: one
    interval each (10 s), not slices that shrink to nothing once the first has passed."""
    clock = _Clock()
    monkeypatch.setattr(rq, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    monkeypatch.setattr(rq._sb, "VLLM_RINGBUFFER_WARNING_INTERVAL", 10)
    warned = []
    monkeypatch.setattr(rq._sb, "logger", types.SimpleNamespace(info=lambda *a: warned.append(a)))
    slices = []

    def get(timeout=None):
        slices.append(timeout)
        if len(slices) > 3:
            return "message"
        clock.now += timeout  # a slice that times out has lasted its timeout
        raise TimeoutError

    me = types.SimpleNamespace(shutting_down=False)
    assert MQ._wait(me, get, None, False) == "message"
    assert slices == [10, 10, 10, 10] and len(warned) == 3


def test_a_slice_that_overran_the_next_warning_is_followed_by_a_look_not_a_negative_wait(
        monkeypatch):
    """A slice that lasted past the next warning too (a loaded machine: 25 s against a 10 s
    interval) leaves nothing of the next slice: that one is a look (timeout 0), never a
    negative timeout (which the ring's reader refuses), and the one after lasts to the warning
    after it."""
    clock = _Clock()
    monkeypatch.setattr(rq, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    monkeypatch.setattr(rq._sb, "VLLM_RINGBUFFER_WARNING_INTERVAL", 10)
    monkeypatch.setattr(rq._sb, "logger", types.SimpleNamespace(info=lambda *a: None))
    slices = []

    def get(timeout=None):
        slices.append(timeout)
        if len(slices) > 2:
            return "message"
        clock.now += 25 if len(slices) == 1 else timeout
        raise TimeoutError

    me = types.SimpleNamespace(shutting_down=False)
    assert MQ._wait(me, get, None, False) == "message"
    assert slices == [10, 0, 5]


def test_a_wait_for_ever_goes_on_after_a_timed_out_slice(monkeypatch):
    """No deadline (timeout None), indefinite: a slice that times out is waited again."""
    clock = _Clock()
    monkeypatch.setattr(rq, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    me = types.SimpleNamespace(shutting_down=False)
    assert MQ._wait(me, _timing_out_get(clock, 6, 2), None, True) == "message"


def test_a_wait_whose_slice_times_out_as_the_queue_shuts_down_is_cancelled():
    """A shutdown() from another thread that lands as a wait's slice times out: vLLM's
    RuntimeError("cancelled"), not the TimeoutError of a deadline also reached."""
    me = types.SimpleNamespace(shutting_down=False)

    def get(timeout=None):
        me.shutting_down = True  # shutdown() came during this slice
        raise TimeoutError

    with pytest.raises(RuntimeError, match="^cancelled$"):
        MQ._wait(me, get, 0, False)


def test_closing_a_remote_endpoints_sockets_ends_its_zmq_context():
    """_close_zmq closes the sockets and then terminates the context they belong to."""
    import zmq

    from rdmaq.vllm import _remote
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PAIR)
    _remote._close_zmq(os.getpid(), ctx, [sock])
    assert sock.closed and ctx.closed


def test_a_closed_remote_reader_says_so_and_a_second_close_sends_no_second_wake_up():
    """close() marks the reader closed, so recv() raises ClosedError without polling; it wakes
    a blocked recv() once: closing again (shutdown() and then the finalizer) sends nothing."""
    import rdmaq
    from rdmaq.vllm import _remote
    r = _remote.RemoteReader("tcp://127.0.0.1:1", False)
    r.close()
    r.close()
    assert r.closed
    with pytest.raises(rdmaq.ClosedError, match="remote reader closed"):
        r.recv(0)
    wake_ups = 0
    while r._cancel_r.poll(1000 if wake_ups == 0 else 0):
        r._cancel_r.recv()
        wake_ups += 1
    assert wake_ups == 1


def test_a_remote_reader_left_open_is_not_closed_at_interpreter_exit():
    """Its finalizer is not an atexit hook: at exit (where vLLM's own atexit handlers may
    still use the queue) nothing closes its sockets behind the owner's back."""
    code = ("import os\n"
            "from rdmaq.vllm import _remote\n"
            "_remote._close_zmq = lambda *a: os.write(1, b'closed at exit')\n"
            "keep = _remote.RemoteReader('tcp://127.0.0.1:1', False)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "closed at exit" not in out.stdout


# ---------------------------------------------------------- shutdown cancels
@pytest.mark.parametrize("n_local", [1, 0], ids=["ring reader", "zmq reader"])
def test_after_shutdown_a_message_readable_took_is_cancelled_like_every_read(n_local):
    """readable() keeps the message it took for the next dequeue(); once the reader is shut
    down, readable(), dequeue() and spin_until_readable() all raise vLLM's "cancelled",
    that kept message is not handed out."""
    w, r = _pair(n_local)
    try:
        w.enqueue("taken")
        r.spin_until_readable([], time.monotonic() + 60)
        assert r.readable()
        r.shutdown()
        for call in (r.readable, lambda: r.dequeue(timeout=0),
                     lambda: r.spin_until_readable([], time.monotonic() + 60)):
            with pytest.raises(RuntimeError, match="^cancelled$"):
                call()
    finally:
        r.shutdown()
        w.shutdown()


@pytest.mark.parametrize("n_local", [1, 0], ids=["ring reader", "zmq reader"])
def test_shutdown_from_another_thread_ends_spin_until_readable_with_cancelled(n_local):
    """EngineCore's poll of a response queue: a spin_until_readable() with a far deadline
    and nothing pending ends when the queue is shut down, with "cancelled"."""
    w, r = _pair(n_local)
    try:
        th, box = in_thread(lambda: r.spin_until_readable([], time.monotonic() + 3600))
        r.shutdown()
        th.join(timeout=30)
        assert not th.is_alive()
        assert isinstance(box.get("error"), RuntimeError) and str(box["error"]) == "cancelled", box
    finally:
        w.shutdown()


def test_one_enqueue_blocked_on_a_full_ring_ends_cancelled_at_shutdown_and_sends_nothing():
    """An enqueue waiting for ring space when shutdown() comes from another thread raises
    "cancelled" itself (not only the enqueue after it) and is not counted as sent."""
    w, r = _pair(max_chunk_bytes=4096, max_chunks=2)
    try:
        sent = 0
        with pytest.raises(TimeoutError):
            while True:
                w.enqueue(sent, timeout=0)
                sent += 1
        th, box = blocked_call(w._writer, lambda: w.enqueue("blocked"), "an enqueue on a full ring")
        w.shutdown()
        th.join(timeout=30)
        assert not th.is_alive()
        assert isinstance(box.get("error"), RuntimeError) and str(box["error"]) == "cancelled", box
        assert w.rdmaq_stats()["messages"] == sent
    finally:
        r.shutdown()
        w.shutdown()


def test_enqueue_on_a_closed_ring_writer_says_cancelled():
    """The ring writer closed under the queue: enqueue() raises vLLM's "cancelled", as
    readable() and dequeue() do on a closed reader."""
    w, r = _pair()
    try:
        w._writer.close()
        with pytest.raises(RuntimeError, match="^cancelled$"):
            w.enqueue("late")
        assert w.rdmaq_stats()["messages"] == 0
    finally:
        r.shutdown()
        w.shutdown()


# ------------------------------------------------------ out-of-band ownership
def test_out_of_band_buffers_of_a_message_read_in_the_readers_scratch_are_the_callers_own(
        monkeypatch):
    """Short messages are read into a scratch buffer the reader reuses.  With an out-of-band
    threshold below the scratch size, such a message carries out-of-band buffers: the arrays
    built on them are the caller's, and a later message does not overwrite them."""
    monkeypatch.setattr(rq, "OOB_MIN_BYTES", 4096)
    w, r = _pair()
    try:
        w.enqueue(np.full(8192, 1, dtype=np.uint8))
        first = r.dequeue(timeout=10)
        w.enqueue(np.full(8192, 2, dtype=np.uint8))
        second = r.dequeue(timeout=10)
        np.testing.assert_array_equal(first, 1)
        np.testing.assert_array_equal(second, 2)
        assert first.flags.writeable
    finally:
        r.shutdown()
        w.shutdown()


# ------------------------------------------------- spin_until_readable slices
def test_spin_until_readable_waits_in_slices_of_readable_wait_s_looking_at_pending_between(
        monkeypatch):
    """Each wait is at most READABLE_WAIT_S, the last one what is left to the deadline, and
    the caller's input queue is looked at before each: 2.5 ms in all (each look costing
    1 us) are waits of 1, 1 and 0.498 ms, then one look without waiting past the deadline."""
    clock = _Clock()
    monkeypatch.setattr(rq, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    asked = []

    def take(timeout):
        asked.append(timeout)
        assert len(asked) < 10, "spin_until_readable did not stop at its deadline"
        clock.now += timeout + 1e-6
        return False

    me = types.SimpleNamespace(_rdmaq=True, _take=take)
    MQ.spin_until_readable(me, [], 0.0025)
    assert asked == pytest.approx([rq.READABLE_WAIT_S, rq.READABLE_WAIT_S, 0.000498, 0.0])

    class Pending:  # the caller's input queue: a request arrives after two slices
        def __len__(self):
            return int(len(asked) >= 2)

    asked.clear()
    MQ.spin_until_readable(me, Pending(), clock.now + 3600.0)
    assert asked == [rq.READABLE_WAIT_S, rq.READABLE_WAIT_S]


# ------------------------------------------------ single-reader process groups
@pytest.mark.parametrize("per_node, rank, reader_rank, local", [
    ("assigned", 1, 0, True),
    ("assigned", 0, 0, True),  # the reader's rank writes a queue too (to itself)
    ("assigned", 2, 0, False),
    ("assigned", 2, 3, True),
    ("platform", 3, 0, True),
    ("platform", 4, 0, False),
    ("assigned", 0, None, True),  # reader_rank left out: vLLM's default, rank 0
])
def test_single_reader_queues_are_read_on_the_ring_on_the_readers_node_and_over_zmq_off_it(
        monkeypatch, per_node, rank, reader_rank, local):
    """create_from_process_group_single_reader: each rank writes a queue of one reader; that
    reader reads the ring when its rank is on the writer's node (GPUs per node: the assigned
    GPUs, 2 here, or else the platform's device count, 4 here) and vLLM's ZMQ path
    otherwise.  The ring has the geometry asked for, and the handles are gathered on the
    reader's rank, into a list of the group's size, from every rank; the queue is returned
    without waiting for its reader (blocking is False unless asked)."""
    import vllm.platforms
    import vllm.platforms.interface as platform_interface

    monkeypatch.setattr(platform_interface, "get_assigned_physical_gpu_ids",
                        lambda: [4, 5] if per_node == "assigned" else None)
    monkeypatch.setattr(vllm.platforms, "_current_platform",
                        types.SimpleNamespace(device_count=lambda: 4))
    monkeypatch.setattr(rq.dist, "get_rank", lambda group=None: rank)
    pg = object()
    monkeypatch.setattr(rq.dist, "get_world_size", lambda group=None: 6 if group is pg else -1)
    gathers = []

    def gather_object(obj, object_gather_list=None, dst=0, group=None):
        gathers.append((dst, group, None if object_gather_list is None else len(object_gather_list)))
        if object_gather_list is not None:
            object_gather_list[:] = [obj] * len(object_gather_list)

    monkeypatch.setattr(rq.dist, "gather_object", gather_object)
    chosen = {} if reader_rank is None else {"reader_rank": reader_rank}
    reader_rank = 0 if reader_rank is None else reader_rank
    w, handles = MQ.create_from_process_group_single_reader(pg, 1 << 16, 3, **chosen)
    r = MQ.create_from_handle(w.export_handle(), 0)
    try:
        assert gathers == [(reader_rank, pg, 6 if rank == reader_rank else None)]
        assert handles == ([w.export_handle()] * 6 if rank == reader_rank else [])
        assert (w.n_local_reader, w.n_remote_reader) == ((1, 0) if local else (0, 1))
        assert (r._is_local_reader, r._is_remote_reader) == (local, not local)
        st = w.rdmaq_stats()
        ring = _geometry.ring_geometry(1 << 16, 3) if local else (None, None)
        assert (st["slot_bytes"], st["slots"], st["remote"]) == (*ring, None if local else "zmq")
        th, box = in_thread(w.wait_until_ready)
        r.wait_until_ready()
        th.join(timeout=30)
        assert not th.is_alive() and "error" not in box, box
        w.enqueue(("from", rank))
        assert r.dequeue(timeout=10) == ("from", rank)
    finally:
        r.shutdown()
        w.shutdown()


# ------------------------------------------------------------- remote readers
def test_a_zmq_reader_and_its_writer_count_each_message_and_its_bytes():
    """Over vLLM's ZMQ path the writer counts what it pickled (stream and out-of-band
    buffers) and the remote reader the frames it got: the same bytes, message for message."""
    objs = ["abc", np.arange((1 << 20) // 8, dtype=np.int64)]
    pickled = [rq._serializer().pickle(o) for o in objs]
    assert pickled[-1].buffers
    w, r = _pair(n_local=0)
    try:
        for o in objs:
            w.enqueue(o)
            np.testing.assert_array_equal(r.dequeue(timeout=10), o)
        nbytes = sum(p.stream_bytes + sum(b.nbytes for b in p.buffers) for p in pickled)
        ws, rs = w.rdmaq_stats(), r.rdmaq_stats()
        assert (ws["messages"], ws["bytes"], rs["messages"], rs["bytes"]) == (2, nbytes, 2, nbytes)
    finally:
        r.shutdown()
        w.shutdown()


@pytest.mark.parametrize("remote", ["zmq", "ring"])
def test_a_remote_reader_has_vllms_remote_role_attributes(monkeypatch, remote):
    """A reader on another node has vLLM's remote-reader attributes (not local, no local
    rank: -1), also when it reads a slot of the ring."""
    monkeypatch.setenv("RDMAQ_VLLM_REMOTE", remote)
    w = MQ(1, 0, connect_ip="127.0.0.1", remote_reader_ranks=[5])
    r = MQ.create_from_handle(w.export_handle(), 5)
    try:
        assert (r._reader is not None) == (remote == "ring")
        assert (r._is_writer, r._is_local_reader, r._is_remote_reader, r.local_reader_rank) == (
            False, False, True, -1)
        assert (r.n_local_reader, r.n_remote_reader) == (0, 1)
    finally:
        r.shutdown()
        w.shutdown()


def test_a_queue_left_open_is_not_closed_at_interpreter_exit():
    """As for a remote reader's sockets: a queue's finalizer is not an atexit hook, so at exit
    (where vLLM's own atexit handlers may still use the queue) its endpoints stay open."""
    code = ("import os\n"
            "from rdmaq.vllm import queue as rq\n"
            "rq._close_endpoints = lambda *a: os.write(1, b'closed at exit')\n"
            "keep = rq.RdmaqMessageQueue(1, 1, max_chunk_bytes=1 << 20, max_chunks=4)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "closed at exit" not in out.stdout


def test_a_writer_of_local_readers_alone_exports_vllms_handle_for_that(caplog):
    """No remote readers: the handle has no subscribe address and, as vLLM's, is not IPv6;
    and without enable_shm_tensor_arena nothing is said about the arena."""
    with caplog.at_level(logging.INFO, logger="vllm.rdmaq"):
        w = MQ(2, 2, max_chunk_bytes=1 << 20, max_chunks=4)
    try:
        h = w.export_handle()
        assert (h.remote_subscribe_addr, h.remote_addr_ipv6, h.local_reader_ranks) == (None, False, [0, 1])
        assert (h.ring_remote_ranks, h.n_remote_reader, h.ring.n_readers) == (None, 0, 2)
        assert "rdmaq MessageQueue writer: 2 readers (2 local)" in caplog.text
        assert "enable_shm_tensor_arena" not in caplog.text
    finally:
        w.shutdown()


def test_a_dequeue_timeout_of_zero_or_less_looks_without_sleeping():
    """vLLM reads a negative timeout as 0: a look at the ring that does not sleep (the ring
    reader's sleep count stays), then TimeoutError."""
    w, r = _pair()
    try:
        before = r._reader.stats["sleeps"]
        for timeout in (-1, 0, -0.5):
            with pytest.raises(TimeoutError):
                r.dequeue(timeout=timeout)
        assert r._reader.stats["sleeps"] == before
    finally:
        r.shutdown()
        w.shutdown()


def test_a_remote_reader_s_negative_timeout_looks_once_and_times_out():
    """Over ZMQ too, a negative timeout is a look (zmq reads a negative poll timeout as
    "for ever"): the dequeue and the ZMQ reader's own recv raise TimeoutError at once."""
    w, r = _pair(0)
    try:
        for call in (r.dequeue, r._remote.recv):
            for timeout in (-1, -0.5):
                t, box = in_thread(lambda c=call, t=timeout: c(timeout=t))
                t.join(timeout=30)
                assert not t.is_alive(), f"{call.__name__}(timeout={timeout}) did not return"
                assert type(box.get("error")) is TimeoutError, box
    finally:
        r.shutdown()
        w.shutdown()


def test_a_reader_says_at_debug_level_where_it_attached(caplog):
    """Each reader's attach is in the debug log: its role and its rank."""
    with caplog.at_level(logging.DEBUG, logger="vllm.rdmaq"):
        w, r = _pair()
    try:
        assert "rdmaq MessageQueue local reader attached (rank 0)" in caplog.text
    finally:
        r.shutdown()
        w.shutdown()


# ------------------------------------------------------------- blank settings
@pytest.mark.parametrize("blank", ["", " ", "\t"], ids=repr)
def test_blank_placement_and_ring_variables_are_unset(monkeypatch, blank):
    """A blank RDMAQ_VLLM_REMOTE, RDMAQ_VLLM_TRANSPORT or RDMAQ_VLLM_RING_BYTES is unset, as
    for every RDMAQ_* variable (rdmaq/settings.py): the queue is built with the defaults."""
    for var in ("RDMAQ_VLLM_REMOTE", "RDMAQ_VLLM_TRANSPORT", "RDMAQ_VLLM_RING_BYTES"):
        monkeypatch.setenv(var, blank)
    w, r = _pair()
    try:
        w.enqueue("x")
        assert r.dequeue(timeout=10) == "x"
    finally:
        r.shutdown()
        w.shutdown()
