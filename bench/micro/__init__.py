"""``rdmaq bench``: the microbenchmark.  One writer and N reader processes per queue, the same
harness for every queue (runner, proc), one-way dequeue latency, throughput and reader CPU
(report, plot); ``rdmaq bench sweep`` reads its results (sweep); scheduler tracing (schedtrace)."""
