"""The ``rdmaq`` command: subcommands live in their own modules.

Exit status of every subcommand: 0 done, 1 the run failed (a peer died, no
usable transport, a package missing), 2 bad arguments, 130 interrupted.
Errors are one line on stderr; RDMAQ_TRACEBACK=1 adds the Python traceback.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

# name -> (module:function taking argv and returning an exit code, help, extra)
# extra: the pip extra holding the packages the subcommand imports beyond rdmaq's own.
SUBCOMMANDS: dict[str, tuple[str, str, str | None]] = {
    "bench": ("rdmaq.bench.cli:main", "dequeue latency vs vLLM's MessageQueue, idle and contended",
              "bench"),
    "doctor": ("rdmaq.doctor:main", "list RDMA devices, ports, GIDs and usable transports", None),
    "softroce": ("rdmaq.softroce:main", "create or remove a SoftRoCE (rxe) device", None),
    "demo": ("rdmaq.demo:main", "broadcast to N reader processes and print what they got", None),
}

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


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


def missing_package(module: str, extra: str | None = None) -> str:
    """What to say when a package pip did not install is needed: which, and how to get it."""
    how = f'pip install "rdmaq[{extra}]"' if extra else f"pip install {module}"
    return f"needs the Python package {module!r}, which is not installed: {how}"


def fail(prog: str, message: str, status: int = EXIT_FAILED) -> int:
    """Print `prog: message` on stderr and return the exit status (for `return fail(...)`)."""
    print(f"{prog}: {message}", file=sys.stderr)
    return status


def _run(prog: str, target: str, extra: str | None, argv: Sequence[str]) -> int:
    module, func = target.split(":")
    try:
        status: int | None = getattr(importlib.import_module(module), func)(argv)
        return status or 0
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if os.environ.get("RDMAQ_TRACEBACK") == "1" or top in ("", "rdmaq"):
            raise
        return fail(prog, missing_package(top, extra))


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
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    prog = f"rdmaq {args.command}"
    target, _, extra = SUBCOMMANDS[args.command]
    try:
        return _run(prog, target, extra, rest)
    except KeyboardInterrupt:
        return fail(prog, "interrupted", EXIT_INTERRUPTED)
    except Exception as e:  # no traceback for a user; RDMAQ_TRACEBACK=1 shows it
        if os.environ.get("RDMAQ_TRACEBACK") == "1":
            raise
        return fail(prog, f"{type(e).__name__}: {e} (RDMAQ_TRACEBACK=1 shows where)")


if __name__ == "__main__":
    sys.exit(main())
