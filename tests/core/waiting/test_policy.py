"""The reader's waiting policy (rdmaq/policy.py): ``auto`` spins for a due message where the
queue's readers and writer fit the process's CPUs, no CPU quota applies and schedstat can be
read, ``efficient`` never past its window; the library and `rdmaq doctor` give the same
decision and reason, word for word; bad values are named."""
import dataclasses

import pytest

import rdmaq
from rdmaq import doctor, policy

FREE_SPIN_NS = 20_000_000  # docs/settings.md: RDMAQ_FREE_SPIN_US, default 20000
MANY = policy.Machine(cpus=64, quota=None, schedstat=True)
FEW = policy.Machine(cpus=2, quota=None, schedstat=True)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ("RDMAQ_POLICY", "RDMAQ_FREE_SPIN_US", "RDMAQ_SLICE_US"):
        monkeypatch.delenv(var, raising=False)


def test_auto_spins_where_the_queue_fits_the_cpus():
    def spin(n, cpus):
        return policy.decide("auto", n, 20000, policy.Machine(cpus, None, True)).free_spin_ns
    assert spin(8, 16) == spin(15, 16) == FREE_SPIN_NS
    assert spin(16, 16) == 0  # 16 readers and a writer on 16 CPUs
    assert spin(1, 2) == FREE_SPIN_NS
    assert spin(2, 2) == spin(8, 2) == 0


def test_the_slice_is_the_least_where_the_queue_outnumbers_the_cpus():
    """RDMAQ_SLICE_US's default, 300 µs, where each reader and the writer can have a CPU; the
    kernel's least, 100 µs, where they outnumber the CPUs; under either policy."""
    def slice_us(n, cpus, asked="auto"):
        return policy.decide(asked, n, 20000, policy.Machine(cpus, None, True)).slice_us
    assert slice_us(8, 16) == slice_us(15, 16) == slice_us(1, 2) == 300
    assert slice_us(16, 16) == slice_us(2, 2) == slice_us(8, 2) == 100
    assert slice_us(8, 16, "efficient") == 300 and slice_us(8, 2, "efficient") == 100
    assert policy.decide("auto", 8, 20000, FEW, slice_us=0).slice_us == 0  # a set value wins


def test_a_set_slice_wins_over_the_rule(monkeypatch):
    assert policy.slice_us(8, machine=FEW) == 100 and policy.slice_us(8, machine=MANY) == 300
    monkeypatch.setenv("RDMAQ_SLICE_US", "500")
    assert policy.slice_us(8, machine=FEW) == policy.slice_us(8, machine=MANY) == 500
    assert policy.for_reader(None, 8, machine=FEW).slice_us == 500
    assert policy.for_reader(None, 1, machine=MANY).slice_us == 500
    monkeypatch.setenv("RDMAQ_SLICE_US", " ")  # blank: unset
    assert policy.for_reader(None, 8, machine=FEW).slice_us == 100
    monkeypatch.setenv("RDMAQ_SLICE_US", "50")
    with pytest.raises(ValueError, match="RDMAQ_SLICE_US"):
        policy.for_reader(None, 8, machine=FEW)


@pytest.mark.parametrize("machine, words", [
    (policy.Machine(64, 4.0, True), "under a CPU quota of 4 CPUs"),
    (policy.Machine(64, None, False), "without /proc/thread-self/schedstat"),
])
def test_auto_waits_as_efficient_under_a_quota_or_without_schedstat(machine, words):
    d = policy.decide("auto", 1, 20000, machine)
    assert d.free_spin_ns == 0 and d.policy == "auto"
    assert words in d.reason and d.reason.endswith("waits as policy efficient does")


def test_efficient_never_free_spins():
    d = policy.decide("efficient", 1, 20000, MANY)
    assert d.free_spin_ns == 0 and d.reason.startswith("policy efficient:")


def test_the_policy_and_the_free_spin_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("RDMAQ_POLICY", "efficient")
    assert policy.for_reader(None, 1, machine=MANY).free_spin_ns == 0
    monkeypatch.setenv("RDMAQ_POLICY", "auto")
    monkeypatch.setenv("RDMAQ_FREE_SPIN_US", "5000")
    assert policy.for_reader(None, 1, machine=MANY).free_spin_ns == 5_000_000
    # the argument names the policy only
    assert policy.for_reader("auto", 1, machine=MANY).free_spin_ns == 5_000_000
    monkeypatch.setenv("RDMAQ_FREE_SPIN_US", "0")
    off = policy.for_reader(None, 1, machine=MANY)
    assert off.free_spin_ns == 0 and "RDMAQ_FREE_SPIN_US=0" in off.reason


def test_the_reason_counts_the_readers_in_words():
    """The reason names the queue as doctor prints it: "1 reader", "8 readers"."""
    assert "auto, 1 reader and their writer fit 64 CPUs" in policy.decide("auto", 1, 20000, MANY).reason
    assert "auto, 8 readers and their writer fit 64 CPUs" in policy.decide("auto", 8, 20000, MANY).reason
    assert "auto, 8 readers and their writer on 2 CPUs" in policy.decide("auto", 8, 20000, FEW).reason


@pytest.mark.parametrize("make, field", [
    (policy.this_machine, "cpus"),
    (lambda: policy.decide("auto", 1, 20000, MANY), "free_spin_ns")], ids=["machine", "decision"])
def test_a_machine_and_a_decision_cannot_be_changed(make, field):
    """A Reader's waiting_policy says what its wait was set to when it was made, and a
    Machine what that decision was made for: neither can be altered after."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(make(), field, 0)


@pytest.mark.parametrize("machine", [MANY, FEW], ids=["64 CPUs", "2 CPUs"])
@pytest.mark.parametrize("asked", [None, "efficient"])
def test_the_library_and_doctor_give_the_same_decision_and_reason(monkeypatch, machine, asked):
    """On a made-up machine of many CPUs and one of few: each Reader's waiting_policy is
    what `rdmaq doctor` reports and prints for a queue of as many readers."""
    monkeypatch.setattr(policy, "this_machine", lambda: machine)
    if asked:
        monkeypatch.setenv("RDMAQ_POLICY", asked)
    rep = doctor.collect()
    wp, printed = rep["waiting_policy"], doctor.render(rep).splitlines()
    assert wp["cpus"] == machine.cpus
    for n in doctor.POLICY_READERS:
        with rdmaq.Writer(n, transport="shm") as w:
            r = rdmaq.Reader(w.handle, 0)
            try:
                got = r.waiting_policy
            finally:
                r.close()
        reported = wp["by_readers"][str(n)]
        assert (got.policy, got.free_spin_ns // 1000, got.reason, got.slice_us) == (
            reported["policy"], reported["free_spin_us"], reported["reason"], reported["slice_us"])
        assert any(line.endswith(f": {got.reason}") for line in printed)
    spins = {n: wp["by_readers"][str(n)]["free_spin_us"] > 0 for n in doctor.POLICY_READERS}
    if asked == "efficient":
        assert spins == {1: False, 8: False}
    else:
        assert spins == ({1: True, 8: True} if machine is MANY else {1: True, 8: False})


@pytest.mark.parametrize("arg, env, error, words", [
    ("fast", None, ValueError, "policy must be one of auto, efficient, got 'fast'"),
    (1, None, TypeError, "policy must be a str, got int"),
    (None, "lazy", ValueError, "environment variable RDMAQ_POLICY must be one of auto, efficient"),
])
def test_a_bad_policy_is_named(monkeypatch, arg, env, error, words):
    if env is not None:
        monkeypatch.setenv("RDMAQ_POLICY", env)
    with rdmaq.Writer(1, transport="shm") as w:
        with pytest.raises(error, match=words):
            rdmaq.Reader(w.handle, 0, policy=arg)
        # nothing was attached: the index is still free
        rdmaq.Reader(w.handle, 0, policy="efficient").close()


def test_a_bad_free_spin_is_named(monkeypatch):
    monkeypatch.setenv("RDMAQ_FREE_SPIN_US", "2000000")
    with rdmaq.Writer(1, transport="shm") as w:
        with pytest.raises(ValueError, match="RDMAQ_FREE_SPIN_US must be an integer in 0..1000000"):
            rdmaq.Reader(w.handle, 0)


@pytest.mark.parametrize("machine, want_ns", [(FEW, 100_000), (MANY, 300_000)], ids=["2 CPUs", "64 CPUs"])
def test_a_reader_and_its_writer_block_with_the_decision_s_slice(monkeypatch, machine, want_ns):
    """A queue of 8: its writer and a reader ask the kernel for the slice the decision
    names; slice_us= wins."""
    from rdmaq._rdmaq import lib
    monkeypatch.setattr(policy, "this_machine", lambda: machine)
    honoured = lib.rdmaq_sched_slice_probe(want_ns) == 1  # a kernel before 6.12: off, 0
    with rdmaq.Writer(8, transport="shm") as w:
        r = rdmaq.Reader(w.handle, 0)
        given = rdmaq.Reader(w.handle, 1, slice_us=200)
        try:
            assert r.waiting_policy.slice_us * 1000 == want_ns
            assert r.stats["slice_ns"] == w.stats["slice_ns"] == (want_ns if honoured else 0)
            assert given.stats["slice_ns"] == (200_000 if honoured else 0)
        finally:
            r.close()
            given.close()
