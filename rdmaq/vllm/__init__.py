"""rdmaq for vLLM: a drop-in ``MessageQueue`` and a vLLM plugin.

``from rdmaq.vllm import MessageQueue`` imports vLLM (a release of SUPPORTED_VLLM); importing
``rdmaq.vllm`` or ``rdmaq.vllm.plugin`` alone does not, so the plugin entry
point stays harmless where vLLM is absent.  See docs/vllm.md.
"""

from __future__ import annotations

from typing import Any

SUPPORTED_VLLM = ("0.26", "0.32", "0.33", "0.34")  # major.minor releases tested in CI

__all__ = ["MessageQueue", "RdmaqMessageQueue", "RdmaqHandle", "SUPPORTED_VLLM"]


def __getattr__(name: str) -> Any:
    if name in ("MessageQueue", "RdmaqMessageQueue", "RdmaqHandle", "Handle"):
        from . import queue

        return getattr(queue, name)
    raise AttributeError(f"module 'rdmaq.vllm' has no attribute {name!r}")
