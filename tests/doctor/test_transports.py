"""doctor's transport and VM checks on this machine, with /dev/shm and /proc/cpuinfo
made to look otherwise: shm is usable only in a /dev/shm that exists and is
writable; a VM is one whose CPU flags say hypervisor, and an unreadable
/proc/cpuinfo says no VM."""
import builtins
import io
import os
import threading

from rdmaq import doctor, policy

REAL_ACCESS, REAL_ISDIR, REAL_OPEN = os.access, os.path.isdir, builtins.open


def _shm(monkeypatch, exists=True, writable=True):
    monkeypatch.setattr(os.path, "isdir", lambda p: exists if p == "/dev/shm" else REAL_ISDIR(p))
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: (writable and exists) if p == "/dev/shm"
                        else REAL_ACCESS(p, mode, **kw))
    return doctor.transports([])["shm"]


def test_shm_is_usable_in_a_writable_dev_shm(monkeypatch):
    assert _shm(monkeypatch) == {"usable": True, "why": None}


def test_a_read_only_dev_shm_makes_shm_unusable(monkeypatch):
    """/dev/shm is there but not writable: no ring can be made in it."""
    assert _shm(monkeypatch, writable=False) == {"usable": False, "why": "/dev/shm is missing or read-only"}


def test_a_missing_dev_shm_makes_shm_unusable_even_if_access_says_writable(monkeypatch):
    """Both must hold: a path that access() passes but that is no folder is no /dev/shm."""
    monkeypatch.setattr(os.path, "isdir", lambda p: False if p == "/dev/shm" else REAL_ISDIR(p))
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: True if p == "/dev/shm"
                        else REAL_ACCESS(p, mode, **kw))
    assert doctor.transports([])["shm"]["usable"] is False


def _cpuinfo(monkeypatch, text):
    def fake_open(path, *args, **kw):
        if path == "/proc/cpuinfo":
            if text is None:
                raise PermissionError(13, "Permission denied", path)
            return io.StringIO(text)
        return REAL_OPEN(path, *args, **kw)

    monkeypatch.setattr(doctor, "open", fake_open, raising=False)
    return doctor.scheduler()["vm"]


def test_cpu_flags_with_hypervisor_say_vm(monkeypatch):
    assert _cpuinfo(monkeypatch, "processor\t: 0\nflags\t\t: fpu vme hypervisor lahf_lm\n") is True


def test_cpu_flags_without_hypervisor_say_no_vm(monkeypatch):
    assert _cpuinfo(monkeypatch, "processor\t: 0\nflags\t\t: fpu vme lahf_lm\n") is False


def test_an_unreadable_cpuinfo_says_no_vm(monkeypatch):
    """Unknown is reported as no VM (the advice for VMs is not given on a guess)."""
    assert _cpuinfo(monkeypatch, None) is False


def test_scheduler_says_why_a_thread_cannot_have_a_short_slice():
    """Where the probe fails (a SCHED_IDLE thread has no slice to shorten; a kernel before
    6.12 has none for any thread) the report carries the C core's reason, not just False."""
    out = []

    def idle_thread():
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        out.append(doctor.scheduler())
    t = threading.Thread(target=idle_thread)
    t.start()
    t.join()
    assert out[0]["short_slice"] is False
    assert out[0]["short_slice_why"] in (
        f"this thread's policy is {os.SCHED_IDLE}, not SCHED_OTHER",
        "the kernel ignores sched_runtime for SCHED_OTHER threads (custom slices need Linux 6.12 or later)")


def test_a_short_slice_the_probe_grants_has_no_reason_against_it(monkeypatch):
    """Where the probe says yes, short_slice_why is None: an error message the C core
    kept from an earlier failure in this thread is not reported as a reason."""
    import rdmaq._rdmaq
    real = rdmaq._rdmaq.lib

    class ProbeSaysYes:
        def rdmaq_sched_slice_probe(self, slice_ns):
            return 1

        def __getattr__(self, name):
            return getattr(real, name)

    assert real.rdmaq_sched_slice_probe(1) < 0  # out of range: leaves an error message behind
    assert rdmaq._rdmaq.ffi.string(real.rdmaq_errmsg())
    monkeypatch.setattr(rdmaq._rdmaq, "lib", ProbeSaysYes())
    sch = doctor.scheduler()
    assert (sch["short_slice"], sch["short_slice_why"]) == (True, None)


def _quota(monkeypatch, cpu_max):
    """cpu_quota() in a cgroup /box whose cpu.max reads ``cpu_max``."""
    def fake_open(path, *a, **kw):
        if path == "/proc/self/cgroup":
            return io.StringIO("0::/box\n")
        return REAL_OPEN(path, *a, **kw)
    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(doctor.sysfs, "read",
                        lambda p: cpu_max if p == "/sys/fs/cgroup/box/cpu.max" else None)
    return policy.cpu_quota()


def test_a_cpu_max_without_exactly_two_fields_is_no_quota(monkeypatch):
    """cpu.max is "QUOTA PERIOD"; a line of another shape is not read as a quota."""
    assert _quota(monkeypatch, "50000 100000") == 0.5
    assert _quota(monkeypatch, "50000 100000 7") is None


def test_the_report_names_where_it_searched_for_vllm_leftovers():
    """The JSON report itself lists the folders searched, so a reader of it knows
    where "none" was looked for."""
    from rdmaq.vllm import leftovers
    assert doctor.collect()["vllm_leftovers_searched"] == leftovers.places()


def test_the_rendered_report_heads_the_transports_with_their_title():
    """The transports' lines follow a "Transports:" heading, as the other sections'."""
    lines = doctor.render(doctor.collect()).splitlines()
    i = lines.index("Transports:")
    assert lines[i + 1].startswith("  shm: ")
