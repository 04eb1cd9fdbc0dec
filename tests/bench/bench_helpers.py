"""Helpers shared by tests/bench (a module name of its own: tests/core has a conftest too)."""
import pytest


def rdmaq_usable():
    try:
        import rdmaq
    except Exception:
        return False
    return hasattr(rdmaq, "Writer")


needs_rdmaq = pytest.mark.skipif(not rdmaq_usable(), reason="rdmaq core not importable")
