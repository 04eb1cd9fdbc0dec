"""rdmaq ring size for a vLLM queue's (max_chunk_bytes, max_chunks).

vLLM sizes its ring for the largest message it wants to keep out of ZMQ:
16 MiB x 10 chunks for the executor's broadcast (160 MiB), 24 MiB x 10 for each
worker's response queue.  Typical messages are 1-40 KB (a decode step's
SchedulerOutput), and rdmaq streams larger ones through the ring, so the ring
only needs to hold a few steps' worth of messages:

* slot size: the largest power of two <= max_chunk_bytes, within [4 KiB, 64 KiB];
* ring size: max_chunk_bytes x max_chunks capped at RDMAQ_VLLM_RING_BYTES
  (default 4 MiB), and never fewer than max(max_chunks, 8) slots, so at least
  as many small messages can be in flight as vLLM allows.
"""

from __future__ import annotations

from .. import settings

MIN_SLOT = 4 * 1024
MAX_SLOT = 64 * 1024
DEFAULT_RING_BYTES = 4 * 1024 * 1024


def _env_ring_bytes() -> int:
    raw = settings.stripped("RDMAQ_VLLM_RING_BYTES")  # blank: unset
    if raw is None:
        return DEFAULT_RING_BYTES
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"RDMAQ_VLLM_RING_BYTES must be an integer, not {raw!r}") from None
    if value < MIN_SLOT:
        raise ValueError(f"RDMAQ_VLLM_RING_BYTES must be >= {MIN_SLOT}, not {value}")
    return value


def ring_geometry(max_chunk_bytes: int, max_chunks: int) -> tuple[int, int]:
    """Return (slot_bytes, slots)."""
    if max_chunk_bytes <= 0 or max_chunks <= 0:
        raise ValueError(
            "max_chunk_bytes and max_chunks must be positive, got "
            f"{max_chunk_bytes} and {max_chunks}"
        )
    slot = MAX_SLOT
    while slot > MIN_SLOT and slot > max_chunk_bytes:
        slot //= 2
    ring = min(max_chunk_bytes * max_chunks, _env_ring_bytes())
    slots = max(ring // slot, max_chunks, 8)
    return slot, slots
