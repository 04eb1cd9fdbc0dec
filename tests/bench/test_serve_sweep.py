"""`rdmaq bench serve` for GPUs, without a GPU: the three queues, the run plan cut into parts
(deadline, servers kept, resume), the server arguments, the persistent client, the spin-loop
check, the per-step queue share and the report's best-of-vLLM ratio. The whole harness runs
against a stand-in `vllm` CLI (tests/bench/fakevllm): an HTTP server and a client that send
real requests, so starting, reusing and stopping servers across harness processes is
exercised as on the GPU machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from rdmaq.bench.serve import launch as serve_launch
from rdmaq.bench.serve import main as serve
from rdmaq.bench.serve import measure as serve_measure
from rdmaq.bench.serve import options as serve_options
from rdmaq.bench.serve import plan as serve_plan
from rdmaq.bench.serve import report as serve_report
from rdmaq.bench.serve import steps as serve_steps
from rdmaq.bench.serve.client import DONE_LINE, BenchClient
from rdmaq.bench.serve.server import ServerError, VllmServer

FAKE = Path(__file__).resolve().parent / "fakevllm"


# ------------------------------------------------------------------ plan
def test_three_queues_rotate_run_by_run_and_setting_by_setting():
    steps = serve_plan.plan(["idle", "hogs"], ["vllm", "vllm-spinloop", "rdmaq-shm"], 2)
    assert [(s.queue, s.run) for s in steps[:6]] == [
        ("vllm", 1), ("vllm-spinloop", 1), ("rdmaq-shm", 1), ("vllm", 2), ("vllm-spinloop", 2), ("rdmaq-shm", 2)]
    assert [s.queue for s in steps[6:9]] == ["vllm-spinloop", "rdmaq-shm", "vllm"]
    assert {s.setting for s in steps[6:]} == {"hogs"} and len(steps) == 12
    assert steps[0].name == "idle-vllm-1"


def test_remaining_skips_successful_runs_and_keeps_failed_ones():
    steps = serve_plan.plan(["idle"], ["vllm", "rdmaq-shm"], 2)
    done = [{"setting": "idle", "queue": "vllm", "run": 1},
            {"setting": "idle", "queue": "rdmaq-shm", "run": 1, "error": "client failed"}]
    left = serve_plan.remaining(steps, done)
    assert [(s.queue, s.run) for s in left] == [("rdmaq-shm", 1), ("vllm", 2), ("rdmaq-shm", 2)]


def test_a_run_fits_only_when_it_ends_before_the_deadline():
    assert serve_plan.run_estimate_s([], 96, 12.0) == pytest.approx(8 + 15)
    assert serve_plan.run_estimate_s([9.5, 12.0, 10.0], 96, 12.0) == 12.0
    assert serve_plan.fits(500, 12, None)
    assert serve_plan.fits(500, 12, 512) and not serve_plan.fits(500.5, 12, 512)


# ------------------------------------------------------------------ servers
def _args(*argv):
    return serve_options.resolve(serve_options.build_parser().parse_args(list(argv)))


def test_a_worker_is_named_by_its_groups_larger_than_one():
    from rdmaq.bench.serve.server import role_of

    assert role_of("VLLM::Worker", False) == "worker"  # TP=1: what the GPU run's worker is
    assert role_of("VLLM::Worker_TP1", False) == "worker_tp1"
    assert role_of("VLLM::Worker_DP0_TP1", False) == "worker_dp0_tp1"
    assert role_of("VLLM::EngineCore_DP0", False) == "engine_core"


def test_device_defaults():
    cpu = _args("--device", "cpu")
    assert (cpu.tp, cpu.queues, cpu.rate, cpu.client) == (2, "vllm,rdmaq-shm", 6.0, "spawn")
    gpu = _args("--device", "cuda", "--concurrency", "24")
    assert gpu.queues == "vllm,vllm-spinloop,rdmaq-shm" and gpu.client == "persistent"
    assert gpu.max_num_seqs == 24 and gpu.model_shape == "llama-3.2-1b"
    assert "tok-schedidle" not in gpu.settings.split(",")


def test_capture_sizes_cover_every_batch_up_to_the_limit():
    assert serve_launch.capture_sizes(16) == [1, 2, 4, 8, 16]
    assert serve_launch.capture_sizes(20) == [1, 2, 4, 8, 16, 20]
    assert serve_launch.capture_sizes(1) == [1]


def _cfg(**kw):
    cfg = {"device": "cuda", "max_num_seqs": 16, "gpu_memory_utilization": 0.2,
           "kv_cache_gib": 4.0, "profile": "graphs", "server_args": []}
    return cfg | kw


def test_gpu_server_arguments_per_profile():
    graphs = serve_launch.server_args(_cfg())
    assert graphs[:2] == ["--distributed-executor-backend", "mp"]
    assert "--kv-cache-memory-bytes" in graphs and str(4 << 30) in graphs
    assert "-cc.cudagraph_mode=FULL_DECODE_ONLY" in graphs and "-cc.mode=0" in graphs
    assert "-cc.cudagraph_capture_sizes=[1,2,4,8,16]" in graphs
    assert "--enforce-eager" in serve_launch.server_args(_cfg(profile="eager"))
    compiled = serve_launch.server_args(_cfg(profile="compile", server_args=["--seed=1"]))
    assert not [a for a in compiled if a.startswith("-cc.")] and compiled[-1] == "--seed=1"
    assert serve_launch.server_args({"device": "cpu"}) == ["--enforce-eager"]


def test_server_environment_per_queue():
    plain = serve_launch.server_env("vllm", "cuda", None, Path("/s"))
    spin = serve_launch.server_env("vllm-spinloop", "cuda", Path("/t"), Path("/s"))
    assert "VLLM_USE_SPINLOOP_EXT" not in plain and spin["VLLM_USE_SPINLOOP_EXT"] == "1"
    assert plain["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    assert spin["RDMAQ_BENCH_STEPTIME_DIR"] == "/t"
    cpu = serve_launch.server_env("rdmaq-shm", "cpu", None, Path("/s"))
    assert "VLLM_CPU_OMP_THREADS_BIND" in cpu and "VLLM_USE_FLASHINFER_SAMPLER" not in cpu
    # a variant: its base queue's server with more environment
    var = serve_launch.server_env("vllm-spinloop@RDMAQ_X=1@VLLM_Y=a=b", "cuda", None, Path("/s"))
    assert var["VLLM_USE_SPINLOOP_EXT"] == "1" and var["RDMAQ_X"] == "1" and var["VLLM_Y"] == "a=b"
    assert serve_launch.serve_command({"model": "m", "tp": 1, "device": "cpu", "max_model_len": 64},
                               "rdmaq-shm@RDMAQ_EXPERIMENT=busy_spin_us=2000")[4] == "rdmaq"  # --distributed-ipc
    # rdmaq's server over the transport its name says, whatever the plugin would choose
    assert cpu["RDMAQ_VLLM_TRANSPORT"] == "shm"
    assert serve_launch.server_env("rdmaq-verbs", "cpu", None, Path("/s"))["RDMAQ_VLLM_TRANSPORT"] == "verbs"
    assert "RDMAQ_VLLM_TRANSPORT" not in plain


@pytest.mark.parametrize("argv, message", [
    (["--queues", "vllm,zmq"], "choose from vllm, vllm-spinloop, rdmaq-shm, rdmaq-verbs"),
    (["--queues", "vllm,rdmaq-shm@BUSY"], "bad queue variant 'BUSY'"),
    (["--queues", "vllm,zmq@X=1"], "unknown queue 'zmq'"),
    (["--deadline", "0"], "--deadline must be > 0"),
    (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization must be in (0, 1]"),
    (["--tp", "0"], "--tp and --max-num-seqs must be >= 1"),
    (["--resume"], "--resume needs --out DIR"),
])
def test_bad_gpu_arguments_are_named(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        serve.main(["--device", "cuda", *argv])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def _pid_file(d: Path, pid: int, title: str, spinloop):
    (d / f"pid-{pid}").write_text(json.dumps({"pid": pid, "title": title, "spinloop": spinloop}))


def test_spinloop_check_fails_when_a_process_spins_in_python(tmp_path):
    srv = VllmServer(vllm="vllm", model=tmp_path, ipc="shm", name="vllm-spinloop", workdir=tmp_path,
                     env={}, max_model_len=64)
    srv.log_path.write_text("INFO starting\n")
    _pid_file(tmp_path, 11, "VLLM::EngineCore", True)
    _pid_file(tmp_path, 12, "VLLM::Worker_TP0", True)
    assert serve_launch.check_spinloop("vllm-spinloop", srv, tmp_path) == {
        "VLLM::EngineCore (11)": True, "VLLM::Worker_TP0 (12)": True}
    _pid_file(tmp_path, 12, "VLLM::Worker_TP0", False)
    with pytest.raises(ServerError, match=r"spin-loop extension is off in \['VLLM::Worker_TP0 \(12\)'\]"):
        serve_launch.check_spinloop("vllm-spinloop", srv, tmp_path)
    # the other queues only record it
    assert serve_launch.check_spinloop("vllm", srv, tmp_path)["VLLM::Worker_TP0 (12)"] is False
    _pid_file(tmp_path, 12, "VLLM::Worker_TP0", True)
    srv.log_path.write_text(f"WARNING {serve_launch.SPINLOOP_FAILED}, disabling VLLM_USE_SPINLOOP_EXT!\n")
    with pytest.raises(ServerError, match="its log says so"):
        serve_launch.check_spinloop("vllm-spinloop", srv, None)


# ------------------------------------------------------------------ step share (async GPU steps)
def _file(pid, title, queues, tags):
    return {"pid": pid, "title": title, "gen": 1, "tags": tags, "queues": queues}


def _q(key, role, t0, t1, tag, **info):
    return {"key": key, "role": role, "offset": 0, "t0": t0, "t1": t1, "tag": tag, **info}


def test_queue_share_of_steps_with_overlapping_steps():
    """Asynchronous scheduling: step N+1's broadcasts leave before step N's output is taken.
    Steps start at 0, 1000, 2000 (execute_model) with a sample_tokens broadcast 100 later;
    each broadcast takes 10 to arrive, each response 20. Between the first and the last step
    (2000): 4 broadcasts and the 4 responses the EngineCore asked for in that span."""
    ex = [0, 1000, 2000]
    bw0 = sorted(ex + [t + 100 for t in ex])              # ex, sample, ex, sample, ...
    tags = [0 if t in ex else 1 for t in bw0]
    bw1 = [t + 1 for t in bw0]
    br0 = [t - 50 for t in bw0]                            # the worker was waiting
    br1 = [t + 10 for t in bw0]
    rw0 = [t + 500 for t in bw0]                           # responses sent 500 after each
    rr0 = [t + 1050 for t in bw0]                          # taken after the next step left
    rr0 = [max(a, b) - 20 for a, b in zip(rw0, rr0)]
    rr1 = [max(w, r) + 20 for w, r in zip(rw0, rr0)]
    files = [
        _file(1, "VLLM::EngineCore", [_q("b", "writer", bw0, bw1, tags, n_reader=1),
                                      _q("r", "reader", rr0, rr1, [2] * 6, rank=0)],
              ["execute_model", "sample_tokens", "response"]),
        _file(2, "VLLM::Worker_TP0", [_q("b", "reader", br0, br1, tags, rank=0),
                                      _q("r", "writer", rw0, [t + 1 for t in rw0], [2] * 6,
                                         n_reader=1)],
              ["execute_model", "sample_tokens", "response"]),
    ]
    out = serve_steps.analyze(files, 0, 10**9)
    assert out["steps"] == 3
    in_span_responses = sum(1 for r in rr0 if 0 <= r < 2000)
    assert out["queue_share_of_steps"] == pytest.approx((4 * 10 + in_span_responses * 20) / 2000)
    run = {"device": "cuda", "queue_timing": out}
    assert serve_report.run_value(run, "queue_share") == out["queue_share_of_steps"]
    assert serve_report.run_value(run | {"device": "cpu"}, "queue_share") == out["queue_share"]


# ------------------------------------------------------------------ report
def _result(runs, queues):
    return {"schema": serve_options.SCHEMA, "machine": {"versions": {}, "gpus": ["NVIDIA H200, 580, 143771 MiB"],
                                                 "loadavg_start": [1.0], "loadavg_end": [2.0]},
            "config": {"queues": queues, "settings": ["hogs"], "runs": 3, "input_len": 128,
                       "output_len": 128, "num_prompts": 96, "rate": 12, "concurrency": 16,
                       "seed": 0, "device": "cuda", "tp": 1, "model": "/x/model",
                       "profile": "graphs", "profile_desc": "graphs", "max_num_seqs": 16,
                       "setting_desc": {"hogs": "16 CPU hogs"}},
            "runs": runs}


def _run(queue, ttft, tok_s):
    return {"setting": "hogs", "queue": queue, "run": 1, "device": "cuda",
            "metrics": {"tpot_p50_ms": 5.0, "tpot_p99_ms": 9.0, "itl_p50_ms": 5.0,
                        "itl_p99_ms": 10.0, "ttft_p50_ms": ttft, "e2el_p50_ms": 700.0,
                        "output_tok_s": tok_s},
            "worker_cpu_s": 5.0, "queue_timing": {"queue_share_of_steps": 0.02}}


def test_rdmaq_over_the_best_of_vllms_queues_per_metric():
    runs = [_run("vllm", 40.0, 1000.0), _run("vllm-spinloop", 20.0, 900.0), _run("rdmaq-shm", 10.0, 1100.0)]
    result = _result(runs, ["vllm", "vllm-spinloop", "rdmaq-shm"])
    summ = serve_report.summarize(result)
    r = serve_report.ratios(summ, "hogs", "rdmaq-shm", ["vllm", "vllm-spinloop"])
    assert r["ttft_p50_ms"] == pytest.approx(10 / 20)        # the spin loop's TTFT is the best
    assert r["output_tok_s"] == pytest.approx(1100 / 1000)   # plain vllm's throughput is
    text = serve_report.format_markdown(result)
    assert "| hogs | **rdmaq-shm ÷ best of vllm, vllm-spinloop** |" in text
    assert "| hogs | vllm-spinloop |" in text and "TP=1 on NVIDIA H200" in text
    assert "2.0%" in text  # the per-step queue share of the GPU runs
    # every rdmaq variant gets its row, over the same best of vLLM's queues
    var = "rdmaq-shm@RDMAQ_EXPERIMENT=busy_spin_us=2000"
    text = serve_report.format_markdown(_result(runs + [_run(var, 5.0, 1000.0)],
                                                ["vllm", "vllm-spinloop", "rdmaq-shm", var]))
    assert "| hogs | **rdmaq-shm ÷ best of vllm, vllm-spinloop** |" in text
    assert f"| hogs | **{var} ÷ best of vllm, vllm-spinloop** | 1.00 | 1.00 | 1.00 | 1.00 | 0.25 |" in text
    # with vLLM's plain queue alone the label stays the CPU tables'
    assert "**rdmaq-shm ÷ vllm**" in serve_report.format_markdown(_result(runs[::2], ["vllm", "rdmaq-shm"]))


def test_result_files_of_earlier_versions_read_under_todays_names(tmp_path, capsys):
    """Files written when vLLM's queues were "shm" and "shm-spinloop" and rdmaq's "rdmaq": the
    report (and the docs' tables) read them as vllm, vllm-spinloop and rdmaq-shm; the file
    itself is left as written."""
    var = "shm-spinloop@VLLM_X=1"
    runs = [_run("shm", 40.0, 1000.0), _run("shm-spinloop", 20.0, 900.0), _run("rdmaq", 10.0, 1100.0),
            _run(var, 30.0, 950.0)]
    runs[0]["server_cpu_s"] = {"shm": 1.0, "rdmaq": 2.0}
    old = dict(_result(runs, ["shm", "shm-spinloop", "rdmaq", var]), servers={"shm": {}, "rdmaq": {}})
    now = serve_report.with_current_names(old)
    assert now["config"]["queues"] == ["vllm", "vllm-spinloop", "rdmaq-shm", "vllm-spinloop@VLLM_X=1"]
    assert [r["queue"] for r in now["runs"]] == ["vllm", "vllm-spinloop", "rdmaq-shm", "vllm-spinloop@VLLM_X=1"]
    assert now["runs"][0]["server_cpu_s"] == {"vllm": 1.0, "rdmaq-shm": 2.0}
    assert sorted(now["servers"]) == ["rdmaq-shm", "vllm"]
    assert old["runs"][0]["queue"] == "shm" and old["config"]["queues"][0] == "shm"
    path = tmp_path / "results.json"
    path.write_text(json.dumps(old))
    assert serve.main(["--report", str(path)]) == 0
    assert "| hogs | **rdmaq-shm ÷ best of vllm, vllm-spinloop, vllm-spinloop@VLLM_X=1** |" in capsys.readouterr().out


def test_the_old_names_are_taken_on_the_command_line_too():
    """--queues vllm,rdmaq (a script written before) runs the contenders under today's names."""
    args = serve_options.build_parser().parse_args(["--device", "cpu", "--queues", "shm,rdmaq@RDMAQ_X=1"])
    serve_options.resolve(args)
    queues, _ = serve_options.check_args(serve_options.build_parser(), args)
    assert queues == ["vllm", "rdmaq-shm@RDMAQ_X=1"]


def test_a_sweep_of_an_earlier_version_is_not_resumed(tmp_path, capsys):
    """Its servers and folders carry the old names: a new sweep, said so."""
    old = dict(_result([_run("shm", 40.0, 1000.0)], ["shm", "rdmaq"]), parts=[{"runs": 1}])
    (tmp_path / "results.json").write_text(json.dumps(old))
    with pytest.raises(SystemExit) as e:
        serve.main(["--resume", "--out", str(tmp_path)])
    assert e.value.code == 2
    assert "names its queues as before (shm, rdmaq): start a new sweep" in capsys.readouterr().err


# ------------------------------------------------------------------ client
def _fake_env(**extra):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(FAKE), os.environ.get("PYTHONPATH", "")]))
    return env | extra


def _fake_vllm(tmp_path: Path) -> Path:
    exe = tmp_path / "vllm"
    exe.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.path.insert(0, {str(FAKE)!r})\n"
                   f"runpy.run_path({str(FAKE / 'fake_cli.py')!r}, run_name='__main__')\n")
    exe.chmod(0o755)
    return exe


def test_persistent_client_reruns_in_one_process_and_reports_failures(tmp_path):
    vllm = _fake_vllm(tmp_path)
    srv = VllmServer(vllm=str(vllm), model=tmp_path, ipc="shm", workdir=tmp_path, env=_fake_env(),
                     max_model_len=64, args=[])
    srv.start(60)
    client = BenchClient("persistent", str(vllm), _fake_env())
    try:
        cfg = {"input_len": 4, "output_len": 3, "num_prompts": 2, "rate": 10, "concurrency": 1,
               "seed": 0}
        pids, lines = [], []
        for name in ("a", "b"):
            rc = client.run(serve_measure.client_argv(cfg, tmp_path, srv, tmp_path, name), lines.append, 60)
            assert rc == 0, lines
            pids.append(client.proc.pid)
            assert json.loads((tmp_path / f"{name}.json").read_text())["completed"] == 2
        assert pids[0] == pids[1]  # imported once
        assert sum(serve_measure.MAIN_LINE in line for line in lines) == 2
        assert not any(DONE_LINE in line for line in lines)
        bad = client.run(["--num-prompts", "many"], lines.append, 60)
        assert bad == 2  # argparse's exit status, and the client lives on
        assert client.proc is not None and client.proc.poll() is None
    finally:
        client.close()
        srv.stop(10)
    assert client.proc is None


def _sweep(tmp_path, *extra, env=None):
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    cmd = [sys.executable, "-m", "rdmaq.cli", "bench", "serve", "--device", "cpu",
           "--vllm", str(_fake_vllm(tmp_path)), "--model", str(model), "--out", str(tmp_path / "out"),
           "--tp", "1",
           "--queues", "vllm,vllm-spinloop,rdmaq-shm", "--settings", "idle", "--runs", "2",
           "--num-prompts", "3", "--rate", "1", "--output-len", "4", "--input-len", "4",
           "--no-step-timing", "--client", "persistent", "--stop-grace", "10", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env or _fake_env())


def test_sweep_cut_at_a_deadline_resumes_on_the_same_servers(tmp_path):
    # no run fits in 1 s (the first run's estimate is 3 / 1 s + 15 s): servers start and stay
    first = _sweep(tmp_path, "--deadline", "1", "--keep-servers")
    assert first.returncode == serve_options.EXIT_INCOMPLETE, first.stderr[-3000:]
    out = tmp_path / "out"
    kept = json.loads((out / "servers.json").read_text())
    assert sorted(kept) == ["rdmaq-shm", "vllm", "vllm-spinloop"]
    assert all(psutil.pid_exists(s["sid"]) for s in kept.values())
    part1 = json.loads((out / "results.json").read_text())
    assert part1["runs"] == [] and part1["complete"] is False
    assert part1["parts"][0]["servers_kept"] is True

    second = _sweep(tmp_path, "--resume")
    assert second.returncode == 0, second.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())
    assert result["complete"] is True and result["failed_runs"] == 0
    assert [(r["queue"], r["run"]) for r in result["runs"]] == [
        ("vllm", 1), ("vllm-spinloop", 1), ("rdmaq-shm", 1), ("vllm", 2), ("vllm-spinloop", 2), ("rdmaq-shm", 2)]
    for r in result["runs"]:
        assert r["server_pid"] == kept[r["queue"]]["sid"] and r["part"] == 2  # reused
        assert set(r["server_cpu_s"]) == {"vllm", "vllm-spinloop", "rdmaq-shm"}
        assert r["metrics"]["completed"] == 3
    assert not (out / "servers.json").exists()
    for q, s in kept.items():
        assert not psutil.pid_exists(s["sid"]) or psutil.Process(s["sid"]).status() == "zombie"
        assert result["servers"][q]["cleanup"]["processes_remaining"] == []
        assert not os.path.exists(s["tmpdir"])
    assert "rdmaq-shm ÷ best of vllm, vllm-spinloop" in (out / "summary.md").read_text()


def test_sweep_starts_new_servers_when_the_kept_ones_are_gone(tmp_path):
    first = _sweep(tmp_path, "--deadline", "1", "--keep-servers")
    assert first.returncode == serve_options.EXIT_INCOMPLETE, first.stderr[-3000:]
    kept = json.loads((tmp_path / "out" / "servers.json").read_text())
    os.killpg(kept["rdmaq-shm"]["sid"], 9)  # the machine lost it between the calls
    second = _sweep(tmp_path, "--resume", "--settings", "hogs")  # workload options: the first's
    assert second.returncode == 0, second.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    pids = {r["queue"]: r["server_pid"] for r in result["runs"]}
    assert pids["rdmaq-shm"] != kept["rdmaq-shm"]["sid"] and pids["vllm"] == kept["vllm"]["sid"]
    assert {r["setting"] for r in result["runs"]} == {"idle"}
    assert result["servers"]["rdmaq-shm"]["started_by_part"] == 2


def test_a_failing_client_run_is_an_error_record_not_a_hang(tmp_path):
    r = _sweep(tmp_path, "--queues", "vllm", "--runs", "1", env=_fake_env(FAKE_VLLM_CLIENT_FAIL="1"))
    assert r.returncode == 1
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert result["failed_runs"] == 1
    assert "vllm bench serve exited with 7" in result["runs"][0]["error"]


def test_a_queue_variant_runs_its_own_server_with_its_environment(tmp_path):
    var = "rdmaq-shm@RDMAQ_TEST_BUSY_SPIN_US=100"
    r = _sweep(tmp_path, "--queues", f"vllm,{var}", "--runs", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    out = tmp_path / "out"
    result = json.loads((out / "results.json").read_text())
    assert [(x["queue"], x["run"]) for x in result["runs"]] == [("vllm", 1), (var, 1)]
    assert "--distributed-ipc rdmaq" in " ".join(result["servers"][var]["command"])
    logs = {q: (out / "logs" / f"serve-{q}.log").read_text() for q in ("vllm", var)}
    assert "RDMAQ_TEST_BUSY_SPIN_US=100" in logs[var]
    assert "RDMAQ_TEST_BUSY_SPIN_US" not in logs["vllm"]
    assert f"**{var} ÷ vllm**" in (out / "summary.md").read_text()


# ------------------------------------------------------------------ model
def test_the_model_maker_ships_with_the_package(tmp_path):
    """The harness makes its model with rdmaq.bench.serve.tiny_llama (no tests/ tree needed);
    tests/vllm/make_tiny_llama.py, which the README runs from a checkout, is that same program."""
    root = Path(__file__).resolve().parents[2]
    helps = [subprocess.run(cmd, capture_output=True, text=True, timeout=120)
             for cmd in ([sys.executable, "-m", "rdmaq.bench.serve.tiny_llama", "--help"],
                         [sys.executable, str(root / "tests" / "vllm" / "make_tiny_llama.py"), "--help"])]
    assert [h.returncode for h in helps] == [0, 0], [h.stderr for h in helps]
    assert "--shape {llama-3.2-1b,tiny}" in helps[0].stdout and helps[0].stdout == helps[1].stdout


def test_the_harness_makes_its_model_without_a_source_tree(tmp_path):
    for dep in ("torch", "transformers", "tokenizers", "safetensors"):
        pytest.importorskip(dep, reason="making a model needs vLLM's dependencies")
    model = serve_launch.make_model(tmp_path, "tiny", "cpu")
    assert json.loads((model / "config.json").read_text())["num_hidden_layers"] == 2
