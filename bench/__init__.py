"""rdmaq.bench: dequeue-latency benchmark of rdmaq against vLLM's MessageQueue.

``rdmaq bench`` (``rdmaq.bench.cli:main``) runs one writer process and N reader
processes per queue, with the same harness and process layout for every queue,
and reports one-way latency, throughput and CPU time. See docs/benchmarks.md.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
