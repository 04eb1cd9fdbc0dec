"""Reader placement of the vLLM adapter (rdmaq/vllm/placement.py): which readers read
the ring, in which slot, and which read vLLM's ZMQ path.  Pure: no vLLM, no queue."""

from __future__ import annotations

import itertools

import pytest

from rdmaq.vllm.placement import ANY_RANK, Placement, place, seat


def _never() -> bool:
    raise AssertionError("the RDMA probe ran although nothing depends on it")


def _place(n_reader, n_local, local=None, remote=None, *, mode="auto", transport="auto",
           rdma=False) -> Placement:
    return place(n_reader, n_local, local, remote, remote_mode=mode, transport=transport,
                 rdma_active=(lambda: rdma) if rdma is not None else _never)


def test_local_readers_only_read_the_ring_and_never_probe_the_device():
    p = _place(3, 3, rdma=None, mode="bogus")  # the mode matters only with remote readers
    assert p == Placement([0, 1, 2], None, 0, "auto")
    assert p.n_ring == 3
    assert _place(2, 2, local=[5, 7], rdma=None).local_reader_ranks == [5, 7]


@pytest.mark.parametrize("mode, rdma", [("ring", False), ("ring", True), ("auto", True)])
def test_remote_readers_with_known_ranks_join_the_ring(mode, rdma):
    p = _place(3, 1, local=[0], remote=[4, 2], mode=mode, rdma=rdma)
    assert p.ring_remote_ranks == [4, 2] and p.n_ring == 3 and p.n_zmq == 0
    # auto transport: verbs when RDMA is there (the remote readers need it)
    assert p.transport == ("verbs" if rdma else "auto")


def test_a_chosen_transport_is_kept():
    assert _place(2, 1, remote=[1], rdma=True, transport="shm").transport == "shm"


def test_the_single_remote_reader_joins_the_ring_whatever_its_rank():
    p = _place(2, 1, mode="ring")
    assert p.ring_remote_ranks == [ANY_RANK] and p.n_ring == 2 and p.n_zmq == 0


def test_anonymous_remote_readers_use_zmq_and_say_why():
    p = _place(4, 1, mode="ring")
    assert p.ring_remote_ranks is None and p.n_ring == 1 and p.n_zmq == 3
    assert p.note == "3 remote readers without known ranks use ZMQ TCP"


@pytest.mark.parametrize("mode, rdma", [("zmq", None), ("auto", False)])
def test_remote_readers_use_zmq_without_rdma_or_when_told(mode, rdma):
    p = _place(3, 1, remote=[1, 2], mode=mode, rdma=rdma)
    assert p.ring_remote_ranks is None and p.n_ring == 1 and p.n_zmq == 2
    assert p.transport == "auto" and p.note is None


@pytest.mark.parametrize("args, match", [
    ((2, 1, [0, 1], None), "local_reader_ranks has 2 entries, n_local_reader is 1"),
    ((1, 2, None, None), "need 0 <= n_local_reader <= n_reader, got 2, 1"),
    ((2, -1, None, None), "need 0 <= n_local_reader <= n_reader, got -1, 2"),
    ((3, 1, None, [1]), "remote_reader_ranks has 1 entries, n_reader - n_local_reader is 2"),
])
def test_arguments_that_do_not_fit_are_named(args, match):
    with pytest.raises(ValueError, match=match):
        _place(*args)


def test_a_bad_remote_mode_is_named():
    with pytest.raises(ValueError, match="RDMAQ_VLLM_REMOTE must be auto, ring or zmq, not 'tcp'"):
        _place(2, 1, mode="tcp", rdma=None)


def test_seats():
    assert seat(7, [3, 7], None, has_zmq=False) == seat(7, [3, 7], [1], has_zmq=False)
    local = seat(7, [3, 7], None, has_zmq=False)
    assert (local.kind, local.index, local.role) == ("local", 1, "local reader")
    ring = seat(9, [3, 7], [4, 9], has_zmq=False)
    assert (ring.kind, ring.index, ring.role) == ("ring", 3, "remote reader (ring)")
    assert seat(-1, [3, 7], [ANY_RANK], has_zmq=False).index == 2
    assert seat(12, [0], [ANY_RANK], has_zmq=False).index == 1
    zmq = seat(-1, [0], None, has_zmq=True)
    assert (zmq.kind, zmq.index, zmq.role) == ("zmq", None, "remote reader (zmq)")


def test_a_rank_without_a_seat_is_an_error():
    with pytest.raises(ValueError, match=r"rank 5 is neither a local reader \(\[0\]\) nor a "
                                         r"remote ring reader \(\[1, 2\]\)"):
        seat(5, [0], [1, 2], has_zmq=False)
    with pytest.raises(ValueError, match=r"rank 5 is not a local reader \(\[0\]\) and the queue "
                                         "has no remote readers"):
        seat(5, [0], None, has_zmq=False)


def test_a_remote_ring_reader_of_rank_0_is_that_rank_alone():
    """Rank 0 may read remotely (another rank writes): a ring whose one remote reader is rank 0
    seats rank 0 after the local readers and refuses any other rank."""
    p = _place(2, 1, local=[1], remote=[0], mode="ring")
    assert p.ring_remote_ranks == [0]
    mine = seat(0, p.local_reader_ranks, p.ring_remote_ranks, has_zmq=False)
    assert (mine.kind, mine.index) == ("ring", 1)
    with pytest.raises(ValueError, match=r"rank 3 is neither a local reader \(\[1\]\) nor a "
                                         r"remote ring reader \(\[0\]\)"):
        seat(3, p.local_reader_ranks, p.ring_remote_ranks, has_zmq=False)


def _queues():
    """Every small queue: local and remote reader counts, remote ranks known or not."""
    for n_local, n_remote in itertools.product(range(4), range(4)):
        if n_local + n_remote == 0:
            continue
        ranks = list(range(1, n_local + n_remote + 1))[::-1]  # rank 0 writes
        for known in (False, True):
            yield n_local, ranks[:n_local], ranks[n_local:], known


@pytest.mark.parametrize("mode", ["auto", "ring", "zmq"])
@pytest.mark.parametrize("rdma", [False, True])
def test_every_reader_has_one_seat_and_the_ring_slots_are_distinct(mode, rdma):
    for n_local, local, remote, known in _queues():
        p = _place(n_local + len(remote), n_local, local, remote if known else None, mode=mode,
                   rdma=rdma)
        assert p.n_ring + p.n_zmq == n_local + len(remote)
        seats = [seat(r, p.local_reader_ranks, p.ring_remote_ranks, has_zmq=p.n_zmq > 0)
                 for r in local + remote]
        ring = [s.index for s in seats if s.index is not None]
        assert sorted(ring) == list(range(p.n_ring)), (n_local, remote, known, p)
        assert sum(s.kind == "zmq" for s in seats) == p.n_zmq
