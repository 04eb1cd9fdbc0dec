"""conftest for vLLM's own MessageQueue tests, run against rdmaq's class.

tests/vllm/ci.sh copies the test files of every supported release but the CPU
build's (vLLM 0.33.0, 0.34.0, and 0.26.0, the vLLM of the GPU run,
docs/benchmarks/gpu-setup.md), from their sdists (cached under ~/.cache, never into this
repo) and this file, as conftest.py, into a scratch directory and runs pytest
there, once per version.  (It is not named conftest.py here so that a
pytest run over tests/ in an environment without vLLM does not import it.)  This
module is imported before the test modules, so the plugin's swap of
``shm_broadcast.MessageQueue`` is what their
``from ...shm_broadcast import MessageQueue`` binds; forked test children
inherit it.  ``RDMAQ_UPSTREAM_IMPL=vllm`` runs the same selection against
vLLM's own class (a baseline).

Tests that assert vLLM's internals rather than the queue's contract are
deselected, each with its reason (printed at the end of the run). vLLM 0.33.0:
of test_shm_broadcast.py's 61 cases 10 run and 51 are deselected, of
test_mq_connect_ip.py's 3 cases 2 run, test_multiproc_executor.py's 13 all run.
vLLM 0.34.0: of test_shm_broadcast.py's 65 cases 12 run and 53 are deselected
(0.33's, and two that call readable/spin_until_readable on a mock of vLLM's
remote socket), 2 of 3 and 13 of 13 as in 0.33.
vLLM 0.26.0: of test_shm_broadcast.py's 6 cases 2 run and 4 are deselected (the
SpinCondition ones, as in 0.33), of test_mq_connect_ip.py's 3 cases 2 run; it has
no test_multiproc_executor.py (its tests/v1/executor/test_executor.py builds
engines of downloaded models: no MessageQueue test).
Where a deselected case checks behaviour a caller sees, its reason names the
test that checks it on rdmaq's class (tests/vllm/test_queue.py, or
tests/vllm/test_upstream_adapted.py, which adapts those cases).
"""

from __future__ import annotations

import inspect
import logging
import os
from importlib.metadata import version

import pytest
import vllm.distributed.device_communicators.shm_broadcast as _sb

IMPL = os.environ.get("RDMAQ_UPSTREAM_IMPL", "rdmaq")
if IMPL == "rdmaq":
    from rdmaq.vllm import plugin
    from rdmaq.vllm.queue import RdmaqMessageQueue

    plugin.apply("rdmaq")
    assert _sb.MessageQueue is RdmaqMessageQueue
elif IMPL != "vllm":
    raise pytest.UsageError(f"RDMAQ_UPSTREAM_IMPL must be rdmaq or vllm, not {IMPL!r}")

_SPIN = "asserts vLLM's SpinCondition internals (busy_loop_s/last_read/wait() counts)"
_OVERFLOW = (
    "asserts that a message >= max_chunk_bytes goes through the ZMQ overflow "
    "path (MessageQueue.recv); rdmaq streams it through the ring instead"
)
_HELPER = "tests a module-level helper, not the MessageQueue class"
_ARENA = "shm tensor arena internals: rdmaq accepts enable_shm_tensor_arena and ignores it"
# where the behaviour a deselected case checks is tested on rdmaq's class instead
_QUEUE = "tests/vllm/test_queue.py::"
_ADAPTED = "tests/vllm/test_upstream_adapted.py::"
_SHM_SPACE = (
    f"; the behaviour (an undersized /dev/shm is an error at creation): "
    f"{_ADAPTED}test_queue_larger_than_dev_shm_fails_at_creation"
)
_ARENA_FLAG = (
    f"; large tensors with the flag on: {_ADAPTED}test_arena_flag_broadcast_across_processes "
    f"and test_tensor_kinds_roundtrip_through_the_queue[*_big]"
)

# test id prefix -> reason.  A prefix ending in "[" deselects matching params.
DESELECT: dict[str, str] = {
    "test_shm_broadcast.py::test_distributed_run_reports_timeout": (
        "tests the file's process harness, not the queue"
    ),
    "test_shm_broadcast.py::test_message_queue_shutdown_busy": (
        f"{_SPIN} to set up busy mode; the behaviour: "
        f"{_QUEUE}test_shutdown_from_another_thread_cancels_dequeue[busy]"
    ),
    "test_shm_broadcast.py::test_message_queue_shutdown_idle": (
        f"{_SPIN} to set up idle mode; the behaviour: "
        f"{_QUEUE}test_shutdown_from_another_thread_cancels_dequeue[idle]"
    ),
    "test_shm_broadcast.py::test_message_queue_idle_wake": (
        f"{_SPIN}; the wake-ups: {_ADAPTED}test_readers_wake_from_idle_and_after_busy"
    ),
    "test_shm_broadcast.py::test_message_queue_busy_to_idle": (
        f"{_SPIN}; the wake-ups: {_ADAPTED}test_readers_wake_from_idle_and_after_busy"
    ),
    "test_shm_broadcast.py::test_tensor_broadcast": (
        f"{_OVERFLOW}; the payload checks: {_QUEUE}test_big_tensors_like_vllm_tensor_broadcast"
    ),
    "test_shm_broadcast.py::test_broadcast_retains_values_after_ring_reuse[overflow-": (
        f"{_OVERFLOW}; the payload checks: "
        f"{_QUEUE}test_values_survive_ring_reuse_and_keep_writeability[5242880-*]"
    ),
    "test_shm_broadcast.py::test_tensor_pickle_roundtrip[": (
        f"{_HELPER} (_reduce_tensor/_rebuild_tensor); the same tensors through the queue: "
        f"{_ADAPTED}test_tensor_kinds_roundtrip_through_the_queue"
    ),
    "test_shm_broadcast.py::test_reduce_tensor_fallback[": (
        f"{_HELPER} (_reduce_tensor); requires_grad and conj through the queue: "
        f"{_ADAPTED}test_tensor_kinds_roundtrip_through_the_queue (cuda: no GPU here)"
    ),
    "test_shm_broadcast.py::test_reader_timeout_caps_indefinite_waits[": (
        "MessageQueue.ReadTimeoutWithWarnings internals"
    ),
    "test_shm_broadcast.py::test_reader_rechecks_shm_after_idle_wait_timeout_without_notify": (
        "drives vLLM's notify socket and poller, which rdmaq does not have"
    ),
    "test_shm_broadcast.py::test_busy_reader_consumes_write_notifications": (
        "drives vLLM's notify socket, which rdmaq does not have"
    ),
    "test_shm_broadcast.py::test_acquire_read_releases_slot_when_reader_raises": (
        "drives vLLM's chunk-level acquire_read, which rdmaq does not have; the behaviour: "
        f"{_ADAPTED}test_reader_error_leaves_the_queue_usable"
    ),
    "test_shm_broadcast.py::test_check_shm_free_space_": (
        f"{_HELPER} (check_shm_free_space){_SHM_SPACE}"
    ),
    "test_shm_broadcast.py::test_shm_ring_buffer_creation_checks_free_space": (
        f"{_HELPER} (ShmRingBuffer){_SHM_SPACE}"
    ),
    "test_shm_broadcast.py::test_shm_tensor_arena_creation_checks_free_space": _ARENA + _SHM_SPACE,
    "test_shm_broadcast.py::test_arena_": _ARENA + _ARENA_FLAG,
    "test_shm_broadcast.py::test_tensor_arena_registry_is_weak_and_survives_shutdown": _ARENA,
    "test_shm_broadcast.py::test_create_from_handle_tolerates_arena_attach_failure": _ARENA,
    "test_shm_broadcast.py::test_spin_until_readable_sleeps_on_remote_socket": (
        "calls the method on a mock with vLLM's remote_socket; rdmaq's remote reader waits in "
        f"a poller of its own; the behaviour: {_QUEUE}test_readable_tells_without_taking_the_"
        "message_from_dequeue[remote]"
    ),
    "test_shm_broadcast.py::test_readable_does_not_wait_on_remote_socket": (
        "calls the method on a mock with vLLM's remote_socket; rdmaq's remote reader waits in "
        f"a poller of its own; the behaviour: {_QUEUE}test_readable_tells_without_taking_the_"
        "message_from_dequeue[remote]"
    ),
    "test_mq_connect_ip.py::test_mq_bind_with_non_local_ip_fails": (
        "binds 198.51.100.1, a non-loopback address; this project's tests stay "
        "on loopback"
    ),
}


# (cases run, cases deselected) per file and vLLM release, as README.md and docs/vllm.md
# state them; a vLLM update that changes them fails the run until they are updated there too.
COUNTS_BY_VLLM = {
    "0.34": {
        "test_shm_broadcast.py": (12, 53),
        "test_mq_connect_ip.py": (2, 1),
        "test_multiproc_executor.py": (13, 0),
    },
    "0.33": {
        "test_shm_broadcast.py": (10, 51),
        "test_mq_connect_ip.py": (2, 1),
        "test_multiproc_executor.py": (13, 0),
    },
    "0.26": {
        "test_shm_broadcast.py": (2, 4),
        "test_mq_connect_ip.py": (2, 1),
    },
}
VLLM_MINOR = ".".join(version("vllm").split(".")[:2])
if VLLM_MINOR not in COUNTS_BY_VLLM:
    raise pytest.UsageError(f"vLLM {version('vllm')}: no upstream selection for it here "
                            f"(have {sorted(COUNTS_BY_VLLM)})")
COUNTS = COUNTS_BY_VLLM[VLLM_MINOR]
# DESELECT was written against the newest release's files; an older release lacks some tests
NEWEST = max(COUNTS_BY_VLLM, key=lambda v: tuple(map(int, v.split("."))))


# test_shm_broadcast.py's distributed_run() kills its ranks after 60 s: a wall-clock
# limit that a loaded 2-core machine exceeds (its 4 ranks move ~400 MB each, twice).
# Here it is a hang guard only.
HARNESS_TIMEOUT_S = float(os.environ.get("RDMAQ_UPSTREAM_TIMEOUT", "600"))


def _relax_harness_timeout(module) -> None:
    run = getattr(module, "distributed_run", None)
    if run is None or not run.__defaults__:
        return
    params = [p for p in inspect.signature(run).parameters.values()
              if p.default is not inspect.Parameter.empty]
    run.__defaults__ = tuple(
        max(p.default, HARNESS_TIMEOUT_S) if p.name == "timeout" else p.default
        for p in params)


def _reason(nodeid: str) -> str | None:
    name = nodeid.rsplit("/", 1)[-1]
    for prefix, reason in DESELECT.items():
        if name.startswith(prefix):
            return reason
    return None


def pytest_collection_modifyitems(config, items):
    if IMPL == "rdmaq":
        # The swap must have happened before the test modules bound the name.
        for module in {item.module for item in items if hasattr(item, "module")}:
            bound = getattr(module, "MessageQueue", RdmaqMessageQueue)
            if bound is not RdmaqMessageQueue:
                raise pytest.UsageError(
                    f"{module.__name__}.MessageQueue is {bound!r}, not rdmaq's"
                )
    for module in {item.module for item in items if hasattr(item, "module")}:
        _relax_harness_timeout(module)
    keep, dropped = [], []
    for item in items:
        reason = _reason(item.nodeid)
        (dropped if reason else keep).append((item, reason))
    if dropped:
        config.hook.pytest_deselected(items=[i for i, _ in dropped])
        items[:] = [i for i, _ in keep]
    counts: dict[str, list[int]] = {}
    for item, reason in keep + dropped:
        counts.setdefault(item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1], [0, 0])[
            reason is not None] += 1
    counts = {f: tuple(c) for f, c in counts.items()}
    whole_files = sorted(config.args) == sorted(COUNTS) and not (
        config.getoption("keyword") or config.getoption("markexpr"))
    if whole_files and counts != COUNTS:  # (a partial selection has other counts)
        raise pytest.UsageError(
            f"(run, deselected) per file is {counts}, not {COUNTS}: update COUNTS here and "
            "the numbers in README.md and docs/vllm.md")
    config._rdmaq_counts = counts
    config._rdmaq_deselected = [(i.nodeid, r) for i, r in dropped]
    names = [i.nodeid.rsplit("/", 1)[-1] for i, _ in dropped]
    config._rdmaq_unused = [
        p for p in DESELECT if not any(n.startswith(p) for n in names)
    ] if VLLM_MINOR == NEWEST else []


def pytest_terminal_summary(terminalreporter, config):
    dropped = getattr(config, "_rdmaq_deselected", [])
    tr = terminalreporter
    tr.section(f"MessageQueue under test: {IMPL} (vLLM {version('vllm')}); "
               f"deselected {len(dropped)}")
    for f, (run, desel) in getattr(config, "_rdmaq_counts", {}).items():
        tr.write_line(f"{f}: {run + desel} cases, {run} run, {desel} deselected")
    by_reason: dict[str, list[str]] = {}
    for nodeid, reason in dropped:
        by_reason.setdefault(reason, []).append(nodeid.rsplit("::", 1)[-1])
    for reason, ids in by_reason.items():
        tr.write_line(f"- {len(ids)}: {reason}")
        tr.write_line("    " + ", ".join(ids))
    for prefix in getattr(config, "_rdmaq_unused", []):
        tr.write_line(f"! deselect entry matched nothing (upstream renamed?): {prefix}")


# From vLLM's tests/conftest.py (the repo conftest would import half of vLLM).
@pytest.fixture()
def temporary_enable_log_propagate(monkeypatch):
    from vllm.logger import DEFAULT_LOGGING_CONFIG

    monkeypatch.setitem(DEFAULT_LOGGING_CONFIG["loggers"]["vllm"], "propagate", True)
    monkeypatch.setattr(logging.getLogger("vllm"), "propagate", True)


@pytest.fixture()
def caplog_vllm(temporary_enable_log_propagate, caplog):
    with caplog.at_level(logging.INFO):
        yield caplog
