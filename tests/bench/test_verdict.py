"""`rdmaq bench --quick`'s verdict (bench/micro/verdict.py) on made-up samples: its line's form,
who it says won, and "too close to call" where the samples cannot tell."""
import os
import re

import numpy as np
import pytest

from rdmaq.bench.micro import verdict
from rdmaq.bench.micro.main import build_parser, quick_plan, quick_verdict

LINE = re.compile(r"^verdict, (?P<setting>[^:]+): (?P<head>[^:]+): rdmaq-shm ÷ vLLM latency "
                  r"p50 (?P<p50>[\d.]+)× \(95 % CI (?P<p50lo>[\d.]+)–(?P<p50hi>[\d.]+)"
                  r"(?P<p50close>, too close to call)?\), "
                  r"p99 (?P<p99>[\d.]+)× \(95 % CI (?P<p99lo>[\d.]+)–(?P<p99hi>[\d.]+)"
                  r"(?P<p99close>, too close to call)?\)$")


def lat(rng, median_us, n=300, spread=0.2):
    """Latencies in ns around a median, log-normal like a queue's."""
    return (median_us * 1e3 * np.exp(rng.normal(0, spread, n))).astype(np.int64)


def subruns(rng, median_us, k=4, **kw):
    return [lat(rng, median_us, **kw) for _ in range(k)]


def test_a_clear_win_each_way_and_a_tie():
    rng = np.random.default_rng(1)
    samples = {("rdmaq-shm", 0): subruns(rng, 50), ("vllm", 0): subruns(rng, 100),
               ("rdmaq-shm", 2): subruns(rng, 300), ("vllm", 2): subruns(rng, 100),
               ("rdmaq-shm", 4): subruns(rng, 100), ("vllm", 4): subruns(rng, 100)}
    lines = verdict.verdicts(samples, "rdmaq-shm", ["vllm"], {0: "idle", 2: "contended", 4: "tied"})
    assert len(lines) == 3
    m = [LINE.match(x) for x in lines]
    assert all(m), lines
    won, lost, tied = m
    assert won["setting"] == "idle" and won["head"] == "rdmaq-shm won"
    assert 0.4 < float(won["p50"]) < 0.6 and float(won["p50hi"]) < 1 and not won["p50close"]
    assert lost["head"] == "vLLM won" and float(lost["p50lo"]) > 1
    assert tied["head"] == "too close to call" and tied["p50close"] and tied["p99close"]
    assert float(tied["p50lo"]) < 1 < float(tied["p50hi"])


def test_the_interval_holds_the_point_and_narrows_with_more_samples():
    rng = np.random.default_rng(2)
    pairs = [(lat(rng, 80, n=50), lat(rng, 100, n=50))]
    few = verdict.figure(pairs, 50, np.random.default_rng(0))
    pairs = [(lat(rng, 80, n=5000), lat(rng, 100, n=5000))]
    many = verdict.figure(pairs, 50, np.random.default_rng(0))
    for f in (few, many):
        assert f.lo <= f.ratio <= f.hi
    assert many.hi - many.lo < (few.hi - few.lo) / 3
    assert many.call == "ahead"


def test_the_better_vllm_queue_is_the_denominator():
    rng = np.random.default_rng(3)
    samples = {("rdmaq-shm", 0): subruns(rng, 100), ("vllm", 0): subruns(rng, 400),
               ("vllm-spinloop", 0): subruns(rng, 50)}
    (text,) = verdict.verdicts(samples, "rdmaq-shm", ["vllm", "vllm-spinloop"], {0: "idle"})
    m = LINE.match(text)
    assert m["head"] == "vLLM won" and 1.6 < float(m["p50"]) < 2.4  # against the spin loop's 50 µs


def test_split_percentiles_say_mixed():
    rng = np.random.default_rng(4)
    # rdmaq: lower median, a long tail; vLLM: higher median, no tail
    mine = [np.concatenate([lat(rng, 50, n=270, spread=0.05), lat(rng, 2000, n=30, spread=0.05)]) for _ in range(4)]
    theirs = subruns(rng, 100, spread=0.05)
    (text,) = verdict.verdicts({("rdmaq-shm", 0): mine, ("vllm", 0): theirs}, "rdmaq-shm", ["vllm"], {0: "idle"})
    assert LINE.match(text)["head"] == "mixed (rdmaq-shm ahead at p50, behind at p99)"


def test_no_verdict_without_vllm_or_with_too_few_samples():
    rng = np.random.default_rng(5)
    alone = verdict.verdicts({("rdmaq-shm", 0): subruns(rng, 50)}, "rdmaq-shm", [], {0: "idle"})
    assert alone == ["verdict, idle: none (no vLLM queue measured)"]
    few = {("rdmaq-shm", 0): subruns(rng, 50, n=5), ("vllm", 0): subruns(rng, 100, n=5)}
    assert verdict.verdicts(few, "rdmaq-shm", ["vllm"], {0: "idle"}) == [
        "verdict, idle: none (no vLLM queue measured)"]
    with pytest.raises(ValueError):
        verdict.figure([], 50, np.random.default_rng(0))


def test_quick_verdict_names_each_setting_of_the_run():
    rng = np.random.default_rng(6)
    samples = {(q, 2, att): subruns(rng, m) for q, m in (("rdmaq-shm", 50), ("vllm", 100), ("vllm-spinloop", 90))
               for att in (0, 2)}
    lines = quick_verdict(samples, ["rdmaq-shm", "vllm", "vllm-spinloop"], [2], [0, 2])
    assert [LINE.match(x)["setting"] for x in lines] == ["idle (2 readers)", "contended (2 readers, 2 CPU hogs)"]


@pytest.mark.parametrize("extra, attackers", [([], None), (["--attackers", "0,4"], [0, 4])])
def test_quick_measures_idle_and_contended(extra, attackers):
    """--quick's cells: idle and one hog per allowed CPU, unless --attackers names them."""
    argv = ["--quick", *extra]
    args = build_parser().parse_args(argv)
    given = [int(a) for a in args.attackers.split(",")]
    readers, sizes, paces, att = quick_plan(args, argv, [1], [2048], [10_000_000], given)
    assert att == (attackers or [0, len(os.sched_getaffinity(0))])
    assert (readers, sizes, paces, args.time_cap) == ([2], [64, 40 * 1024], [1_000_000], 3.0)
