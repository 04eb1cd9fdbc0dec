"""rdmaq bench sweep: points from a result, plot and JSON (made-up results, no run)."""
import json

from rdmaq.bench.micro.sweep import main, points


def _sub(size, pace_ns, p99, cpu):
    return {"size": size, "pace_ns": pace_ns, "latency_max_over_readers": {"p99_us": p99},
            "reader_cpu_busy_frac_mean": cpu}


def _cell(queue, subs, attackers=0):
    return {"queue": queue, "readers": 8, "attackers": attackers, "tokenizer_attacker": False,
            "error": None, "subruns": subs}


MS = 1_000_000
RESULT = {
    "machine": {"label": "test", "cpus_allowed": 16, "kernel": "k", "rdmaq_git": "abc"},
    "cells": [
        _cell("rdmaq-shm", [_sub(64, MS, 200, 0.12), _sub(2048, MS, 300, 0.14), _sub(64, 0, 50, 0.5)]),
        _cell("rdmaq-shm@RDMAQ_SPIN_US=1000000", [_sub(64, MS, 100, 0.13), _sub(2048, MS, 100, 0.15)]),
        _cell("vllm", [_sub(64, MS, 100, 1.0), _sub(2048, MS, 200, 1.0)]),
        _cell("vllm-spinloop", [_sub(64, MS, 150, 1.0), _sub(2048, MS, 100, 1.0)]),
        # contended cells are not the idle tail
        _cell("rdmaq-shm", [_sub(64, MS, 9999, 0.03)], attackers=16),
        _cell("vllm", [_sub(64, MS, 1, 0.2)], attackers=16),
    ],
}


def test_points_are_ratios_to_the_better_vllm_of_each_sub_run():
    pts = {p["queue"]: p for p in points(RESULT)}
    assert set(pts) == {"rdmaq-shm", "rdmaq-shm@RDMAQ_SPIN_US=1000000", "vllm", "vllm-spinloop"}
    # best vLLM: 100 us at 64 B (vllm), 100 us at 2 KB (spinloop); back to back is not paced
    assert pts["rdmaq-shm"]["p99_ratio_median"] == 2.5 and pts["rdmaq-shm"]["p99_ratio_max"] == 3.0
    assert abs(pts["rdmaq-shm"]["reader_cpu_pct_max"] - 14.0) < 1e-9
    assert pts["rdmaq-shm@RDMAQ_SPIN_US=1000000"]["p99_ratio_median"] == 1.0
    assert pts["vllm"]["p99_ratio_median"] == 1.5 and pts["vllm-spinloop"]["p99_ratio_median"] == 1.25
    assert all(p["sizes"] == [64, 2048] and p["pace_ns"] == MS for p in pts.values())


def test_main_writes_the_plot_and_the_points(tmp_path, capsys):
    src = tmp_path / "run.json"
    src.write_text(json.dumps(RESULT))
    png, out = tmp_path / "sweep.png", tmp_path / "points.json"
    assert main([str(src), "--plot", str(png), "--json", str(out)]) == 0
    assert png.stat().st_size > 0
    assert len(json.loads(out.read_text())["points"]) == 4
    assert "SPIN_US=1000000" in capsys.readouterr().out


def test_a_result_without_vllm_says_so(tmp_path, capsys):
    src = tmp_path / "run.json"
    src.write_text(json.dumps({"machine": {}, "cells": RESULT["cells"][:2]}))
    assert main([str(src)]) == 1
    assert "no idle paced cell with a vLLM variant" in capsys.readouterr().err
