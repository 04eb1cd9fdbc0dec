"""What every ``rdmaq`` subcommand shares, apart from the command that dispatches to them
(rdmaq/cli.py): the exit statuses, an argument parser that answers bad input with one line and
status 2, argument types (sizes, bounds), the one-line failure and missing-package messages, and
a spawn context whose children leave Ctrl-C to the command.  Subcommands import this module,
never their caller."""
from __future__ import annotations

import argparse
import multiprocessing.context
import re
import signal
import sys
from collections.abc import Callable, Sequence
from multiprocessing import resource_tracker
from typing import Any, NoReturn

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM
EXIT_OUTPUT_CLOSED = 128 + signal.SIGPIPE  # what a shell reports for a tool SIGPIPE killed


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
