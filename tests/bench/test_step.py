"""`rdmaq bench step`: the figures from hand-made step records, a short CPU run, bad arguments.

No timing is asserted: the run must account for every step exactly once (each step's last
reader is one rank), and every figure must be there, finite and non-negative.
"""
import importlib.util
import json
import math
import os
import subprocess
import sys
import types
from array import array
from pathlib import Path

import pytest

from rdmaq.bench import cli
from rdmaq.bench.step import report as step_report

PER_RANK_KEYS = {"rank", "bcast_p50_us", "bcast_p99_us", "last_count", "last_bcast_p50_us",
                 "last_bcast_p99_us", "wait_share", "work_p50_us",
                 "barrier_wait_p50_us", "cpu_s_per_1000_steps"}
FIGURE_KEYS = {"steps", "step_time", "throughput_steps_per_s", "bcast_slowest", "bcast_all", "spread",
               "bcast_share", "spread_share", "negative_delays", "per_rank", "cpu_s_per_1000_steps"}


def _b(values):
    return array("q", values).tobytes()


def _records(send, reply, deqs):
    engine = {"sent": len(send), "t_send": _b(send), "t_reply": _b(reply), "cpu_ns": 2_000, "errors": []}
    ranks = [{"t_deq": _b(d), "t_worked": _b([t + 10 for t in d]), "t_met": _b([t + 20 for t in d]),
              "cpu_ns": 1_000, "errors": []} for d in deqs]
    return engine, ranks


def test_the_slowest_reader_of_each_step_is_charged_the_spread():
    # step 0: sent at 0, rank 0 has it at 100, rank 1 at 300 (last, spread 200), reply at 2000
    # step 1: sent at 1000, rank 0 at 1500 (last, spread 400), rank 1 at 1100, reply at 4000
    engine, ranks = _records([0, 1000], [2000, 4000], [[100, 1500], [300, 1100]])
    fig, _ = step_report.subrun_figures(engine, ranks)
    assert fig["errors"] == [] and fig["steps"] == 2
    assert [r["last_count"] for r in fig["per_rank"]] == [1, 1]
    # rank 0 was last on step 1 (500 ns late), rank 1 on step 0 (300 ns)
    assert [r["last_bcast_p50_us"] for r in fig["per_rank"]] == [0.5, 0.3]
    assert fig["bcast_slowest"]["min_us"] == 0.3 and fig["bcast_slowest"]["max_us"] == 0.5
    # step times 2000 + 3000 ns; the first rank waited 400 ns for rank 0 and 200 ns for rank 1
    assert fig["per_rank"][0]["wait_share"] == pytest.approx(400 / 5000)
    assert fig["per_rank"][1]["wait_share"] == pytest.approx(200 / 5000)
    assert fig["spread_share"] == pytest.approx(600 / 5000)
    assert fig["bcast_share"] == pytest.approx((300 + 500) / 5000)
    assert fig["throughput_steps_per_s"] == pytest.approx(2 / 4000e-9)
    # 2000 ns of CPU over 2 steps: 1e-3 s per 1000 steps
    assert fig["cpu_s_per_1000_steps"]["engine"] == pytest.approx(1e-3)
    assert fig["cpu_s_per_1000_steps"]["ranks_total"] == pytest.approx(1e-3)


def test_ranks_that_missed_steps_are_reported():
    engine, ranks = _records([0, 1000], [2000, 4000], [[100, 1500], [300]])
    fig, _ = step_report.subrun_figures(engine, ranks)
    assert any("different numbers of steps" in e for e in fig["errors"])
    assert fig["steps"] == 1


def test_runs_are_pooled_step_by_step():
    a = step_report.subrun_figures(*_records([0], [2000], [[100], [300]]))[1]
    b = step_report.subrun_figures(*_records([5000], [6000], [[5600], [5100]]))[1]
    fig = step_report.figures(step_report.pool([a, b]))
    assert fig["steps"] == 2 and [r["last_count"] for r in fig["per_rank"]] == [1, 1]
    # each run's span counts, not the gap between them
    assert fig["throughput_steps_per_s"] == pytest.approx(2 / 3000e-9)


def test_ratios_are_against_the_better_vllm_queue():
    def group(queue, p99):
        return {"tp": 4, "setting": "idle", "queue": queue, "figures": {
            "steps": 10, "step_time": {"p50_us": p99 / 2, "p99_us": p99},
            "bcast_slowest": {"p50_us": 1.0, "p99_us": p99 / 10}, "throughput_steps_per_s": 1e6 / p99,
            "cpu_s_per_1000_steps": {"ranks_total": 1.0}}}
    rows = step_report.compute_ratios([group("rdmaq-shm", 100.0), group("vllm", 400.0),
                                       group("vllm-spinloop", 200.0)])
    assert len(rows) == 1 and rows[0]["queue"] == "rdmaq-shm"
    assert rows[0]["step_p99"] == pytest.approx(0.5) and rows[0]["bcast_slowest_p99"] == pytest.approx(0.5)
    assert rows[0]["time_per_step"] == pytest.approx(0.5) and rows[0]["cpu_ranks"] == pytest.approx(1.0)


def _finite(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            _finite(v)
    elif isinstance(obj, list):
        for v in obj:
            _finite(v)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        assert math.isfinite(obj) and obj >= 0, obj


def _check_figures(fig, steps, tp):
    assert FIGURE_KEYS <= set(fig), FIGURE_KEYS - set(fig)
    assert fig["steps"] == steps and fig["negative_delays"] == 0
    assert fig["step_time"]["n"] == steps and fig["bcast_slowest"]["n"] == steps
    assert fig["bcast_all"]["n"] == steps * tp
    assert len(fig["per_rank"]) == tp
    for r in fig["per_rank"]:
        assert set(r) == PER_RANK_KEYS
    assert sum(r["last_count"] for r in fig["per_rank"]) == steps
    assert len(fig["cpu_s_per_1000_steps"]["ranks"]) == tp
    _finite(fig)


def test_cpu_run_accounts_for_every_step(tmp_path, capsys):
    out = tmp_path / "s.json"
    md = tmp_path / "s.md"
    rc = cli.main(["step", "--tp", "2", "--queues", "rdmaq-shm", "--device", "cpu", "--steps", "30",
                   "--warmup", "5", "--runs", "2", "--settings", "idle,hogs", "--hogs", "1",
                   "--work-us", "100", "--json", str(out), "--markdown", str(md)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["schema"] == "rdmaq-bench-step/1"
    assert data["config"]["tp"] == [2] and data["config"]["device"] == "cpu"
    for k in ("cpu_model", "logical_cpus", "loadavg_start", "loadavg_end"):
        assert k in data["machine"], k
    cell, = data["cells"]
    assert cell["error"] is None, cell["error"]
    assert [(s["setting"], s["run"]) for s in cell["subruns"]] == [
        ("idle", 1), ("hogs", 1), ("idle", 2), ("hogs", 2)]
    for s in cell["subruns"]:
        assert s["figures"]["errors"] == []
        assert s["figures"]["engine_sent"] == 35
        _check_figures(s["figures"], 30, 2)
    assert [(g["setting"], g["runs"]) for g in data["groups"]] == [("idle", 2), ("hogs", 2)]
    for g in data["groups"]:
        _check_figures(g["figures"], 60, 2)
    table = capsys.readouterr().out
    assert "rank 1: bcast p50" in table and "rdmaq-shm" in table
    assert "| 2 | hogs | rdmaq-shm | 60 |" in md.read_text()


def test_a_capped_subrun_still_accounts_for_every_step(tmp_path):
    """The engine stops at the time cap: every rank has done exactly the steps it sent (all of
    them on one CPU, --server-cpus 1)."""
    out = tmp_path / "s.json"
    rc = cli.main(["step", "--tp", "2", "--queues", "rdmaq-shm", "--steps", "100000000", "--warmup", "0",
                   "--runs", "1", "--settings", "idle", "--work-us", "0", "--time-cap", "0.2",
                   "--server-cpus", "1", "--json", str(out)])
    assert rc == 0
    cell, = json.loads(out.read_text())["cells"]
    first = min(os.sched_getaffinity(0))
    assert cell["engine_cpus"] == [first]  # --server-cpus 1: the first allowed CPU alone
    sub, = cell["subruns"]
    fig = sub["figures"]
    assert fig["errors"] == [] and 0 < fig["steps"] < 100000000
    _check_figures(fig, fig["steps"], 2)


@pytest.mark.parametrize("argv, message", [
    (["--tp", "0"], "bad tp list"),
    (["--tp", "x"], "bad tp list"),
    (["--queues", "tcp"], "unknown queue"),
    (["--settings", "noisy"], "unknown setting"),
    (["--steps", "0"], "--steps must be >= 1"),
    (["--runs", "0"], "--runs must be >= 1"),
    (["--server-cpus", "100000"], "--server-cpus must be"),
    (["--hogs", "-1"], "--hogs must be >= 0"),
    (["--work-us", "-5"], "--work-us"),
    (["--time-cap", "0"], "--time-cap"),
    (["--msg-bytes", "12Q"], "--msg-bytes"),
    (["--device", "gpu"], "invalid choice"),
    (["--json", "/no/such/dir/x.json"], "does not exist"),
])
def test_bad_arguments_exit_2_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["step", "--device", "cpu"] + argv if "--device" not in argv else ["step"] + argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_cuda_without_a_gpu_says_so_in_one_line(capsys):
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    assert cli.main(["step", "--device", "cuda", "--tp", "2", "--queues", "rdmaq-shm"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rdmaq bench step: --device cuda") and err.count("\n") == 1, err


def test_the_deadline_is_shared_by_every_subrun_left():
    from rdmaq.bench.step.main import HOG_SETTLE_S, SUBRUN_OVERHEAD_S, Budget

    b = Budget(420.0, 30.0, setup_guess_s=30.0)
    # 36 sub-runs left over 6 cells, 5 cells still to start: (420 - 5 x 30) / 36 each
    assert b.cap(36, 5) == pytest.approx(270 / 36 - HOG_SETTLE_S - SUBRUN_OVERHEAD_S, rel=1e-3)
    assert b.cap(1, 0) == 30.0          # never more than --time-cap
    assert b.cap(1000, 0) is None       # too little left for one
    assert Budget(None, 30.0, 30.0).cap(1000, 100) == 30.0


def test_subruns_that_cannot_fit_the_deadline_are_left_out(tmp_path, capsys):
    out = tmp_path / "s.json"
    rc = cli.main(["step", "--tp", "2", "--queues", "rdmaq-shm", "--settings", "idle", "--runs", "2",
                   "--deadline", "1", "--json", str(out)])
    assert rc == 1
    data = json.loads(out.read_text())
    assert data["skipped_subruns"] == 2 and data["groups"] == [] and data["cells"][0]["error"] is None
    err = capsys.readouterr().err
    assert "2 sub-run(s) left out" in err and "nothing was measured" in err


FAKE_TORCH = Path(__file__).resolve().parent / "faketorch"


class _VirtualClock:
    """time for step_proc: a matmul takes 30 µs and a synchronize 20 µs of this clock."""

    def __init__(self):
        self.ns = 0

    def monotonic_ns(self):
        return self.ns


def test_gpu_work_is_calibrated_without_the_synchronize(monkeypatch):
    from rdmaq.bench.step import proc as step_proc

    clock = _VirtualClock()
    fake = types.ModuleType("torch")
    fake.bfloat16 = "bfloat16"
    fake.Generator = lambda device: types.SimpleNamespace(manual_seed=lambda s: None)
    fake.randn = lambda *a, **k: object()
    fake.empty_like = lambda x: x

    def mm(a, b, out=None):
        clock.ns += 30_000

    def synchronize():
        clock.ns += 20_000
    fake.mm = mm
    fake.cuda = types.SimpleNamespace(init=lambda: None, synchronize=synchronize,
                                      get_device_name=lambda: "virtual")
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(step_proc, "time", clock)
    work = step_proc.GpuWork()
    cal = work.calibrate(300_000)
    # (300 µs - the 20 µs synchronize) / 30 µs per matmul = 9.33 -> 9 matmuls, 290 µs
    assert cal["matmuls"] == work.count == 9
    assert cal["matmul_us"] == pytest.approx(30.0) and cal["work_us"] == pytest.approx(290.0)


def test_cuda_run_calibrates_once_and_runs_every_step(tmp_path):
    """--device cuda end to end against a stand-in torch (tests/bench/faketorch) whose matmul is
    a timed spin: rank 0 calibrates, every rank runs that many matmuls a step."""
    out = tmp_path / "g.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(FAKE_TORCH), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "rdmaq.cli", "bench", "step", "--device", "cuda", "--tp", "2",
                        "--queues", "rdmaq-shm", "--steps", "20", "--warmup", "2", "--runs", "1",
                        "--settings", "idle", "--work-us", "200", "--json", str(out)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    cal = data["config"]["calibration"]
    assert cal["gpu"] == "fake GPU" and cal["matmuls"] >= 1 and cal["matmul_size"] == 2048
    cell, = data["cells"]
    assert cell["error"] is None and cell["calibration"] == cal
    fig = cell["subruns"][0]["figures"]
    assert fig["errors"] == []
    _check_figures(fig, 20, 2)


def _vllm_installed():
    """vLLM itself, not tests/vllm seen as a namespace package from the tests directory."""
    spec = importlib.util.find_spec("vllm")
    return spec is not None and spec.origin is not None


@pytest.mark.skipif(not _vllm_installed(),
                    reason="missing dependency: vllm (tests/bench/ci.sh installs it --no-deps)")
@pytest.mark.timeout(240)  # each cell imports vLLM and torch in three processes
def test_cpu_run_with_vllms_queues(tmp_path):
    """vLLM's MessageQueue both ways: the step broadcast (2 readers) and rank 0's reply (1)."""
    out = tmp_path / "v.json"
    rc = cli.main(["step", "--tp", "2", "--queues", "rdmaq-shm,vllm", "--steps", "20", "--warmup", "2",
                   "--runs", "1", "--settings", "idle", "--work-us", "50", "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["skipped"] == {}
    for cell in data["cells"]:
        assert cell["error"] is None, cell["error"]
        _check_figures(cell["subruns"][0]["figures"], 20, 2)
    ratio, = data["ratios"]
    assert ratio["queue"] == "rdmaq-shm" and ratio["step_p50"] > 0
