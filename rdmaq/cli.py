"""The ``rdmaq`` command: subcommands live in their own modules, and what they share in
rdmaq/command.py (none imports this module).

Exit status of every subcommand: 0 done, 1 the run failed (a peer died, no
usable transport, a package missing), 2 bad arguments, 130 interrupted
(Ctrl-C), 143 terminated (SIGTERM), 141 its output was closed (``| head``).
Errors are one line on stderr; RDMAQ_TRACEBACK=1 adds the Python traceback.
A command's child processes leave Ctrl-C to it (rdmaq.command.quiet_spawn_context): the
terminal's SIGINT to the whole process group ends the command with one line.
"""
from __future__ import annotations

import importlib
import io
import os
import select
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

from . import settings
from .command import (
    EXIT_INTERRUPTED,
    EXIT_OUTPUT_CLOSED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    ArgumentParser,
    fail,
    missing_package,
)

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
STDOUT_FD = 1


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that the command cleans up as for Ctrl-C."""


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
