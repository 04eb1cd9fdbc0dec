"""vLLM's queue with rdmaq's stage stamps (bench/common/vllm_stages.py): the stamps come in
the order of the path, and the reader's class survives create_from_handle."""
import importlib.util
import os
import threading

import pytest

from rdmaq.bench.common import queues
from rdmaq.bench.common.vllm_stages import HOW_READY, traced

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="missing dependency: vllm (tests/bench/ci.sh installs it --no-deps)")


def test_stamps_follow_the_path():
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    adapter = queues.VllmAdapter()
    adapter.stages = True
    adapter.prepare()
    w, handle = adapter.create_writer(1)
    box = {}

    def attach():
        box["r"] = adapter.open_reader(handle, 0)
        adapter.reader_ready(box["r"])

    t = threading.Thread(target=attach)
    t.start()
    adapter.writer_ready(w)
    t.join(30)
    r = box["r"]
    assert type(r) is type(w) is traced(type(w).__mro__[1])
    wt, rt = adapter.writer_tracer(w), adapter.reader_tracer(r)
    for i in range(3):
        adapter.sender(w)((0, i, 0, b"x" * 100))
        start, mid, end = wt()
        assert 0 < start <= mid <= end
        assert adapter.receiver(r)()[1] == i
        stamp, seen, copied, how = rt()
        assert stamp == 0  # vLLM's ring has no stamp: the report takes the writer's
        assert mid <= seen <= copied and how == HOW_READY  # sent before the receive began
    adapter.close_reader(r)
    w.shutdown()


def test_without_stages_the_queue_is_vllms_own():
    adapter = queues.VllmAdapter()
    assert adapter.writer_tracer(object()) is None and adapter.reader_tracer(object()) is None
