"""rdmaq.bench: the benchmarks of rdmaq against vLLM's MessageQueue, one package each.

``rdmaq bench`` (``rdmaq.bench.cli:main``) dispatches: the microbenchmark (micro), the serving
benchmark (serve), a TP step's barrier (step); what they share is in common.  Runs on the GPU
machine: bench/device/ (scripts, not part of the package).  See docs/benchmarks.md.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
