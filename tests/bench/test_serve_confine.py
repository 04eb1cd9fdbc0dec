"""`rdmaq bench serve` under CPU confinement as a container has it (bench/serve/confine.py): the
server's cpuset (--server-cpus), its CPU-quota cgroup (--server-quota; skipped with the reason
where none can be made), hogs inside the server's group (hogs-ingroup), idle cells' runs, and
the server CPU per 1 000 output tokens. The sweep runs against the stand-in `vllm`
(tests/bench/fakevllm), which logs the CPUs it may use."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rdmaq.bench.serve import attack as serve_attack
from rdmaq.bench.serve import confine as serve_confine
from rdmaq.bench.serve import main as serve
from rdmaq.bench.serve import measure as serve_measure
from rdmaq.bench.serve import options as serve_options
from rdmaq.bench.serve import plan as serve_plan
from rdmaq.bench.serve import report as serve_report
from rdmaq.bench.serve.confine import Confinement

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_serve_sweep import _fake_env, _sweep  # noqa: E402

ALLOWED = sorted(os.sched_getaffinity(0))


def _args(*argv):
    return serve_options.resolve(serve_options.build_parser().parse_args(["--device", "cpu", *argv]))


# ------------------------------------------------------------------ arguments and plan
@pytest.mark.parametrize("argv, message", [
    (["--server-cpus", "0"], "--server-cpus 0: this process may use"),
    (["--server-cpus", str(len(ALLOWED) + 1)], f"may use {len(ALLOWED)} CPU(s)"),
    (["--server-quota", "0"], "--server-quota 0: give CPUs in (0,"),
    (["--server-quota", str(len(ALLOWED) + 1)], "--server-quota"),
    (["--idle-runs", "0"], "--idle-runs"),
    (["--server-cpus", "x"], "--server-cpus: invalid int value"),
])
def test_bad_confinement_arguments_exit_2_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        serve.main(["--tp", "1", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1]
    assert not any(line.startswith("Traceback") for line in err)


def test_confinement_adds_the_in_group_setting_to_the_default_plan():
    plain = _args()
    assert "hogs-ingroup" not in plain.settings.split(",")
    for extra in (["--server-cpus", "1"], ["--server-quota", "0.5"]):
        settings = _args(*extra).settings.split(",")
        assert settings[-1] == "hogs-ingroup"
        steps = serve_plan.plan(settings, ["vllm", "rdmaq-shm"], 1)
        assert {s.setting for s in steps} == set(settings)
    # a list given is the list run
    assert _args("--server-cpus", "1", "--settings", "idle").settings == "idle"


def test_idle_cells_get_five_runs_unless_told():
    args = _args("--settings", "idle,hogs")
    assert (args.runs, args.idle_runs) == (3, 5)
    steps = serve_plan.plan(["idle", "hogs"], ["vllm", "rdmaq-shm"], {"idle": 5, "hogs": 3})
    assert sum(s.setting == "idle" for s in steps) == 10 and len(steps) == 16
    assert (_args("--runs", "2").idle_runs, _args("--runs", "2", "--idle-runs", "7").idle_runs) == (2, 7)
    cfg = serve_options.config_of(args, "vllm", Path("m"), ["vllm"], ["idle", "hogs"])
    assert serve_options.runs_by_setting(cfg) == {"idle": 5, "hogs": 3}
    # a results.json from before: --runs everywhere
    assert serve_options.runs_by_setting({"runs": 3, "settings": ["idle"]}) == {"idle": 3}


def test_hogs_default_to_the_servers_cpus():
    cfg = serve_options.config_of(_args("--server-cpus", "1"), "vllm", Path("m"), ["vllm"],
                          ["hogs", "hogs-ingroup"])
    assert (cfg["hogs"], cfg["hogs_in_group"]) == (1, 1)
    assert cfg["setting_desc"]["hogs-ingroup"] == "1 CPU hogs in the server's cpuset and cgroup"
    cfg = serve_options.config_of(_args("--server-quota", "0.5"), "vllm", Path("m"), ["vllm"], ["hogs"])
    assert (cfg["hogs"], cfg["hogs_in_group"]) == (len(ALLOWED), 1)


# ------------------------------------------------------------------ cpuset and cgroup
def test_split_and_prefix_put_a_command_on_the_servers_cpus():
    assert serve_confine.split_cpus(1, [0, 1, 2]) == ([0], [1, 2])
    assert serve_confine.split_cpus(3, [0, 1, 2]) == ([0, 1, 2], None)
    assert serve_confine.cpu_list([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    conf = Confinement(server_cpus=ALLOWED[:1], client_cpus=None)
    assert conf.client_prefix() == []  # nothing to do: no CPU left for the client
    out = subprocess.run([*conf.server_prefix(), sys.executable, "-c",
                          "import os; print(sorted(os.sched_getaffinity(0)))"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(ALLOWED[:1])


def test_prefix_moves_the_command_into_the_cgroup_before_it_runs(tmp_path):
    group = tmp_path / "grp"
    group.mkdir()
    (group / "cgroup.procs").write_text("")
    conf = Confinement(cgroup=str(group))
    r = subprocess.run([*conf.server_prefix(), "true"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (group / "cgroup.procs").read_text() == "0"  # "0": the writing process itself


def test_the_quota_group_is_skipped_with_a_reason_where_none_can_be_made(tmp_path, monkeypatch):
    assert "is not a cgroup v2 mount" in serve_confine.make_cgroup("g", 1.0, tmp_path)[1]
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    assert "cpu controller is not available" in serve_confine.make_cgroup("g", 1.0, tmp_path)[1]
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory\n")
    # not root (root may write whatever the modes say)
    monkeypatch.setattr(serve_confine.os, "access", lambda path, mode: mode != os.W_OK)
    assert "is not writable here" in serve_confine.make_cgroup("g", 1.0, tmp_path)[1]
    assert not (tmp_path / "g").exists()


def test_the_quota_group_gets_cpu_max_and_is_removed(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory\n")
    path, why = serve_confine.make_cgroup("rdmaq-serve-1", None, tmp_path)
    assert why is None and path == str(tmp_path / "rdmaq-serve-1")
    assert (tmp_path / "rdmaq-serve-1" / "cpu.max").read_text() == "max 100000"  # servers start
    serve_confine.set_quota(path, 1.5)  # servers up
    assert (tmp_path / "rdmaq-serve-1" / "cpu.max").read_text() == "150000 100000"
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"  # given to the children
    assert serve_confine.quota_line(0.001) == "1000 100000"  # the kernel's smallest quota
    # a real group's interface files vanish with it; here they are files: rmdir refuses
    assert "not removed" in serve_confine.remove_cgroup(path)
    (tmp_path / "rdmaq-serve-1" / "cpu.max").unlink()
    assert serve_confine.remove_cgroup(path) is None and not os.path.exists(path)


def test_in_group_hogs_join_the_servers_cpus_and_group(tmp_path):
    group = tmp_path / "grp"
    group.mkdir()
    (group / "cgroup.procs").write_text("")
    att = serve_attack.start("hogs-ingroup", 1, timeout=60, cpus=ALLOWED[:1], cgroup=str(group))
    try:
        assert os.sched_getaffinity(att.procs[0].pid) == set(ALLOWED[:1])
        assert (group / "cgroup.procs").read_text() == "0"
    finally:
        att.stop()
    (group / "cgroup.procs").write_text("")
    machine_wide = serve_attack.start("hogs", 1, timeout=60, cpus=ALLOWED[:1], cgroup=str(group))
    try:
        assert os.sched_getaffinity(machine_wide.procs[0].pid) == set(ALLOWED[:1])
        assert (group / "cgroup.procs").read_text() == ""  # beside the server's group
    finally:
        machine_wide.stop()


# ------------------------------------------------------------------ CPU per 1 000 tokens
def test_server_cpu_per_thousand_output_tokens():
    raw = {"total_output_tokens": 2000, "output_throughput": 999.0, "duration": 1.0}
    rec = serve_measure.cpu_per_tokens({"api_server": 1.0, "engine_core": 2.0, "worker": 3.0}, raw)
    assert rec == {"server_cpu_s_total": 6.0, "output_tokens": 2000, "server_cpu_s_per_1k_tok": 3.0}
    # without vLLM's total: throughput x duration
    assert serve_measure.cpu_per_tokens({"worker": 1.0}, {"output_throughput": 250.0, "duration": 2.0})[
        "server_cpu_s_per_1k_tok"] == 2.0
    assert "server_cpu_s_per_1k_tok" not in serve_measure.cpu_per_tokens({"worker": 1.0}, {})


def _run(queue, cpu_s, tokens, reader_ms, setting="idle"):
    threads = [{"uses": ["broadcast reader"], "cpu_ms": reader_ms},
               {"uses": ["response reader"], "cpu_ms": reader_ms},
               {"uses": [], "cpu_ms": 1e6}]  # a busy thread that is no reader
    return {"setting": setting, "queue": queue, "run": 1, "metrics": {},
            "server_cpu_s_per_1k_tok": 1000 * cpu_s / tokens, "output_tokens": tokens,
            "queue_timing": {"threads": threads}}


def test_report_shows_cpu_per_thousand_tokens_per_queue():
    runs = [_run("vllm", 8.0, 2000, 100.0), _run("vllm", 12.0, 2000, 300.0),
            _run("rdmaq-shm", 2.0, 2000, 50.0)]
    result = {"machine": {}, "config": {"settings": ["idle"], "queues": ["vllm", "rdmaq-shm"],
                                        "runs": 3, "runs_by_setting": {"idle": 5},
                                        "setting_desc": {"idle": "no attacker"}, "input_len": 1,
                                        "output_len": 2, "num_prompts": 1, "rate": 1,
                                        "concurrency": 1, "seed": 0},
              "confinement": {"server_cpus": [0], "client_cpus": [1], "quota_cpus": 1.0,
                              "cgroup": None, "quota_skipped": "no cgroup v2 here"},
              "runs": runs}
    summ = serve_report.summarize(result)
    assert summ[("idle", "vllm")]["server_cpu_s_per_1k_tok"]["median"] == 5.0
    assert summ[("idle", "vllm")]["reader_cpu_ms_per_1k_tok"]["median"] == 200.0  # 2 readers
    assert summ[("idle", "rdmaq-shm")]["reader_cpu_ms_per_1k_tok"]["median"] == 50.0
    text = serve_report.format_markdown(result)
    assert "server CPU s per 1k tok | reader CPU ms per 1k tok |" in text
    assert re.search(r"\| idle \| vllm \|.*\| 5.00 \(4.00–6.00\) \| 200.0 \(100.0–300.0\) \| 2 \|", text)
    assert re.search(r"\| idle \| \*\*rdmaq-shm ÷ vllm\*\* \|.*\| 0.20 \| 0.25 \| \|", text)
    assert "3 runs per cell, 5 in idle" in text
    assert ("CPU confinement: server and attackers on CPUs 0, client on 1; "
            "no CPU quota (no cgroup v2 here).") in text


# ------------------------------------------------------------------ the sweep
def test_sweep_runs_the_server_on_its_cpus_and_records_cpu_per_tokens(tmp_path):
    r = _sweep(tmp_path, "--queues", "vllm", "--runs", "1", "--server-cpus", "1",
               "--server-quota", "0.5", env=_fake_env())
    assert r.returncode == 0, r.stderr[-3000:]
    out = tmp_path / "out"
    result = json.loads((out / "results.json").read_text())
    conf = result["confinement"]
    assert conf["server_cpus"] == ALLOWED[:1] and conf["client_cpus"] == (ALLOWED[1:] or None)
    assert f"fake vllm serve cpus: {ALLOWED[:1]}" in (out / "logs" / "serve-vllm.log").read_text()
    if ALLOWED[1:]:
        assert (f"fake vllm bench serve cpus: {ALLOWED[1:]}"
                in (out / "logs" / "client-idle-vllm-1.log").read_text())
    # a group made is gone afterwards; one not made says why, in the results and on stderr
    if conf["cgroup"]:
        assert not os.path.exists(conf["cgroup"]) and "cgroup_left" not in conf
    else:
        assert conf["quota_skipped"] and f"skipped: {conf['quota_skipped']}" in r.stderr
    run = result["runs"][0]
    assert run["output_tokens"] == 3 * 4
    assert run["server_cpu_s_per_1k_tok"] == pytest.approx(
        1000 * sum(run["cpu_s"].values()) / run["output_tokens"], abs=1e-3)
    assert "CPU confinement: server and attackers on CPUs" in (out / "summary.md").read_text()
