"""The waiting policy from the CPUs this process may actually use: rdmaq/policy.py's
this_machine() and `rdmaq doctor`'s report, not a made-up Machine.  The test thread is
pinned to fewer CPUs than the machine has (sched_setaffinity), so advice computed from
the machine's CPU count (os.cpu_count(), /proc/cpuinfo) instead of the allowed ones is
wrong here, as it is on a server whose workers are pinned to a few of many CPUs."""
import os

import pytest

import rdmaq
from rdmaq import doctor, policy

FREE_SPIN_US = 20000  # docs/settings.md: RDMAQ_FREE_SPIN_US's default
ALLOWED = sorted(os.sched_getaffinity(0))


@pytest.fixture(autouse=True)
def no_quota_no_env(monkeypatch):
    """The CPUs alone decide: no cgroup quota (a CI container may have one), no setting."""
    monkeypatch.setattr(policy, "cpu_quota", lambda: None)
    for var in ("RDMAQ_POLICY", "RDMAQ_FREE_SPIN_US"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def pinned():
    """The calling thread pinned to `n` of its CPUs (this process's decision is its
    thread's affinity), restored after."""
    def pin(n):
        os.sched_setaffinity(0, ALLOWED[:n])
        return n
    try:
        yield pin
    finally:
        os.sched_setaffinity(0, ALLOWED)


@pytest.mark.parametrize("n", sorted({1, len(ALLOWED)}))
def test_this_machine_counts_the_allowed_cpus(pinned, n):
    pinned(n)
    assert policy.this_machine().cpus == n
    assert doctor.waiting_policy()["cpus"] == n
    assert doctor.scheduler()["cpus"] == n


def test_one_allowed_cpu_never_free_spins(pinned):
    """One CPU for a reader and its writer: they outnumber it, whatever the machine has."""
    pinned(1)
    d = policy.for_reader(None, 1)
    assert d.free_spin_ns == 0
    assert "1 reader and their writer on 1 CPUs: they outnumber them" in d.reason
    wp = doctor.waiting_policy()
    for n in doctor.POLICY_READERS:
        assert wp["by_readers"][str(n)]["free_spin_us"] == 0
    with rdmaq.Writer(1, transport="shm") as w, rdmaq.Reader(w.handle, 0) as r:
        assert r.waiting_policy.free_spin_ns == 0


@pytest.mark.skipif(len(ALLOWED) < 2, reason="needs two allowed CPUs")
def test_a_reader_and_its_writer_on_exactly_two_cpus_free_spin(pinned):
    """Exactly as many CPUs as the reader and the writer (the edge): the reader spins for a
    due message; eight readers on two CPUs do not.  Doctor says the same, per queue size."""
    pinned(2)
    assert policy.for_reader(None, 1).free_spin_ns == FREE_SPIN_US * 1000
    assert policy.for_reader(None, 2).free_spin_ns == 0  # one more than fits
    wp = doctor.waiting_policy()
    assert wp["by_readers"]["1"]["free_spin_us"] == FREE_SPIN_US
    assert wp["by_readers"]["8"]["free_spin_us"] == 0
    assert "1 reader and their writer fit 2 CPUs" in wp["by_readers"]["1"]["reason"]
    with rdmaq.Writer(1, transport="shm") as w, rdmaq.Reader(w.handle, 0) as r:
        assert r.waiting_policy.free_spin_ns == FREE_SPIN_US * 1000


def test_the_doctor_reports_the_setting_s_free_spin_in_microseconds(pinned, monkeypatch):
    pinned(len(ALLOWED))
    monkeypatch.setenv("RDMAQ_FREE_SPIN_US", "1234")
    assert doctor.waiting_policy()["by_readers"]["1"]["free_spin_us"] == (1234 if len(ALLOWED) >= 2 else 0)
