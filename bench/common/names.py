"""One name per contender, in every benchmark (``rdmaq bench``, ``bench step``, ``bench
serve``) and every result file they write: ``rdmaq-shm`` and ``rdmaq-verbs`` (rdmaq over each
transport), ``vllm`` (vLLM's own MessageQueue) and ``vllm-spinloop`` (the same with vLLM's C
spin loop).  A variant is ``NAME@VAR=VALUE[@...]``: the contender with more environment.

Result files and command lines of earlier versions used other names; they are read under
today's (the files themselves are left as they were written)."""

from __future__ import annotations

CONTENDERS = ("rdmaq-shm", "rdmaq-verbs", "vllm", "vllm-spinloop")
# `rdmaq bench serve` before the benchmarks shared their names: its rdmaq server (the
# plugin's own choice of transport, shm on every machine it ran on) and vLLM's two
OLD_NAMES = {"rdmaq": "rdmaq-shm", "shm": "vllm", "shm-spinloop": "vllm-spinloop"}


def base_name(queue: str) -> str:
    """'rdmaq-shm@RDMAQ_EXPERIMENT=busy_spin_us=2000' -> 'rdmaq-shm'."""
    return queue.split("@", 1)[0]


def current_name(queue: str) -> str:
    """A contender (or a variant of one) under today's name."""
    base = base_name(queue)
    return OLD_NAMES.get(base, base) + queue[len(base):]


def is_rdmaq(queue: str) -> bool:
    """rdmaq over either transport, or a variant of it."""
    return base_name(current_name(queue)).startswith("rdmaq-")
