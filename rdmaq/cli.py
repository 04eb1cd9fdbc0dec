"""The ``rdmaq`` command: subcommands live in their own modules."""
import argparse
import importlib
import sys

# name -> (module:function taking argv and returning an exit code, help)
SUBCOMMANDS = {
    "bench": ("rdmaq_bench.cli:main", "dequeue latency vs vLLM's MessageQueue, idle and contended"),
    "doctor": ("rdmaq.doctor:main", "list RDMA devices, ports, GIDs and usable transports"),
    "softroce": ("rdmaq.softroce:main", "create or remove a SoftRoCE (rxe) device"),
    "demo": ("rdmaq.demo:main", "broadcast to N reader processes and print what they got"),
}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="rdmaq",
        description="RDMA-backed one-writer/N-reader IPC for tensor-parallel LLM workers.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.version:
        from . import __version__

        print(__version__)
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    target, _ = SUBCOMMANDS[args.command]
    module, func = target.split(":")
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        print(f"rdmaq {args.command}: not available ({e})", file=sys.stderr)
        return 2
    return getattr(mod, func)(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
