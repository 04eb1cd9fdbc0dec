"""`rdmaq doctor` and `rdmaq softroce` as commands: clear answers with and without RDMA.
The core tier runs them on the host (no RDMA), the verbs tier in the SoftRoCE VM."""
import json
import os

import pytest

from rdmaq import doctor, softroce


def _report(capsys):
    rc = doctor.main(["--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_doctor_reports_this_machine(capsys):
    rc, rep = _report(capsys)
    assert rc == 0  # shm works everywhere we test
    assert rep["transports"]["shm"]["usable"]
    if not os.path.isdir("/sys/class/infiniband"):
        # No RDMA in this kernel: say so, and say what to do.
        assert rep["kernel_rdma"] is False and rep["devices"] == []
        assert rep["transports"]["verbs"]["usable"] is False
        assert any("no RDMA support" in a and "tests/rxe/vm-run" in a for a in rep["advice"])
        assert doctor.main([]) == 0
        text = capsys.readouterr().out
        assert "Kernel RDMA support: NO" in text and "verbs: NOT usable" in text
    else:
        names = [d["name"] for d in rep["devices"]]
        assert names, rep
        for d in rep["devices"]:
            for p in d["ports"]:
                assert p["state"] and p["link_layer"] in ("Ethernet", "InfiniBand")


@pytest.mark.skipif(not os.environ.get("RDMAQ_VM"), reason="runs inside the SoftRoCE VM")
def test_doctor_in_the_vm_lists_rxe_with_roce_v2_gids(capsys):
    rc, rep = _report(capsys)
    assert rc == 0
    assert rep["source"] == "pyverbs"  # vm-run makes Debian's pyverbs importable
    by_name = {d["name"]: d for d in rep["devices"]}
    dev0 = os.environ.get("RDMAQ_VM_DEV0", "rxe0")
    port = by_name[dev0]["ports"][0]
    assert port["state"] == "ACTIVE" and port["link_layer"] == "Ethernet"
    ip = os.environ.get("RDMAQ_VM_IP0", "192.0.2.1")
    want = "0" * 20 + "ffff" + "".join(f"{int(x):02x}" for x in ip.split("."))
    assert any(g["type"] == "RoCE v2" and g["gid"].replace(":", "").lower() == want
               for g in port["gids"]), port["gids"]
    assert rep["rxe"]["loaded"]
    assert rep["transports"]["verbs"]["usable"]
    assert rep["memlock"]["ok"]


def test_doctor_sysfs_fallback_matches_shape():
    devices = doctor.devices_from_sysfs()
    assert isinstance(devices, list)
    if not os.path.isdir("/sys/class/infiniband"):
        assert devices == []  # no RDMA in this kernel: nothing, and no error
        return
    # with RDMA (the VM: rxe0, rxe1) there is something to check the shape of
    assert devices, "sysfs lists RDMA devices, the fallback found none"
    for d in devices:
        assert {"name", "ports"} <= set(d) and d["name"]
        assert d["ports"], d


def test_softroce_refuses_clearly(capsys):
    assert softroce.main(["up", "--netdev", "no-such-if0"]) == 1
    assert "no network interface 'no-such-if0'" in capsys.readouterr().err
    assert softroce.main(["down", "--name", "no-such-rxe"]) == 1
    assert "no SoftRoCE device 'no-such-rxe'" in capsys.readouterr().err
    if not os.path.isdir("/sys/class/infiniband") and os.path.isdir("/sys/class/net/lo"):
        assert softroce.main(["up", "--netdev", "lo"]) == 1
        assert "cannot run here" in capsys.readouterr().err


@pytest.fixture
def spare_netdev():
    """A veth pair of its own (up), removed afterwards: rxe needs an Ethernet netdev."""
    import subprocess

    name = "rqsr0"
    subprocess.run(["ip", "link", "del", name], capture_output=True)
    subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", "rqsr1"],
                   check=True, timeout=30)
    try:
        for dev in (name, "rqsr1"):
            subprocess.run(["ip", "link", "set", dev, "up"], check=True, timeout=30)
        yield name
    finally:
        subprocess.run(["ip", "link", "del", name], capture_output=True, timeout=30)


@pytest.mark.skipif(not os.environ.get("RDMAQ_VM"), reason="runs inside the SoftRoCE VM (root, rdma_rxe)")
def test_softroce_up_then_down_in_the_vm(spare_netdev, capsys):
    name = "rxesr"
    try:
        assert softroce.main(["up", "--netdev", spare_netdev, "--name", name, "--timeout", "60"]) == 0
        out = capsys.readouterr().out
        assert f"{name}: SoftRoCE on {spare_netdev}, port 1 ACTIVE" in out
        ports = {d["name"]: d["ports"] for d in doctor.devices_from_sysfs()}
        assert ports[name][0]["state"] == "ACTIVE", ports
        # up again on the same netdev is a no-op, not an error
        assert softroce.main(["up", "--netdev", spare_netdev, "--name", name]) == 0
        assert "already exists" in capsys.readouterr().out
        assert softroce.main(["status"]) == 0
        assert f"{name} on {spare_netdev}" in capsys.readouterr().out
    finally:
        rc = softroce.main(["down", "--name", name])
    assert rc == 0 and f"{name} removed" in capsys.readouterr().out
    assert name not in {d["name"] for d in doctor.devices_from_sysfs()}
