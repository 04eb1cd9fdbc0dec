"""A failing verbs call is an error, whatever way the provider reports it.

rdma-core documents a positive errno for most calls and NULL with errno for
constructors; providers may return a negative errno instead, or NULL
without setting errno.  verbs_fault.c (LD_PRELOAD) makes ibv_modify_qp and
ibv_reg_mr fail those ways; the queue must raise an error that says which
call failed, never carry on as if it had worked.
"""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from vhelpers import HERE, build_c

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc to build verbs_fault.c")

SCRIPT = textwrap.dedent("""
    import rdmaq
    try:
        with rdmaq.Writer(1, transport="verbs", slot_bytes=1024, slots=4) as w:
            with rdmaq.Reader(w.handle, 0) as r:  # this process: the loopback QP pool
                w.put(b"x", timeout=30)
                print("DELIVERED", bytes(r.get(timeout=30)))
    except Exception as e:
        print("RAISED", type(e).__name__, e)
""")


def _run(fault):
    shim = build_c("verbs_fault", [os.path.join(HERE, "verbs_fault.c")], ("-O1",),
                   ("-Wl,--no-as-needed", "-libverbs", "-ldl"), shared=True)
    env = dict(os.environ, LD_PRELOAD=shim, RDMAQ_VERBS_FAULT=fault)
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"the process died (status {r.returncode}): {r.stderr[-3000:]}"
    return r.stdout.strip().splitlines()[-1]


def test_negative_errno_from_modify_qp_is_an_error():
    out = _run("modify_qp_rtr")
    assert out.startswith("RAISED ValueError"), out  # -EINVAL
    assert "ibv_modify_qp(RTR" in out and "Invalid argument" in out, out


def test_reg_mr_null_without_errno_is_an_error():
    out = _run("reg_mr_noerrno")
    assert out.startswith("RAISED Error"), out  # EIO: a runtime fault, rdmaq.Error
    assert "ibv_reg_mr (staging ring" in out and "Input/output error" in out, out
