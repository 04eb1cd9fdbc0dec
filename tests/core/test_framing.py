"""Property test of the framing: any message sizes, any ring geometry."""
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

import rdmaq

geometry = st.tuples(st.sampled_from([128, 192, 256, 1024]), st.integers(2, 9))
messages = st.lists(st.binary(max_size=3000) | st.integers(0, 5000).map(lambda n: bytes([n % 251]) * n),
                    max_size=25)


@settings(max_examples=60, deadline=None)
@given(geometry=geometry, msgs=messages)
def test_any_sizes_any_geometry_arrive_intact(geometry, msgs):
    slot_bytes, slots = geometry
    with rdmaq.Writer(2, transport="shm", slot_bytes=slot_bytes, slots=slots, spin_us=5) as w:
        readers = [rdmaq.Reader(w.handle, i) for i in range(2)]
        got = [[], []]

        def drain(i):
            for _ in msgs:
                got[i].append(bytes(readers[i].get(timeout=30)))

        threads = [threading.Thread(target=drain, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for m in msgs:
            w.put(m, timeout=30)
        for t in threads:
            t.join(60)
        assert got == [msgs, msgs]
        for r in readers:
            r.close()
