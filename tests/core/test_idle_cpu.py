"""An idle reader blocks in the kernel instead of burning a core."""
import rdmaq
from conftest import start
from readers import idle_reader


def test_idle_readers_use_under_5_percent_cpu(procs, results):
    seconds = 2.0
    with rdmaq.Writer(2, transport="shm") as w:
        procs += [start(idle_reader, w.handle, i, seconds, results) for i in range(2)]
        w.wait_ready(timeout=60)
        got = [results.get(timeout=60) for _ in range(2)]
    for index, kind, cpu, wall, stats in got:
        assert kind == "idle"
        assert cpu < 0.05 * wall, f"reader {index} used {cpu:.3f} s CPU in {wall:.2f} s idle"
        assert stats["sleeps"] >= 1
