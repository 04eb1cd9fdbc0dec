"""``rdmaq bench [serve|step|sweep] ...``: which benchmark runs; each parses its own arguments.

    rdmaq bench ...          the microbenchmark (bench/micro): one writer, N reader processes
    rdmaq bench serve ...    the serving benchmark (bench/serve): ``vllm serve`` per queue
    rdmaq bench step ...     a TP step's barrier on one machine (bench/step)
    rdmaq bench sweep ...    the idle tail against reader CPU, from a microbenchmark result
    rdmaq bench compare REV  this checkout against commit REV, interleaved on this machine
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else None
    if command == "serve":
        from .serve.main import main as serve_main

        return serve_main(argv[1:])
    if command == "step":
        from .step.main import main as step_main

        return step_main(argv[1:])
    if command == "sweep":
        from .micro.sweep import main as sweep_main

        return sweep_main(argv[1:])
    if command == "compare":
        from .compare import main as compare_main

        return compare_main(argv[1:])
    from .micro.main import main as micro_main

    return micro_main(argv)


if __name__ == "__main__":
    sys.exit(main())
