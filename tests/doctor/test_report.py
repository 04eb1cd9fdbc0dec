"""`rdmaq doctor`'s advice and report for machines this one is not: made-up reports
(devices, ports, GIDs, limits, a VM) through doctor.advice() and doctor.render().
The VM runs doctor against real rxe devices (tests/doctor/test_command.py)."""
import argparse
import copy
import io
import os

import pytest

from rdmaq import doctor, policy

IPV4_GID = "0000:0000:0000:0000:0000:ffff:c000:0201"


def _port(state="ACTIVE", link="Ethernet", gids=None, mtu=None):
    p = {"port": 1, "state": state, "link_layer": link,
         "gids": gids if gids is not None else [{"index": 1, "gid": IPV4_GID, "type": "RoCE v2",
                                                 "netdev": "veth0"}]}
    if mtu:
        p["active_mtu"] = mtu
    return p


BASE = {
    "kernel_rdma": True, "source": "sysfs", "notes": [], "pyverbs": "ok",
    "devices": [{"name": "rxe0", "ports": [_port()]}],
    "memlock": {"soft": "unlimited", "hard": "unlimited", "ok": True},
    "rxe": {"kernel": "6.12.0", "loaded": True, "module_file": None},
    "transports": {"shm": {"usable": True, "why": None},
                   "verbs": {"usable": True, "why": None, "active_ports": [("rxe0", 1)]}},
    "scheduler": {"short_slice": True, "short_slice_why": None, "hz": "1000", "cpuidle_driver": None,
                  "guest_halt_poll_ns": None, "vm": False, "cpus": 2, "runnable_now": 1},
    "vllm_leftovers_searched": ["/dev/shm", "/tmp"],
}


def report(**changes):
    rep = copy.deepcopy(BASE)
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            rep[section][field] = value
        else:
            rep[section] = value
    return rep


def advice(**changes):
    return [a for a in doctor.advice(report(**changes)) if "SCHED_IDLE" not in a and "verbs extension" not in a
            and "For the verbs transport" not in a]


def test_a_working_rdma_machine_needs_no_advice():
    assert advice() == []
    assert any("SCHED_IDLE" in a for a in doctor.advice(report()))  # said to everybody, last
    assert "SCHED_IDLE" in doctor.advice(report())[-1]


def test_no_kernel_support():
    a, = advice(kernel_rdma=False, devices=[])
    assert a.startswith("This kernel has no RDMA support") and "transport='shm'" in a


@pytest.mark.parametrize("loaded, module_file, says", [
    (True, None, "create a SoftRoCE one with `rdmaq softroce up --netdev IF`"),
    (False, "/lib/modules/x/rdma_rxe.ko", "create a SoftRoCE one"),
    (False, None, "no rdma_rxe module for this kernel"),
])
def test_no_device_yet(loaded, module_file, says):
    a, = advice(devices=[], rxe__loaded=loaded, rxe__module_file=module_file,
                transports__verbs={"usable": False, "why": "x", "active_ports": []})
    assert says in a


def test_devices_without_an_active_port():
    a, = advice(devices=[{"name": "rxe0", "ports": [_port(state="DOWN")]}],
                transports__verbs={"usable": False, "why": "x", "active_ports": []})
    assert a.startswith("RDMA devices exist but no port is ACTIVE")


@pytest.mark.parametrize("gids", [
    [],
    [{"index": 0, "gid": "fe80:0000:0000:0000:7482:6dff:fe7a:e337", "type": "RoCE v2"}],  # not IPv4
    [{"index": 1, "gid": IPV4_GID, "type": "RoCE v1"}],  # IPv4, not v2
])
def test_an_active_ethernet_port_without_a_rocev2_ipv4_gid(gids):
    a, = advice(devices=[{"name": "rxe0", "ports": [_port(gids=gids)]}])
    assert a == ("rxe0 port 1 has no RoCEv2 IPv4 GID: give its netdev an IPv4 address, or pass "
                 "gid_index= / RDMAQ_GID_INDEX")


def test_an_infiniband_or_down_port_needs_no_gid_advice():
    assert advice(devices=[{"name": "mlx0", "ports": [_port(link="InfiniBand", gids=[])]}]) == []
    assert advice(devices=[{"name": "rxe0", "ports": [_port(state="DOWN", gids=[])]}],
                  transports__verbs={"usable": True, "why": None, "active_ports": [("x", 1)]}) == []


def test_a_low_memlock_limit_matters_only_with_devices():
    a, = advice(memlock={"soft": "8192 KiB", "hard": "8192 KiB", "ok": False})
    assert a.startswith("RLIMIT_MEMLOCK is 8192 KiB") and "ulimit -l unlimited" in a
    assert not [x for x in advice(memlock={"soft": "8192 KiB", "hard": "8192 KiB", "ok": False}, devices=[],
                                  transports__verbs={"usable": False, "why": "x", "active_ports": []})
                if "RLIMIT_MEMLOCK" in x]


def test_pyverbs_missing_is_only_a_note():
    a, = advice(pyverbs="could not import pyverbs")
    assert a == "pyverbs: could not import pyverbs (only needed for this report; sysfs was used)"


def test_no_short_slice():
    a, = advice(scheduler__short_slice=False, scheduler__short_slice_why="ignored")
    assert "cannot ask for a short scheduler slice here (ignored)" in a and "Linux 6.12" in a


@pytest.mark.parametrize("driver, poll, says", [
    ("haltpoll", "0", "polls for 0 ns"),
    ("acpi_idle", None, "boot with cpuidle_haltpoll.force=1"),
    (None, None, "boot with cpuidle_haltpoll.force=1"),
])
def test_inside_a_vm(driver, poll, says):
    a, = advice(scheduler__vm=True, scheduler__cpuidle_driver=driver, scheduler__guest_halt_poll_ns=poll)
    assert says in a


def test_haltpoll_that_polls_is_fine():
    assert advice(scheduler__vm=True, scheduler__cpuidle_driver="haltpoll",
                  scheduler__guest_halt_poll_ns="200000") == []
    assert advice(scheduler__vm=False, scheduler__cpuidle_driver="haltpoll",
                  scheduler__guest_halt_poll_ns="0") == []


def test_the_report_of_a_working_machine():
    rep = report(devices=[{"name": "rxe0", "ports": [_port(mtu=1024, gids=[
        {"index": 1, "gid": "00000000000000000000ffffc0000201", "type": "RoCE v2", "netdev": "veth0"},
        {"index": 2, "gid": IPV4_GID}])]}], notes=["pyverbs failed (x); read sysfs instead"],
        advice=["do this"])
    text = doctor.render(rep).splitlines()
    assert text[0] == "Kernel RDMA support: yes"
    assert text[1] == "RDMA devices (sysfs): 1"
    assert text[2:6] == ["  rxe0", "    port 1: ACTIVE, Ethernet, MTU 1024",
                         f"      GID[1] {IPV4_GID}  (RoCE v2, veth0)", f"      GID[2] {IPV4_GID}"]
    assert "memlock limit: unlimited (hard unlimited)" in text
    assert "SoftRoCE (rdma_rxe): loaded" in text
    i = text.index("Waiting (scheduler):")
    assert text[i + 1] == "  short slice for blocked readers: yes"
    assert "  tick: HZ=1000; cpuidle driver: none" in text
    assert "  runnable tasks now: 1 on 2 CPUs" in text
    assert text[-6:] == ["  shm: usable", "  verbs: usable",
                         "vLLM leftovers (vllm_dist_* and ZMQ socket files in /dev/shm, /tmp): none",
                         "note: pyverbs failed (x); read sysfs instead", "Advice:", "  - do this"]


def test_the_report_of_a_machine_without_rdma():
    rep = report(kernel_rdma=False, devices=[], memlock={"soft": "64 KiB", "hard": "64 KiB", "ok": False},
                 rxe={"kernel": "6.1.0", "loaded": False, "module_file": None},
                 transports={"shm": {"usable": False, "why": None},
                             "verbs": {"usable": False, "why": "no ACTIVE RDMA port", "active_ports": []}},
                 scheduler=dict(BASE["scheduler"], short_slice=False, short_slice_why=None, hz=None,
                                cpuidle_driver="haltpoll", guest_halt_poll_ns="0", vm=True, runnable_now=3),
                 advice=[])
    text = doctor.render(rep).splitlines()
    assert text[0] == "Kernel RDMA support: NO (no /sys/class/infiniband)"
    assert text[1] == "RDMA devices (sysfs): none"
    assert "memlock limit: 64 KiB (hard 64 KiB)  <- low" in text
    assert "SoftRoCE (rdma_rxe): not available for kernel 6.1.0" in text
    assert "  short slice for blocked readers: no (?)" in text
    assert "  tick: HZ=unknown; cpuidle driver: haltpoll (guest_halt_poll_ns 0); in a VM" in text
    # 3 runnable on 2 CPUs: this process and two others fill them
    assert ("  runnable tasks now: 3 on 2 CPUs  (the machine's count; a reader judges its CPU busy by "
            "its own run delay while more tasks are runnable than CPUs)") in text
    assert text[-3:] == ["  shm: NOT usable: ?", "  verbs: NOT usable: no ACTIVE RDMA port",
                         "vLLM leftovers (vllm_dist_* and ZMQ socket files in /dev/shm, /tmp): none"]


def test_runnable_tasks_that_leave_a_cpu_free_are_not_oversubscribed():
    text = doctor.render(report(scheduler__runnable_now=2, advice=[]))
    assert "  runnable tasks now: 2 on 2 CPUs" in text.splitlines()
    text = doctor.render(report(scheduler__runnable_now=None, advice=[]))
    assert "runnable tasks now" not in text


def test_rxe_available_but_not_loaded():
    text = doctor.render(report(rxe__loaded=False, rxe__module_file="/lib/rdma_rxe.ko", advice=[]))
    assert "SoftRoCE (rdma_rxe): available (/lib/rdma_rxe.ko)" in text.splitlines()


def test_transports_from_the_devices_ports():
    active = doctor.transports([{"name": "rxe0", "ports": [_port()]}, {"name": "mlx0", "ports": [_port("DOWN")]}])
    idle = doctor.transports([{"name": "mlx0", "ports": [_port("DOWN")]}])
    assert active["verbs"]["active_ports"] == [("rxe0", 1)]
    assert idle["verbs"]["active_ports"] == []
    why, _ = doctor.verbs_extension()
    if why is None:  # the extension is built here: only the port decides
        assert active["verbs"] == {"usable": True, "why": None, "active_ports": [("rxe0", 1)]}
        assert idle["verbs"] == {"usable": False, "why": "no ACTIVE RDMA port", "active_ports": []}
    assert active["shm"] == {"usable": True, "why": None}


def test_the_memlock_limit_judged_against_64_mib(monkeypatch):
    import resource
    for soft, ok in ((64 << 20, True), ((64 << 20) - 1, False), (resource.RLIM_INFINITY, True)):
        monkeypatch.setattr(resource, "getrlimit", lambda _, soft=soft: (soft, resource.RLIM_INFINITY))
        m = doctor.memlock()
        assert m["ok"] is ok and m["hard"] == "unlimited"
        assert m["soft"] == ("unlimited" if soft == resource.RLIM_INFINITY else f"{soft // 1024} KiB")


def test_gids_as_pyverbs_spells_them_are_written_like_sysfs():
    assert doctor._gid_text("00000000000000000000ffffc0000201") == IPV4_GID
    assert doctor._gid_text(IPV4_GID) == IPV4_GID


def test_the_scheduler_report_says_what_the_probe_says():
    from rdmaq._rdmaq import lib
    assert doctor.scheduler()["short_slice"] is (lib.rdmaq_sched_slice_probe(100_000) == 1)


def test_the_scheduler_report_counts_the_cpus_this_thread_may_run_on():
    import threading
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("one CPU allowed here: a narrower affinity cannot be told apart")
    box = {}

    def on_one_cpu():
        os.sched_setaffinity(0, {allowed[-1]})  # this thread only
        box["cpus"] = doctor.scheduler()["cpus"]

    t = threading.Thread(target=on_one_cpu)
    t.start()
    t.join(60)
    assert box["cpus"] == 1


def test_a_verbs_extension_broken_otherwise_is_not_hidden(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "rdmaq.transport.verbs", None)  # import fails, naming itself
    with pytest.raises(ModuleNotFoundError):
        doctor.verbs_extension()


class _Gid:
    def __init__(self, text, gid_type, spelled_by_method):
        if spelled_by_method:  # newer pyverbs: a method and the netdev (0: none); older ones: only the attribute
            self.gid_str = lambda: text
            self.ndev_ifindex = 0
        else:
            self.gid = text
        self.gid_type = gid_type


class _Context:
    """One port, Ethernet, ACTIVE, whose GID table pyverbs returns entry by entry."""
    TABLE = [_Gid("fe80:0000:0000:0000:0000:0000:0000:0001", 1, True), None,
             _Gid("0000:0000:0000:0000:0000:0000:0000:0000", 2, True), _Gid(IPV4_GID, 2, False)]

    opened = []

    def __init__(self, name):
        self.opened.append(name)

    def __enter__(self):
        return self

    def __exit__(self, *_):
        pass

    def query_device(self):
        return argparse.Namespace(phys_port_cnt=1)

    def query_port(self, port):
        return argparse.Namespace(state=4, link_layer=1, active_mtu=3, gid_tbl_len=len(self.TABLE))

    def query_gid_ex(self, port, index):
        if self.TABLE[index] is None:
            raise OSError(61, "No data available")  # an empty entry
        return self.TABLE[index]


@pytest.mark.parametrize("name", [b"rxe0", "rxe0"])  # bytes from older pyverbs, str from newer ones
def test_the_pyverbs_report_of_a_roce_port(monkeypatch, name):
    import sys
    import types
    enums = types.SimpleNamespace(IBV_PORT_ACTIVE=4, IBV_PORT_DOWN=1, IBV_PORT_INIT=2, IBV_PORT_ARMED=3,
                                  IBV_LINK_LAYER_ETHERNET=1, IBV_LINK_LAYER_INFINIBAND=0)
    monkeypatch.setitem(sys.modules, "pyverbs", types.SimpleNamespace(enums=enums))
    monkeypatch.setitem(sys.modules, "pyverbs.enums", enums)
    dev = types.SimpleNamespace(get_device_list=lambda: [types.SimpleNamespace(name=name)],
                                Context=_Context, translate_mtu=lambda m: {3: 1024}[m])
    monkeypatch.setattr(_Context, "opened", [])
    assert doctor.devices_from_pyverbs(dev) == [{"name": "rxe0", "ports": [{
        "port": 1, "state": "ACTIVE", "link_layer": "Ethernet", "active_mtu": 1024,
        "gids": [{"index": 0, "gid": "fe80:0000:0000:0000:0000:0000:0000:0001", "type": "RoCE v1", "netdev": None},
                 {"index": 3, "gid": IPV4_GID, "type": "RoCE v2", "netdev": None}]}]}]
    assert _Context.opened == ["rxe0"]  # opened by its name as text


def test_the_rxe_module_file_is_the_one_modinfo_names(tmp_path, monkeypatch):
    # a modinfo of our own on PATH, naming a file no kernel has: the walk of /lib/modules cannot find it
    modinfo = tmp_path / "modinfo"
    modinfo.write_text('#!/bin/sh\n[ "$*" = "-n rdma_rxe" ] && echo /made/up/rdma_rxe.ko.xz\n')
    modinfo.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert doctor.rxe_status()["module_file"] == "/made/up/rdma_rxe.ko.xz"


def test_what_a_failing_modinfo_prints_is_no_module_file(tmp_path, monkeypatch):
    """modinfo's answer counts only when it exits 0: one that fails, whatever it printed
    on stdout, names no module (a made-up kernel without a module tree: none found)."""
    modinfo = tmp_path / "modinfo"
    modinfo.write_text("#!/bin/sh\necho /made/up/rdma_rxe.ko.xz\nexit 1\n")
    modinfo.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(doctor.platform, "release", lambda: "9.9.9-made-up")  # no /lib/modules/9.9.9-made-up
    assert doctor.rxe_status()["module_file"] is None


def test_without_an_answer_from_modinfo_the_module_is_found_under_lib_modules(tmp_path, monkeypatch):
    # a modinfo that knows no rdma_rxe, and a made-up kernel's module tree
    modinfo = tmp_path / "modinfo"
    modinfo.write_text("#!/bin/sh\necho 'modinfo: ERROR: Module rdma_rxe not found.' >&2\nexit 1\n")
    modinfo.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(doctor.platform, "release", lambda: "9.9.9-made-up")
    moddir = "/lib/modules/9.9.9-made-up"
    real_isdir = os.path.isdir
    monkeypatch.setattr(doctor.os.path, "isdir", lambda p: p == moddir or real_isdir(p))
    tree = [(moddir, ["kernel"], ["modules.dep"]),
            (f"{moddir}/kernel/net", [], ["rdma_rxe_helper.txt", "veth.ko"]),
            (f"{moddir}/kernel/rxe", [], ["notes", "rdma_rxe.ko.zst"]),
            (f"{moddir}/extra", [], ["rdma_rxe.ko"])]
    monkeypatch.setattr(doctor.os, "walk", lambda top: iter(tree) if top == moddir else iter(()))
    st = doctor.rxe_status()
    assert st["kernel"] == "9.9.9-made-up"
    assert st["module_file"] == f"{moddir}/kernel/rxe/rdma_rxe.ko.zst"  # the first found
    modinfo.write_text("#!/bin/sh\necho /made/up/rdma_rxe.ko.xz\n")  # modinfo's answer wins over the walk
    assert doctor.rxe_status()["module_file"] == "/made/up/rdma_rxe.ko.xz"


@pytest.fixture
def debian_dist(tmp_path, monkeypatch):
    """A made-up Debian dist-packages folder as doctor's fallback, no pyverbs importable
    before it (sys.path and sys.modules restored after)."""
    import sys
    # every folder a pyverbs imports from left out (the VM's is not Debian's dist-packages)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != doctor.DEBIAN_DIST
                                      and not os.path.exists(os.path.join(p or ".", "pyverbs"))])
    for name in [m for m in sys.modules if m == "pyverbs" or m.startswith("pyverbs.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(doctor, "DEBIAN_DIST", str(tmp_path))

    def with_pyverbs(device_source):
        (tmp_path / "pyverbs").mkdir()
        (tmp_path / "pyverbs" / "__init__.py").write_text("")
        (tmp_path / "pyverbs" / "device.py").write_text(device_source)

    return tmp_path, with_pyverbs


def test_pyverbs_from_debians_dist_packages_when_pip_has_none(debian_dist):
    import sys
    folder, with_pyverbs = debian_dist
    assert doctor.import_pyverbs() == (None, "pyverbs is not installed (apt-get install python3-pyverbs)")
    with_pyverbs("MADE_UP = True\n")
    dev, why = doctor.import_pyverbs()
    assert why is None and dev.MADE_UP and sys.path[-1] == str(folder)  # last: shadows nothing


def test_pyverbs_in_debians_dist_packages_that_does_not_import_says_why(debian_dist):
    folder, with_pyverbs = debian_dist
    with_pyverbs("raise ImportError('libibverbs.so.1: cannot open shared object file')\n")
    assert doctor.import_pyverbs() == (
        None, f"pyverbs in {folder} does not import: libibverbs.so.1: cannot open shared object file")


def test_runnable_tasks_are_the_fourth_field_of_loadavg(monkeypatch):
    # /proc/loadavg: three load averages, runnable/total tasks, the last pid
    real_open = open

    def fake_open(path, *args, **kwargs):
        if path == "/proc/loadavg":
            return io.StringIO("0.52 0.58 0.59 3/467 12345\n")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(doctor, "open", fake_open, raising=False)
    assert doctor.scheduler()["runnable_now"] == 3


@pytest.mark.parametrize("loadavg", [None, "", "0.52 0.58 0.59 x/467 12345\n"],
                         ids=["unreadable", "empty", "not-a-count"])
def test_runnable_tasks_are_unknown_when_loadavg_says_nothing_usable(monkeypatch, loadavg):
    real_open = open

    def fake_open(path, *args, **kwargs):
        if path == "/proc/loadavg":
            if loadavg is None:
                raise PermissionError(13, "Permission denied", path)
            return io.StringIO(loadavg)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(doctor, "open", fake_open, raising=False)
    assert doctor.scheduler()["runnable_now"] is None


SYSFS_DEVICES = [{"name": "sysfs0", "ports": [_port(state="DOWN")]}]


@pytest.fixture
def pyverbs_imports(tmp_path, monkeypatch):
    """Kernel RDMA support (a made-up sysfs folder) and a pyverbs that imports; sysfs lists
    SYSFS_DEVICES; the host's vLLM leftovers are not the test's."""
    monkeypatch.setattr(doctor, "SYSFS", str(tmp_path))
    monkeypatch.setattr(doctor, "import_pyverbs", lambda: (object(), None))
    monkeypatch.setattr(doctor, "devices_from_sysfs", lambda: copy.deepcopy(SYSFS_DEVICES))
    monkeypatch.setattr(doctor.vllm_leftovers, "survey", lambda: [])


def test_the_devices_come_from_pyverbs_when_it_imports(pyverbs_imports, monkeypatch):
    from_pyverbs = [{"name": "rxe0", "ports": [_port()]}]
    monkeypatch.setattr(doctor, "devices_from_pyverbs", lambda dev: from_pyverbs)
    rep = doctor.collect()
    assert (rep["source"], rep["devices"], rep["pyverbs"], rep["notes"]) == ("pyverbs", from_pyverbs, "ok", [])
    assert rep["transports"]["verbs"]["active_ports"] == [("rxe0", 1)]


def test_a_pyverbs_that_fails_falls_back_to_sysfs_and_says_why(pyverbs_imports, monkeypatch):
    def fails(dev):
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(doctor, "devices_from_pyverbs", fails)
    rep = doctor.collect()
    assert (rep["source"], rep["devices"]) == ("sysfs", SYSFS_DEVICES)
    assert rep["notes"] == ["pyverbs failed ([Errno 95] Operation not supported); read sysfs instead"]


def test_the_report_carries_the_waiting_policy_of_the_library(pyverbs_imports, monkeypatch):
    """collect() puts rdmaq.policy's decision for this machine in the report, per queue size,
    with its reason and the CPU quota it saw (a quota: no free spin on any machine)."""
    monkeypatch.setattr(doctor, "devices_from_pyverbs", lambda dev: [])
    monkeypatch.setattr(policy, "cpu_quota", lambda: 1.5)
    monkeypatch.delenv("RDMAQ_POLICY", raising=False)
    rep = doctor.collect()
    wp = rep["waiting_policy"]
    assert wp["cpu_quota"] == 1.5
    for n in doctor.POLICY_READERS:
        d = policy.for_reader(None, n)
        assert wp["by_readers"][str(n)] == {"policy": "auto", "free_spin_us": 0, "reason": d.reason,
                                            "slice_us": d.slice_us}
        assert "under a CPU quota of 1.5 CPUs" in d.reason


def test_a_bad_policy_setting_is_advice_not_a_crash(pyverbs_imports, monkeypatch):
    monkeypatch.setattr(doctor, "devices_from_pyverbs", lambda dev: [])
    monkeypatch.setenv("RDMAQ_POLICY", "fast")
    rep = doctor.collect()
    assert any("RDMAQ_POLICY must be one of auto, efficient, got 'fast'" in a for a in rep["advice"])


def test_the_json_report_is_indented_by_two_spaces(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "collect", lambda: {"transports": {"shm": {"usable": True}}})
    assert doctor.main(["--json"]) == 0
    assert capsys.readouterr().out == '{\n  "transports": {\n    "shm": {\n      "usable": true\n    }\n  }\n}\n'


def test_the_report_prints_each_decision_s_reason():
    rep = report(advice=[])
    rep["waiting_policy"] = {"cpus": 2, "cpu_quota": None, "schedstat": True, "by_readers": {
        "1": {"policy": "auto", "free_spin_us": 20000, "reason": "policy auto, 1 ...", "slice_us": 300},
        "8": {"policy": "auto", "free_spin_us": 0, "reason": "policy auto, 8 ...", "slice_us": 100}}}
    lines = doctor.render(rep).splitlines()
    assert "  waiting, 1 reader: policy auto, 1 ..." in lines
    assert "  waiting, 8 readers: policy auto, 8 ..." in lines
    assert "  slice while blocked, 1 reader: 300 µs" in lines
    assert "  slice while blocked, 8 readers: 100 µs" in lines
    assert not any("RDMAQ_POLICY" in a for a in doctor.advice(rep))


def test_a_cgroup_quota_is_read_from_cpu_max(monkeypatch):
    files = {"/proc/self/cgroup": "0::/serve/x\n", "/sys/fs/cgroup/serve/x/cpu.max": "250000 100000\n"}
    monkeypatch.setattr(doctor.sysfs, "read", lambda path: files.get(path, "").strip() or None)
    real_open = open

    def fake_open(path, *a, **k):
        if path in files:
            import io
            return io.StringIO(files[path])
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", fake_open)
    assert policy.cpu_quota() == 2.5
    files["/sys/fs/cgroup/serve/x/cpu.max"] = "max 100000\n"
    assert policy.cpu_quota() is None


def test_a_kernel_option_is_read_from_the_kernel_s_config(monkeypatch):
    """_kernel_config gives an option's value as /proc/config.gz writes it, None when absent."""
    import gzip
    import io
    config = '# comment\nCONFIG_HZ=250\nCONFIG_X=y\nCONFIG_CMDLINE="console=ttyS0 quiet"\n'
    monkeypatch.setattr(gzip, "open", lambda path, mode: io.StringIO(config))
    assert doctor._kernel_config("HZ") == "250"
    assert doctor._kernel_config("X") == "y"
    assert doctor._kernel_config("CMDLINE") == '"console=ttyS0 quiet"'  # a value may hold "="
    assert doctor._kernel_config("PREEMPT") is None
