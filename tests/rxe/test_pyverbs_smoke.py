"""pyverbs works against the SoftRoCE devices: open, query, list GIDs, register memory.

Run inside the VM (a script, to skip pytest's start-up under emulation):
    tests/rxe/vm-run -- python tests/rxe/test_pyverbs_smoke.py
or as a pytest test (skipped where there is no rxe device, unless RDMAQ_VM=1,
i.e. inside the VM, where a missing device is a failure).
"""

import ipaddress
import os
import sys

try:
    import pytest
except ImportError:  # the script form needs no pytest
    pytest = None

DEV0 = os.environ.get("RDMAQ_VM_DEV0", "rxe0")
IP0 = os.environ.get("RDMAQ_VM_IP0", "192.0.2.1")


def _roce_v2_ipv4_index(entries, ip):
    """GID index of the RoCEv2 GID ::ffff:ip, or None."""
    from pyverbs import enums

    want = ipaddress.IPv6Address("::ffff:" + ip)
    for e in entries:
        if e.gid_type == enums.IBV_GID_TYPE_ROCE_V2 and ipaddress.IPv6Address(e.gid_str()) == want:
            return e.gid_index
    return None


def check(dev=DEV0, ip=IP0, out=print):
    """Open `dev`, check port 1 and its GIDs, register an MR. Raises on failure."""
    import pyverbs.device as d
    from pyverbs import enums
    from pyverbs.mr import MR
    from pyverbs.pd import PD

    names = [x.name.decode() for x in d.get_device_list()]
    out(f"devices: {names}")
    if dev not in names:
        raise AssertionError(f"{dev} not in the device list {names}")
    with d.Context(name=dev) as ctx:
        attr = ctx.query_device()
        out(f"{dev}: max_qp={attr.max_qp} max_mr_size={attr.max_mr_size} max_sge={attr.max_sge}")
        port = ctx.query_port(1)
        out(f"{dev} port 1: state={port.state} active_mtu={port.active_mtu} gid_tbl_len={port.gid_tbl_len}")
        if port.state != enums.IBV_PORT_ACTIVE:
            raise AssertionError(f"{dev} port 1 is not ACTIVE (state {port.state})")
        entries = ctx.query_gid_table(port.gid_tbl_len)
        for e in entries:
            out(f"  gid[{e.gid_index}] {e.gid_str()} type={d.translate_gid_type(e.gid_type)} ifindex={e.ndev_ifindex}")
        idx = _roce_v2_ipv4_index(entries, ip)
        if idx is None:
            raise AssertionError(f"{dev} has no RoCEv2 GID for {ip}")
        if str(ctx.query_gid(1, idx)) != entries[[e.gid_index for e in entries].index(idx)].gid_str():
            raise AssertionError("query_gid and query_gid_table disagree")
        out(f"{dev}: RoCEv2 GID for {ip} at index {idx}")
        # Registering memory pins pages: without CAP_IPC_LOCK it fails with
        # ENOMEM under a small RLIMIT_MEMLOCK, the usual container mistake.
        with PD(ctx) as pd, MR(pd, 1 << 20, enums.IBV_ACCESS_LOCAL_WRITE | enums.IBV_ACCESS_REMOTE_WRITE) as mr:
            out(f"{dev}: registered 1 MiB MR lkey={mr.lkey:#x} rkey={mr.rkey:#x}")
    return idx


def _have_device():
    try:
        import pyverbs.device as d

        return bool(d.get_device_list())
    except Exception:
        return False


def test_pyverbs_smoke():
    if not _have_device() and os.environ.get("RDMAQ_VM") != "1":
        pytest.skip("no RDMA device (run inside tests/rxe/vm-run)")
    check(out=lambda s: None)


if __name__ == "__main__":
    try:
        check()
    except Exception as e:  # report, don't dump a traceback for expected failures
        print(f"pyverbs smoke: FAIL: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    print("pyverbs smoke: ok")
