"""Where each reader of a vLLM queue reads: the rdmaq ring, or vLLM's ZMQ path.

Local readers (the writer's host) always read the ring, in slots
``0..n_local-1``.  Remote readers (other hosts) join the same ring over RDMA,
in slots ``n_local + i``, when the mode allows it and a reader can tell which
slot is its own: its rank is known (``remote_reader_ranks``), or it is the
only remote reader.  Otherwise every remote reader reads vLLM's ZMQ XPUB
socket.  The ring of a queue with remote readers uses verbs when an RDMA port
is active.

Pure: the caller reads the environment and the device probe is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

REMOTE_MODES = ("auto", "ring", "zmq")
ANY_RANK = -1  # ring_remote_ranks == [ANY_RANK]: the single remote reader, whatever its rank


@dataclass(frozen=True)
class Placement:
    """The writer's side: who reads the ring, who reads ZMQ, over what."""

    local_reader_ranks: list[int]
    # Remote readers in the ring, in slot order after the local ones; None: none.
    ring_remote_ranks: list[int] | None
    n_zmq: int  # remote readers served over ZMQ
    transport: str  # the ring's rdmaq transport
    note: str | None = None  # why remote readers that could read the ring do not

    @property
    def n_ring(self) -> int:
        return len(self.local_reader_ranks) + len(self.ring_remote_ranks or ())


def place(n_reader: int, n_local_reader: int, local_reader_ranks: Sequence[int] | None,
          remote_reader_ranks: Sequence[int] | None, *, remote_mode: str,
          transport: str, rdma_active: Callable[[], bool]) -> Placement:
    """Place a queue's readers; ValueError names an argument that does not fit.

    ``remote_mode`` (checked when there are remote readers): auto (the ring over RDMA when ``rdma_active()``, else ZMQ),
    ring or zmq.  ``transport``: the ring's, auto/shm/verbs (auto becomes verbs
    when remote readers join the ring and ``rdma_active()``).  ``rdma_active``
    is called only when remote readers make it matter.
    """
    if local_reader_ranks is None:
        local_reader_ranks = range(n_local_reader)
    elif len(local_reader_ranks) != n_local_reader:
        raise ValueError(f"local_reader_ranks has {len(local_reader_ranks)} entries, "
                         f"n_local_reader is {n_local_reader}")
    if not 0 <= n_local_reader <= n_reader:
        raise ValueError(f"need 0 <= n_local_reader <= n_reader, got {n_local_reader}, {n_reader}")
    n_remote = n_reader - n_local_reader
    if remote_reader_ranks is not None and len(remote_reader_ranks) != n_remote:
        raise ValueError(f"remote_reader_ranks has {len(remote_reader_ranks)} entries, "
                         f"n_reader - n_local_reader is {n_remote}")
    ring_remote: list[int] | None = None
    note = None
    if n_remote:
        if remote_mode not in REMOTE_MODES:
            raise ValueError(f"RDMAQ_VLLM_REMOTE must be auto, ring or zmq, not {remote_mode!r}")
        if remote_mode == "ring" or (remote_mode == "auto" and rdma_active()):
            if remote_reader_ranks:
                ring_remote = list(remote_reader_ranks)
            elif n_remote == 1:
                ring_remote = [ANY_RANK]
            else:
                note = f"{n_remote} remote readers without known ranks use ZMQ TCP"
    if ring_remote and transport == "auto" and rdma_active():
        transport = "verbs"
    return Placement(list(local_reader_ranks), ring_remote, 0 if ring_remote else n_remote,
                     transport, note)


@dataclass(frozen=True)
class Seat:
    """The reader's side: where rank ``rank`` reads."""

    kind: Literal["local", "ring", "zmq"]  # a local ring reader, a remote ring reader, ZMQ
    index: int | None  # its reader index in the ring; None for ZMQ

    @property
    def role(self) -> str:
        return {"local": "local reader", "ring": "remote reader (ring)",
                "zmq": "remote reader (zmq)"}[self.kind]


def seat(rank: int, local_reader_ranks: Sequence[int], ring_remote_ranks: Sequence[int] | None,
         *, has_zmq: bool) -> Seat:
    """Where ``rank`` reads the queue a writer placed; ValueError when it has no place."""
    if rank in local_reader_ranks:
        return Seat("local", list(local_reader_ranks).index(rank))
    if ring_remote_ranks:
        if list(ring_remote_ranks) == [ANY_RANK]:
            return Seat("ring", len(local_reader_ranks))
        if rank in ring_remote_ranks:
            return Seat("ring", len(local_reader_ranks) + list(ring_remote_ranks).index(rank))
        raise ValueError(f"rank {rank} is neither a local reader ({list(local_reader_ranks)}) "
                         f"nor a remote ring reader ({list(ring_remote_ranks)}) of this queue")
    if not has_zmq:
        raise ValueError(f"rank {rank} is not a local reader ({list(local_reader_ranks)}) and "
                         "the queue has no remote readers")
    return Seat("zmq", None)
