"""The `rdmaq` command where the machine falls short: a small /dev/shm, no vLLM. One line
that says what is missing and how to get it, never a traceback, never silence."""
import re

import pytest

from command import can_mount_shm, one_line_error, run, with_small_shm

# A /dev/shm of exactly 4 MiB: the default ring (64 x 64 KiB) plus its header does not fit,
# and rounded to MiB the two read the same.
SMALL_SHM = "4m"
needs_small_shm = pytest.mark.skipif(not can_mount_shm(), reason="needs root and unshare -m "
                                     "for a /dev/shm of its own")
def in_small_shm(cmd):
    return with_small_shm(SMALL_SHM, cmd)


QUICK_BENCH = ("bench", "--readers", "1", "--sizes", "64", "--pace", "0", "--messages", "20",
               "--warmup", "2", "--idle-window", "0.1")


@needs_small_shm
def test_demo_in_a_small_dev_shm_says_how_much_is_needed_and_free():
    p = run("demo", "--transport", "shm", wrap=in_small_shm)
    err = one_line_error(p, 1, "rdmaq demo", "/dev/shm is too small", "--slots")
    need, free = map(int, re.search(r"needs [\d.]+ MiB \((\d+) bytes\), [\d.]+ MiB \((\d+) bytes\) "
                                    r"is free", err).groups())
    assert need > free == 4 << 20, err


@needs_small_shm
def test_demo_fits_a_small_dev_shm_with_fewer_slots():
    p = run("demo", "--transport", "shm", "--slots", "8", "--messages", "200",
            wrap=in_small_shm)
    assert p.returncode == 0, p.stderr
    assert "ring=8 x 65536 B" in p.stdout and p.stdout.count("intact and in order") == 4, p.stdout


@needs_small_shm
def test_bench_in_a_small_dev_shm_fails_with_one_line():
    p = run(*QUICK_BENCH, "--queues", "rdmaq-shm", wrap=in_small_shm)
    errors = [line for line in p.stderr.splitlines() if "rdmaq-shm with 1 readers" in line]
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert len(errors) == 1 and "SharedMemoryFullError" in errors[0], p.stderr
    assert "/dev/shm is too small" in errors[0] and "--shm-size" in errors[0], p.stderr
    assert p.stdout == ""  # no table of cells that measured nothing


def test_bench_without_vllm_says_loudly_that_nothing_is_compared():
    p = run(*QUICK_BENCH, "--queues", "rdmaq-shm,vllm", block=["vllm"])
    assert p.returncode == 0, p.stderr
    warnings = [line for line in p.stderr.splitlines() if "WARNING: no comparison with vLLM" in line]
    # once before the run, once under the table, each naming how to install vLLM
    assert len(warnings) == 2 and all("rdmaq vllm install-cpu" in w for w in warnings), p.stderr
    assert p.stderr.splitlines()[-1] == warnings[-1]


def test_bench_of_rdmaq_alone_gives_no_warning():
    p = run(*QUICK_BENCH, "--queues", "rdmaq-shm", block=["vllm"])
    assert p.returncode == 0 and "WARNING" not in p.stderr, p.stderr


def test_vllm_check_without_vllm_names_the_install():
    one_line_error(run("vllm", "check", block=["vllm"]), 1, "rdmaq vllm", "vLLM is not installed",
                   "rdmaq vllm install-cpu")
