"""`rdmaq doctor` and `rdmaq softroce`: clear answers with and without RDMA."""
import json
import os

import pytest

from rdmaq import doctor, softroce

pytestmark = pytest.mark.no_device


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
    for d in doctor.devices_from_sysfs():
        assert {"name", "ports"} <= set(d)


def test_softroce_refuses_clearly(capsys):
    assert softroce.main(["up", "--netdev", "no-such-if0"]) == 1
    assert "no network interface 'no-such-if0'" in capsys.readouterr().err
    assert softroce.main(["down", "--name", "no-such-rxe"]) == 1
    assert "no SoftRoCE device 'no-such-rxe'" in capsys.readouterr().err
    if not os.path.isdir("/sys/class/infiniband") and os.path.isdir("/sys/class/net/lo"):
        assert softroce.main(["up", "--netdev", "lo"]) == 1
        assert "cannot run here" in capsys.readouterr().err
