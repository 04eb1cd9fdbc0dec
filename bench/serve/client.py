"""``vllm bench serve`` kept running between runs: vLLM's benchmark client imported once.

Each ``vllm bench serve`` process imports vLLM, torch and transformers before it sends its
first request: seconds of CPU per run, more under CPU hogs, which a sweep of dozens of runs
pays again and again. This process imports the client once, then reads one JSON line per run
from stdin, ``{"argv": [...]}`` with the arguments ``vllm bench serve`` would get, and runs
vLLM's own entry point of that command (``vllm.benchmarks.serve.main``) with them, so the
requests, the dataset and the result file are the CLI's. After each run it prints
``DONE_LINE <exit status>`` (and any error on the lines before). The harness reads its output
as it reads a ``vllm bench serve`` process's (bench/serve/main.py).

``BenchClient`` is the harness's side: the same ``run()`` for a ``vllm bench serve`` process per
run ("spawn") and for this process ("persistent").

Usage (by bench/serve/main.py): python -m rdmaq.bench.serve.client
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable

DONE_LINE = "RDMAQ-SERVE-CLIENT-DONE"
READY_LINE = "RDMAQ-SERVE-CLIENT-READY"


def _parser():
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    return parser


def run_one(parser, argv: list[str]) -> int:
    from vllm.benchmarks.serve import main as bench_main

    try:
        args = parser.parse_args(argv)
        bench_main(args)
        return 0
    except SystemExit as e:  # argparse, or the client's own exits
        return e.code if isinstance(e.code, int) else 1
    except Exception:
        traceback.print_exc(file=sys.stdout)
        return 1


def main() -> int:
    parser = _parser()
    print(READY_LINE, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            argv = json.loads(line)["argv"]
        except (ValueError, KeyError, TypeError) as e:
            print(f"bad request line {line!r}: {e}", flush=True)
            print(f"{DONE_LINE} 2", flush=True)
            continue
        rc = run_one(parser, [str(a) for a in argv])
        print(f"{DONE_LINE} {rc}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())


class BenchClient:
    """Runs ``vllm bench serve`` with given arguments, passing each output line to a callback."""

    def __init__(self, mode: str, vllm: str, env: dict, prefix: list[str] | None = None):
        if mode not in ("spawn", "persistent"):
            raise ValueError(f"client mode must be spawn or persistent, not {mode!r}")
        self.mode, self.vllm, self.env = mode, vllm, env
        self.prefix = list(prefix or [])  # runs it on the client's CPUs (bench/serve/confine.py)
        self.proc: subprocess.Popen | None = None  # the persistent one

    def command(self, argv: list[str]) -> list[str]:
        return [self.vllm, "bench", "serve", *argv]

    def run(self, argv: list[str], on_line: Callable[[str], None], timeout: float) -> int | None:
        """Exit status of the run (None: killed at the timeout)."""
        if self.mode == "spawn":
            return self._spawned(argv, on_line, timeout)
        return self._persistent(argv, on_line, timeout)

    def _spawned(self, argv, on_line, timeout) -> int | None:
        proc = subprocess.Popen(self.prefix + self.command(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=self.env, start_new_session=True)
        timer = threading.Timer(timeout, _kill_group, (proc,))
        timer.start()
        assert proc.stdout is not None  # stdout=PIPE
        try:
            for line in proc.stdout:
                on_line(line)
            proc.wait()
        finally:
            timer.cancel()
            _kill_group(proc)
        return proc.returncode

    def _start(self, on_line) -> subprocess.Popen:
        proc = subprocess.Popen([*self.prefix, sys.executable, "-m", "rdmaq.bench.serve.client"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=self.env,
                                start_new_session=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(READY_LINE):
                return proc
            on_line(line)
        proc.wait()
        raise RuntimeError(f"the persistent client exited with {proc.returncode} before it was ready")

    def _persistent(self, argv, on_line, timeout) -> int | None:
        killed = threading.Event()

        def kill():
            killed.set()
            if self.proc is not None:
                _kill_group(self.proc)

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            if self.proc is None or self.proc.poll() is not None:
                self.proc = self._start(on_line)  # its import time counts in the timeout
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(json.dumps({"argv": argv}) + "\n")
            self.proc.stdin.flush()
            for line in self.proc.stdout:
                if line.startswith(DONE_LINE):
                    return int(line.split()[1])
                on_line(line)
            self.proc = None
            return None if killed.is_set() else -1  # the client died mid-run
        except (OSError, RuntimeError, ValueError) as e:
            on_line(f"rdmaq bench serve: the persistent client failed: {e}\n")
            self.close()
            return None if killed.is_set() else -1
        finally:
            timer.cancel()

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
