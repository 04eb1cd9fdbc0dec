"""A reader polling with short timeouts after a bursty writer stops: the pause is not "due".

Policy "auto" spins for a message the writer's rhythm says can come; against the longest of
the last intervals, a writer pausing between bursts made its whole pause due, and a reader
polling 1 ms at a time (as vLLM's readers do) spun through it instead of sleeping.  No timing
asserts: the counters say whether each poll of the pause slept.
"""
import time

import rdmaq
from children import CTX, TIMEOUT

BURSTS, BURST, STEP_S, PAUSE_S = 8, 5, 0.001, 0.1
COUNT = BURSTS * BURST


def _polling_reader(handle, out):
    try:
        with rdmaq.Reader(handle, 0, policy="auto") as r:
            r.wait_ready(timeout=TIMEOUT)
            got = []
            while len(got) < COUNT:
                try:
                    got.append(int.from_bytes(r.get(timeout=0.001)[:8], "little"))
                except TimeoutError:
                    pass
            last = time.monotonic()
            # Past the writer's 1 ms rhythm and the free spin (20 ms) after it, well within
            # the pause the longest interval would call due, and past it.
            while time.monotonic() < last + 0.05:
                try:
                    r.get(timeout=0.001)
                except TimeoutError:
                    pass
            before, polls = r.stats, 0
            while time.monotonic() < last + 0.3:
                try:
                    r.get(timeout=0.001)
                except TimeoutError:
                    polls += 1
            out.put(("ok", got, polls, before, r.stats))
    except Exception as e:  # noqa: BLE001 - reported to the test
        out.put(("error", repr(e), 0, None, None))


def test_a_polling_reader_sleeps_through_the_pause_after_a_bursty_writer_stops():
    out = CTX.Queue()
    with rdmaq.Writer(1, transport="shm") as w:
        p = CTX.Process(target=_polling_reader, args=(w.handle, out), daemon=True)
        p.start()
        try:
            w.wait_ready(timeout=TIMEOUT)
            i = 0
            for _ in range(BURSTS):
                for _ in range(BURST):
                    w.put(i.to_bytes(8, "little") + bytes(56), timeout=TIMEOUT)
                    i += 1
                    time.sleep(STEP_S)
                time.sleep(PAUSE_S)
            status, got, polls, before, after = out.get(timeout=TIMEOUT)
        finally:
            p.join(TIMEOUT)
    assert status == "ok", got
    assert got == list(range(COUNT))
    assert polls > 0
    # Every poll of the pause slept in the kernel: none spun to its timeout.
    assert after["sleeps"] - before["sleeps"] >= polls
    assert after["spins"] == before["spins"]
