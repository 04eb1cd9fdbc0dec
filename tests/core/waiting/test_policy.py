"""The reader's waiting policy (docs/api.md, "Waiting options"): ``auto`` spins for a due
message where the queue's readers and writer fit the process's CPUs, ``efficient``
never past its window; bad values are named."""
import pytest

import rdmaq
from rdmaq import queue

FREE_SPIN_NS = 20_000_000  # docs/api.md: up to RDMAQ_FREE_SPIN_US, default 20000


@pytest.fixture
def cpus(monkeypatch):
    def set_cpus(n):
        monkeypatch.setattr(queue.os, "sched_getaffinity", lambda pid: set(range(n)))
    return set_cpus


def test_auto_spins_where_the_queue_fits_the_cpus(cpus, monkeypatch):
    monkeypatch.delenv("RDMAQ_FREE_SPIN_US", raising=False)
    cpus(16)
    assert queue._free_spin_ns("auto", 8) == FREE_SPIN_NS
    assert queue._free_spin_ns("auto", 15) == FREE_SPIN_NS
    assert queue._free_spin_ns("auto", 16) == 0  # 16 readers and a writer on 16 CPUs
    cpus(2)
    assert queue._free_spin_ns("auto", 1) == FREE_SPIN_NS
    assert queue._free_spin_ns("auto", 8) == 0


def test_efficient_never_free_spins(cpus):
    cpus(64)
    assert queue._free_spin_ns("efficient", 1) == 0


def test_the_policy_and_the_free_spin_come_from_the_environment(cpus, monkeypatch):
    cpus(16)
    monkeypatch.setenv("RDMAQ_POLICY", "efficient")
    assert queue._free_spin_ns(None, 1) == 0
    monkeypatch.setenv("RDMAQ_POLICY", "auto")
    monkeypatch.setenv("RDMAQ_FREE_SPIN_US", "5000")
    assert queue._free_spin_ns(None, 1) == 5_000_000
    assert queue._free_spin_ns("auto", 1) == 5_000_000  # the argument names the policy only


@pytest.mark.parametrize("policy, env, error, words", [
    ("fast", None, ValueError, "policy must be one of auto, efficient, got 'fast'"),
    (1, None, TypeError, "policy must be a str, got int"),
    (None, "lazy", ValueError, "environment variable RDMAQ_POLICY must be one of auto, efficient"),
])
def test_a_bad_policy_is_named(monkeypatch, policy, env, error, words):
    if env is None:
        monkeypatch.delenv("RDMAQ_POLICY", raising=False)
    else:
        monkeypatch.setenv("RDMAQ_POLICY", env)
    with rdmaq.Writer(1, transport="shm") as w:
        with pytest.raises(error, match=words):
            rdmaq.Reader(w.handle, 0, policy=policy)
        # nothing was attached: the index is still free
        rdmaq.Reader(w.handle, 0, policy="efficient").close()


def test_a_bad_free_spin_is_named(monkeypatch):
    monkeypatch.setenv("RDMAQ_FREE_SPIN_US", "2000000")
    with rdmaq.Writer(1, transport="shm") as w:
        with pytest.raises(ValueError, match="RDMAQ_FREE_SPIN_US must be in 0..1000000"):
            rdmaq.Reader(w.handle, 0)
