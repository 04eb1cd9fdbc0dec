"""An idle reader blocks in the kernel instead of burning a core."""
import rdmaq
from children import idle_reader, start


def test_idle_readers_use_under_5_percent_cpu(transport, procs, results):
    seconds = 2.0
    with rdmaq.Writer(2, transport=transport) as w:
        procs += [start(idle_reader, w.handle, i, seconds, results) for i in range(2)]
        w.wait_ready(timeout=300)
        got = [results.get(timeout=300) for _ in range(2)]
    for g in got:
        assert g[1] == "idle", g
        index, _, cpu, stats = g
        # CPU time over the known idle interval (the get's timeout), not wall time
        assert cpu < 0.05 * seconds, f"reader {index} used {cpu:.3f} s CPU in a {seconds} s idle get"
        assert stats["sleeps"] >= 1
