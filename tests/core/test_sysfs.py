"""rdmaq.sysfs reads /sys/class/infiniband: here a tree laid out as the kernel lays
it out (an rxe device with an ACTIVE port, and a second, DOWN, without GIDs)."""
import dataclasses

import pytest

from rdmaq import sysfs

ROCE_V2_GID = "0000:0000:0000:0000:0000:ffff:c000:0201"


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _tree(root, state0="4: ACTIVE"):
    p = root / "rxe0" / "ports" / "1"
    _write(root / "rxe0" / "node_type", "1: CA")
    _write(p / "state", state0)
    _write(p / "phys_state", "5: LinkUp")
    _write(p / "link_layer", "Ethernet")
    _write(p / "gids" / "0", "fe80:0000:0000:0000:7482:6dff:fe7a:e337")
    _write(p / "gids" / "1", ROCE_V2_GID)
    _write(p / "gids" / "2", "0000:0000:0000:0000:0000:0000:0000:0000")  # empty entry
    _write(p / "gid_attrs" / "types" / "1", "RoCE v2")
    _write(p / "gid_attrs" / "ndevs" / "1", "veth0")
    _write(root / "mlx0" / "ports" / "1" / "state", "1: DOWN")
    return root


def test_no_rdma_in_the_kernel_is_no_device_and_no_error(tmp_path):
    missing = str(tmp_path / "no-such-dir")
    assert sysfs.device_names(missing) == [] and sysfs.devices(missing) == []
    assert not sysfs.active_port_exists(missing)
    assert sysfs.port_state("rxe0", 1, missing) is None


def test_devices_ports_and_gids(tmp_path):
    root = str(_tree(tmp_path))
    assert sysfs.device_names(root) == ["mlx0", "rxe0"]
    mlx0, rxe0 = sysfs.devices(root)
    assert (mlx0.name, mlx0.node_type) == ("mlx0", None)
    assert [(p.port, p.state, p.phys_state, p.link_layer, p.gids) for p in mlx0.ports] == \
        [(1, "DOWN", "?", "?", [])]
    port, = rxe0.ports
    assert (rxe0.node_type, port.state, port.phys_state, port.link_layer) == \
        ("1: CA", "ACTIVE", "LinkUp", "Ethernet")
    # the all-zero entry is left out; types and netdevs where sysfs has them
    assert port.gids == [sysfs.Gid(0, "fe80:0000:0000:0000:7482:6dff:fe7a:e337", None, None),
                         sysfs.Gid(1, ROCE_V2_GID, "RoCE v2", "veth0")]
    assert sysfs.gids("rxe0", 1, root) == port.gids


def test_an_active_port_makes_verbs_available(tmp_path):
    root = str(_tree(tmp_path))
    assert sysfs.active_port_exists(root)
    assert sysfs.port_state("rxe0", 1, root) == "ACTIVE"
    _tree(tmp_path, state0="1: DOWN")
    assert not sysfs.active_port_exists(root)


def test_a_device_read_is_a_snapshot_that_cannot_be_changed(tmp_path):
    dev = sysfs.devices(str(_tree(tmp_path)))[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        dev.name = "rxe1"
