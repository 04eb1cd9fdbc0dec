"""The ``rdmaq`` command: subcommands live in their own modules.

Exit status of every subcommand: 0 done, 1 the run failed (a peer died, no
usable transport, a package missing), 2 bad arguments, 130 interrupted
(Ctrl-C), 143 terminated (SIGTERM), 141 its output was closed (``| head``).
Errors are one line on stderr; RDMAQ_TRACEBACK=1 adds the Python traceback.
A command's child processes leave Ctrl-C to it (quiet_spawn_context): the
terminal's SIGINT to the whole process group ends the command with one line.
"""
from __future__ import annotations

import argparse
import importlib
import io
import multiprocessing.context
import os
import re
import select
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from multiprocessing import resource_tracker
from types import FrameType
from typing import Any, NoReturn

from . import settings

# name -> (module:function taking argv and returning an exit code, help, extra)
# extra: the pip extra holding the packages the subcommand imports beyond rdmaq's own.
SUBCOMMANDS: dict[str, tuple[str, str, str | None]] = {
    "bench": ("rdmaq.bench.cli:main", "dequeue latency vs vLLM's MessageQueue, idle and contended",
              "bench"),
    "doctor": ("rdmaq.doctor:main", "list RDMA devices, ports, GIDs and usable transports", None),
    "softroce": ("rdmaq.softroce:main", "create or remove a SoftRoCE (rxe) device", None),
    "demo": ("rdmaq.demo:main", "broadcast to N reader processes and print what they got", None),
    "vllm": ("rdmaq.vllm.cli:main", "install a CPU build of vLLM here; check that the plugin is active",
             None),
}

# The commands that check every RDMAQ_* setting before they start anything (doctor reports
# a bad one instead).
CHECKS_SETTINGS = ("demo", "bench")
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM
EXIT_OUTPUT_CLOSED = 128 + signal.SIGPIPE  # what a shell reports for a tool SIGPIPE killed
STDOUT_FD = 1


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that the command cleans up as for Ctrl-C."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """--help shows each option's default and keeps the description's line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (text and action.option_strings and "%(default)" not in text
                and action.default not in (None, False, argparse.SUPPRESS)):
            text += " (default: %(default)s)"
        return text


class ArgumentParser(argparse.ArgumentParser):
    """argparse, answering bad input with one line (no usage dump) and exit status 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        # argparse reports a subcommand's unknown option from the top parser; name the
        # subcommand (`rdmaq vllm check: error: ...`), whose --help lists its options
        ns, rest = self.parse_known_args(args, namespace)
        if rest:
            self._chosen(ns).error(f"unrecognized arguments: {' '.join(rest)}")
        return ns

    def _chosen(self, ns: argparse.Namespace) -> argparse.ArgumentParser:
        """The innermost (sub)parser the parsed command line chose."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and action.dest is not argparse.SUPPRESS:
                sub = action.choices.get(getattr(ns, action.dest, None) or "")
                if isinstance(sub, ArgumentParser):
                    return sub._chosen(ns)
                if isinstance(sub, argparse.ArgumentParser):
                    return sub
        return self


_SIZE = re.compile(r"^\s*(\d+)\s*([kKmMgG]?)[bB]?\s*$")


def parse_size(text: str) -> int:
    """A byte count: 64, 2K, 40K, 1M, 1G (powers of 1024), for every size option."""
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r}: use bytes, or a number with K, M or G "
                                         "(e.g. 2K)")
    n = int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]
    if n <= 0:
        raise argparse.ArgumentTypeError(f"bad size {text!r}: must be positive")
    return n


def bounded(parse: Callable[[str], int], lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: ``parse`` (int, parse_size), then lo <= value <= hi."""
    def check(text: str) -> int:
        try:
            v = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"must be {f'in {lo}..{hi}' if hi is not None else f'>= {lo}'}, "
                                             f"got {v}")
        return v
    check.__name__ = getattr(parse, "__name__", "value")  # argparse names the type in errors
    return check


def missing_package(module: str, extra: str | None = None) -> str:
    """What to say when a package pip did not install is needed: which, and how to get it."""
    # rdmaq is on no package index: its extras install from a checkout
    how = f'pip install ".[{extra}]" in rdmaq\'s checkout' if extra else f"pip install {module}"
    return f"needs the Python package {module!r}, which is not installed: {how}"


def fail(prog: str, message: str, status: int = EXIT_FAILED) -> int:
    """Print `prog: message` on stderr and return the exit status (for `return fail(...)`)."""
    print(f"{prog}: {message}", file=sys.stderr)
    return status


class _QuietSpawnProcess(multiprocessing.context.SpawnProcess):
    def start(self) -> None:
        # A blocked signal stays blocked across fork and exec: the child never sees the
        # terminal's SIGINT; the command sees it (once unblocked here) and stops the child.
        # The resource tracker first: starting it unblocks SIGINT on its way out.
        resource_tracker.ensure_running()
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            super().start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


class _QuietSpawnContext(multiprocessing.context.SpawnContext):
    Process = _QuietSpawnProcess


def quiet_spawn_context() -> multiprocessing.context.SpawnContext:
    """multiprocessing's spawn context, for a command's children: Ctrl-C reaches the command
    alone (no traceback from every child), which then ends them and cleans up."""
    return _QuietSpawnContext()


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


def _stdout_closed() -> bool:
    """Whether stdout is a pipe or socket whose reader has gone (poll says POLLERR/POLLHUP)."""
    try:
        poller = select.poll()
        poller.register(STDOUT_FD, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError):
        return False


def _drop_stdout() -> None:
    """Send what is left in stdout's buffer, and everything later, to /dev/null: the
    interpreter's final flush must not fail again on the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, STDOUT_FD)
    os.close(devnull)


@contextmanager
def _command_signals() -> Iterator[None]:
    """SIGTERM ends the command like Ctrl-C (cleanup, one line); stdout is line-buffered,
    so that `rdmaq demo > file` shows each line as it happens, even if the run is killed."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    old = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _run(prog: str, target: str, extra: str | None, argv: Sequence[str]) -> int:
    module, func = target.split(":")
    try:
        status: int | None = getattr(importlib.import_module(module), func)(argv)
        return status or 0
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if _traceback_wanted() or top in ("", "rdmaq"):
            raise
        return fail(prog, missing_package(top, extra))


def usage_line() -> str:
    """What bare `rdmaq` says: one line, then the commands (not a screen of options)."""
    width = max(map(len, SUBCOMMANDS))
    lines = [f"  {name:<{width}}  {help_text}" for name, (_, help_text, _) in SUBCOMMANDS.items()]
    return "\n".join(["rdmaq: missing COMMAND (rdmaq COMMAND --help shows its options):", *lines])


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = ArgumentParser(
        prog="rdmaq",
        description="RDMA-backed one-writer/N-reader IPC for tensor-parallel LLM workers.",
        epilog="Run `rdmaq COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text, _) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.version:
        from . import __version__

        print(__version__)
        return 0
    if args.command is None:
        print(usage_line(), file=sys.stderr)
        return EXIT_USAGE
    prog = f"rdmaq {args.command}"
    target, _, extra = SUBCOMMANDS[args.command]
    if args.command in CHECKS_SETTINGS:
        try:  # here, not in the children it starts, where it would hide behind a timeout
            settings.check_environment()
        except ValueError as e:
            return fail(prog, str(e), EXIT_USAGE)
    try:
        with _command_signals():
            return _run(prog, target, extra, rest)
    except KeyboardInterrupt:
        return fail(prog, "interrupted", EXIT_INTERRUPTED)
    except Terminated:
        return fail(prog, "terminated", EXIT_TERMINATED)
    except BrokenPipeError as e:
        if _stdout_closed():  # `rdmaq demo | head -1`: stop quietly, as a Unix tool does
            _drop_stdout()
            return EXIT_OUTPUT_CLOSED
        return _failed(prog, e)
    except Exception as e:
        return _failed(prog, e)


def _traceback_wanted() -> bool:
    """RDMAQ_TRACEBACK=1; a bad value is no (check_environment names it)."""
    try:
        return bool(settings.value("RDMAQ_TRACEBACK"))
    except ValueError:
        return False


def _failed(prog: str, e: Exception) -> int:
    """One line for a user; RDMAQ_TRACEBACK=1 shows the traceback instead."""
    if _traceback_wanted():
        raise e
    return fail(prog, f"{type(e).__name__}: {e} (RDMAQ_TRACEBACK=1 shows where)")

if __name__ == "__main__":
    sys.exit(main())
