"""Functional tests of `rdmaq bench` itself: argument checks, statistics, a --quick run.

No timing is asserted: the figures must exist, be finite and non-negative, and the
harness must have seen every message exactly once, in order.
"""
import importlib.util
import json
import math
import os
from array import array

import numpy as np
import pytest

from rdmaq.bench import cli
from rdmaq.bench.common import args as bench_args
from rdmaq.bench.common import machine
from rdmaq.bench.common.stats import analyze
from rdmaq.bench.micro import main as micro

LAT_KEYS = {"n", "min_us", "p50_us", "p90_us", "p99_us", "p999_us", "max_us", "mean_us"}


def _rec(send, recv, cpu=1_000, wall=10_000, errors=()):
    return {"send_t": array("q", send).tobytes(), "recv_t": array("q", recv).tobytes(),
            "cpu_ns": cpu, "wall_ns": wall, "errors": list(errors)}


def test_analyze_takes_max_over_readers():
    send = [0, 1000, 2000, 3000]
    r0 = _rec(send, [10_000, 2_000, 3_000, 4_000])      # latencies 10, 1, 1, 1 us
    r1 = _rec(send, [1_000, 6_000, 4_000, 5_000])       # latencies 1, 5, 2, 2 us
    w = {"sent": 4, "cpu_ns": 500, "wall_ns": 1000}
    fig, lat_max = analyze(w, [r0, r1])
    assert list(lat_max) == [10_000, 5_000, 2_000, 2_000]
    assert fig["measured"] == 4 and fig["errors"] == []
    assert fig["latency_max_over_readers"]["max_us"] == 10.0
    assert fig["latency_max_over_readers"]["min_us"] == 2.0
    assert fig["latency_all_readers"]["n"] == 8
    assert fig["reader_cpu_busy_frac"] == [0.1, 0.1]
    assert fig["writer_cpu_busy_frac"] == 0.5
    # throughput: 4 messages from first send (0) to last receive (5000 ns)
    assert fig["throughput_msgs_per_s"] == pytest.approx(4 / 5e-6)


def test_analyze_reports_readers_that_disagree():
    r0 = _rec([0, 1, 2], [5, 6, 7])
    r1 = _rec([0, 1], [5, 6], errors=["got seq 3, expected 2"])
    fig, _ = analyze({"sent": 3, "cpu_ns": None, "wall_ns": None}, [r0, r1])
    assert fig["measured"] == 2
    assert any("different numbers" in e for e in fig["errors"])
    assert "got seq 3, expected 2" in fig["errors"]


@pytest.mark.parametrize("argv, message", [
    (["--sizes", "12Q"], "bad size"),
    (["--pace", "5"], "give a unit"),
    (["--readers", "0"], "readers"),
    (["--queues", "tcp"], "unknown queue"),
    (["--cpus", "100000"], "not available"),
])
def test_bad_arguments_are_named(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_parsers():
    assert micro.parse_size("2K") == 2048 and micro.parse_size("1M") == 1 << 20 and micro.parse_size("64") == 64
    assert bench_args.parse_pace("0") == 0 and bench_args.parse_pace("1ms") == 1_000_000
    assert bench_args.parse_pace("500us") == 500_000


def _numbers(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _numbers(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _numbers(v)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield obj


def _check_result(data, queue, readers, subruns=2, attackers=(0,)):
    assert data["schema"] == micro.SCHEMA
    m = data["machine"]
    for k in ("cpu_model", "logical_cpus", "kernel", "python", "versions", "loadavg_start", "loadavg_end"):
        assert k in m, k
    cells = [c for c in data["cells"] if c["queue"] == queue]
    assert [c["attackers"] for c in cells] == list(attackers)
    for cell in cells:
        _check_cell(cell, readers, subruns, data["cdf_q"])


def _check_cell(cell, readers, subruns, cdf_q):
    assert cell["error"] is None, cell["error"]
    assert cell["readers"] == readers
    assert len(cell["subruns"]) == subruns  # quick: 2 sizes x 1 pace
    for s in cell["subruns"]:
        assert s["errors"] == [], s["errors"]
        assert s["measured"] == s["writer_sent"] - s["warmup"] > 0
        lat = s["latency_max_over_readers"]
        assert set(lat) == LAT_KEYS
        assert lat["n"] == s["measured"]
        assert 0 <= lat["min_us"] <= lat["p50_us"] <= lat["p99_us"] <= lat["p999_us"] <= lat["max_us"]
        assert s["negative_latencies"] == 0
        assert len(s["reader_cpu_busy_frac"]) == readers
        assert s["throughput_msgs_per_s"] > 0
        assert len(s["cdf_us"]) == len(cdf_q)
        assert s["cdf_us"] == sorted(s["cdf_us"])
    idle = cell["idle"]
    assert len(idle["reader_cpu_frac_early"]) == readers
    for v in _numbers(cell):
        assert math.isfinite(v) and v >= 0, v


def test_quick_run_rdmaq_shm(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = cli.main(["--quick", "--queues", "rdmaq-shm", "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    # idle, and one CPU hog per allowed CPU
    _check_result(data, "rdmaq-shm", 2, attackers=(0, len(os.sched_getaffinity(0))))
    # the file records the command line without this machine's directories
    assert data["argv"] == ["--quick", "--queues", "rdmaq-shm", "--json", "r.json"]
    table = capsys.readouterr().out
    assert "rdmaq-shm" in table and "p99[us]" in table
    # no vLLM beside it: the verdict says there is none, per setting, in its last lines
    assert table.rstrip().splitlines()[-2:] == data["verdict"] == [
        "verdict, idle (2 readers): none (no vLLM queue measured)",
        f"verdict, contended (2 readers, {len(os.sched_getaffinity(0))} CPU hogs): none (no vLLM queue measured)"]
    # the JSON alone re-renders the tables and a plot
    assert cli.main(["--from-json", str(out), "--markdown"]) == 0
    md = capsys.readouterr().out
    assert "| bytes | pace |" in md and "TP=2" in md
    if importlib.util.find_spec("matplotlib"):
        png = tmp_path / "r.png"
        assert cli.main(["--from-json", str(out), "--plot", str(png)]) == 0
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                    reason="missing dependency: vllm (tests/bench/ci.sh installs it --no-deps)")
@pytest.mark.timeout(240)  # two cells, each importing torch in two processes
def test_quick_run_vllm_references(tmp_path):
    """vLLM as shipped and with its C spin loop (a loadable copy of the module where the
    shipped one names libraries it does not use)."""
    out = tmp_path / "v.json"
    rc = cli.main(["--quick", "--queues", "vllm,vllm-spinloop", "--readers", "1", "--sizes", "64,40K",
                   "--attackers", "0", "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["skipped"] == {}
    _check_result(data, "vllm", 1, subruns=2)
    _check_result(data, "vllm-spinloop", 1, subruns=2)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                    reason="missing dependency: vllm (tests/bench/ci.sh installs it --no-deps)")
@pytest.mark.timeout(240)
def test_a_quick_verdict_names_the_releases_it_compared(tmp_path, capsys):
    out = tmp_path / "q.json"
    rc = cli.main(["--quick", "--queues", "rdmaq-shm,vllm", "--readers", "1", "--sizes", "64",
                   "--attackers", "0", "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    v = data["machine"]["versions"]
    lines = capsys.readouterr().out.rstrip().splitlines()
    assert lines[-2] == data["verdict"][0] and ": none (" not in lines[-2]
    assert lines[-1] == (f"(rdmaq {v['rdmaq']} against vLLM {v['vllm']}: each sub-run against the better of "
                         "its plain and spin-loop readers)")


def test_unavailable_queue_is_skipped_with_a_message(tmp_path, capsys):
    # no RDMA device on CI machines: verbs is skipped, and with nothing else to run the exit is 1
    import os
    if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
        pytest.skip("this machine has an RDMA device")
    rc = cli.main(["--quick", "--queues", "rdmaq-verbs"])
    assert rc == 1
    assert "skipping rdmaq-verbs" in capsys.readouterr().err


@pytest.mark.parametrize("argv, recorded", [
    (["--json", "/home/u/runs/a.json", "--plot=/tmp/x/a.png"], ["--json", "a.json", "--plot=a.png"]),
    (["--readers", "4,8", "--label", "h200"], ["--readers", "4,8", "--label", "h200"]),
    (["--json", "out/"], ["--json", "out"]),
])
def test_recorded_argv_keeps_only_the_last_component_of_paths(argv, recorded):
    assert machine.recorded_argv(argv) == recorded


def test_numpy_percentiles_match_stats():
    from rdmaq.bench.common.stats import summarize
    v = np.arange(1, 1001, dtype=np.int64) * 1000
    s = summarize(v)
    assert s["p50_us"] == pytest.approx(500.5) and s["max_us"] == 1000.0 and s["n"] == 1000
