"""`rdmaq bench serve` pieces that need no vLLM server: the queue-share analysis, the per-call
stamps of bench/serve/steptime.py, run order, attackers, tables and argument checks.
(tests/vllm/e2e/test_bench_serve.py runs the whole harness against real servers.)"""

import json
import os
import pickle
import threading
import time

import pytest

from rdmaq.bench.serve import attack as serve_attack
from rdmaq.bench.serve import main as serve
from rdmaq.bench.serve import measure as serve_measure
from rdmaq.bench.serve import options as serve_options
from rdmaq.bench.serve import plan as serve_plan
from rdmaq.bench.serve import report as serve_report
from rdmaq.bench.serve import steps as serve_steps
from rdmaq.bench.serve import steptime
from rdmaq.bench.serve.server import role_of

ENGINE, TP0, TP1 = "VLLM::EngineCore", "VLLM::Worker_TP0", "VLLM::Worker_TP1"


def _file(pid, title, queues, tags=("execute_model", "response")):
    return {"pid": pid, "title": title, "gen": 1, "tags": list(tags), "queues": queues}


def _q(key, role, t0, t1, tag, offset=0, **info):
    return {"key": key, "role": role, "offset": offset, "t0": t0, "t1": t1, "tag": tag, **info}


def _two_rpcs():
    """Two RPCs: broadcast 'b' (EngineCore -> TP0, TP1), responses 'r' (TP0 -> EngineCore).

    RPC 0: sent at 1000; TP0 waits from 0, has it at 1300; TP1 asks late (2000), has it at
    2100 -> broadcast delay max(300, 100) = 300. TP0 replies at 5000; the EngineCore waits from
    1500 and has it at 5200 -> response delay 200. Round trip 1000..5200 = 4200.
    RPC 1: sent at 10000; TP0 has it at 10400 (waiting since 6000), TP1 at 10200 (since 7000)
    -> 400; reply sent 12000, EngineCore asked at 10500, has it at 12100 -> 100. Trip 2100.
    """
    return [
        _file(1, ENGINE, [
            _q("b", "writer", [1000, 10000], [1050, 10050], [0, 0], n_reader=2),
            _q("r", "reader", [1500, 10500], [5200, 12100], [1, 1], rank=0)]),
        _file(2, TP0, [
            _q("b", "reader", [0, 6000], [1300, 10400], [0, 0], rank=0),
            _q("r", "writer", [5000, 12000], [5010, 12010], [1, 1], n_reader=1)]),
        _file(3, TP1, [_q("b", "reader", [2000, 7000], [2100, 10200], [0, 0], rank=1)]),
    ]


def test_analyze_delays_round_trips_and_share():
    out = serve_steps.analyze(_two_rpcs(), 0, 10**9)
    assert out["queues"] == {"broadcast": 1, "response": 1}
    assert out["messages"] == {"broadcast": 2, "response": 2}
    assert out["rpcs"] == 2 and out["steps"] == 2
    assert out["rpc_methods"] == {"execute_model": 2}
    assert out["broadcast_delay_us"]["mean"] == pytest.approx((0.3 + 0.4) / 2)
    assert out["response_delay_us"]["mean"] == pytest.approx((0.2 + 0.1) / 2)
    assert out["rpc_round_trip_ms"]["mean"] == pytest.approx((4200 + 2100) / 2 / 1e6)
    assert out["queue_share"] == pytest.approx((300 + 200 + 400 + 100) / (4200 + 2100))
    assert out["step_interval_ms"]["p50"] == pytest.approx(9000 / 1e6)
    assert out["broadcast_enqueue_us"]["p50"] == pytest.approx(0.05)


def test_analyze_window_keeps_messages_sent_inside_it():
    out = serve_steps.analyze(_two_rpcs(), 5001, 20000)
    assert out["messages"] == {"broadcast": 1, "response": 1}
    assert out["rpcs"] == 1
    assert out["queue_share"] == pytest.approx((400 + 100) / 2100)


def test_analyze_aligns_endpoints_by_message_index():
    """A reader whose file starts one message later is matched message by message."""
    files = _two_rpcs()
    tp1 = files[2]["queues"][0]
    tp1.update(offset=1, t0=tp1["t0"][1:], t1=tp1["t1"][1:], tag=tp1["tag"][1:])
    out = serve_steps.analyze(files, 0, 10**9)
    assert out["messages"]["broadcast"] == 1  # only message 1 is in every reader's file
    assert out["broadcast_delay_us"]["p50"] == pytest.approx(0.4)


def test_analyze_reports_unmatched_and_other_queues():
    files = _two_rpcs()
    files[1]["queues"].append(_q("lonely", "reader", [1], [2], [0], rank=0))
    files[1]["queues"].append(_q("tp", "writer", [100], [110], [0], n_reader=1))
    files[2]["queues"].append(_q("tp", "reader", [50], [180], [0], rank=1))
    out = serve_steps.analyze(files, 0, 10**9)
    assert out["unmatched_endpoints"] == 1
    assert out["queues"]["other"] == 1 and out["messages"]["other"] == 1
    assert out["other_delay_us"]["p50"] == pytest.approx(0.08)


def _fake_classes():
    """Fresh classes shaped like vLLM's MessageQueue and rdmaq's subclass (whose calls fall
    back to the base class's code: each call must be counted once)."""
    channel: list = []

    class Base:
        def __init__(self, n_reader=2):
            self.handle = ("fake-handle", n_reader)
            self.n_local_reader, self.n_remote_reader = n_reader, 0

        def enqueue(self, obj, timeout=None):
            channel.append(obj)

        def dequeue(self, timeout=None, indefinite=False):
            return channel.pop(0)

        @staticmethod
        def create_from_handle(handle, rank):
            q = Sub.__new__(Sub)
            q.handle = handle
            return q

    class Sub(Base):
        def enqueue(self, obj, timeout=None):
            return super().enqueue(obj, timeout)

        @staticmethod
        def create_from_handle(handle, rank):
            return Base.create_from_handle(handle, rank)

    return Base, Sub


@pytest.fixture
def wrapped(tmp_path, monkeypatch):
    monkeypatch.setattr(steptime, "_records", [])
    monkeypatch.setattr(steptime, "_tags", {})
    monkeypatch.setattr(steptime, "_state", {"dir": str(tmp_path), "pid": None})
    base, sub = _fake_classes()
    for cls in (base, sub, base):  # wrapping twice is a no-op
        steptime._wrap_class(cls)
    return base, sub, tmp_path


def test_handle_key_survives_pickling():
    h = {"addr": "ipc:///x", "ranks": [0, 1]}
    assert steptime.handle_key(h) == steptime.handle_key(pickle.loads(pickle.dumps(h)))
    assert steptime.handle_key(h) != steptime.handle_key({"addr": "ipc:///y", "ranks": [0, 1]})


def test_steptime_records_each_call_once_and_flushes_deltas(wrapped):
    base, sub, d = wrapped
    w = sub(2)
    r = sub.create_from_handle(w.handle, 1)
    assert (d / f"pid-{os.getpid()}").exists()  # registered at attach, before traffic
    for i in range(3):
        w.enqueue(("execute_model", (i,), {}, None))
        assert r.dequeue()[1] == (i,)
    steptime.flush(1)
    f1 = json.loads((d / f"g1-{os.getpid()}.json").read_text())
    by_role = {q["role"]: q for q in f1["queues"]}
    assert by_role["writer"]["key"] == by_role["reader"]["key"]
    assert by_role["writer"]["n_reader"] == 2 and by_role["reader"]["rank"] == 1
    for q in by_role.values():
        assert len(q["t0"]) == 3 and q["offset"] == 0  # the subclass's super() call: once
        assert all(a <= b for a, b in zip(q["t0"], q["t1"]))
        assert [f1["tags"][t] for t in q["tag"]] == ["execute_model"] * 3
    w.enqueue((True, "output"))
    r.dequeue()
    steptime.flush(2)
    f2 = json.loads((d / f"g2-{os.getpid()}.json").read_text())
    for q in f2["queues"]:
        assert q["offset"] == 3 and len(q["t0"]) == 1
        assert f2["tags"][q["tag"][0]] == "response"


def test_steptime_poller_answers_a_flush_request(wrapped):
    base, sub, d = wrapped
    w = base(1)
    w.enqueue(("execute_model",))  # first queue here: registers, starts the poller
    (d / "request").write_text("7")
    path = d / f"g7-{os.getpid()}.json"
    deadline = time.monotonic() + 30
    while not path.exists():
        assert time.monotonic() < deadline, "no flush within 30 s of the request"
        time.sleep(0.05)
    assert json.loads(path.read_text())["queues"][0]["t0"]


def test_register_is_a_no_op_without_the_variable(monkeypatch):
    monkeypatch.delenv(steptime.ENV_DIR, raising=False)
    called = []
    monkeypatch.setattr(steptime, "install", lambda d: called.append(d))
    steptime.register()
    assert called == []
    monkeypatch.setenv(steptime.ENV_DIR, "/nonexistent-dir-for-test")
    steptime.register()
    assert called == ["/nonexistent-dir-for-test"]


def test_order_alternates_run_by_run():
    assert serve_plan.order_for(0, ["vllm", "rdmaq-shm"], 3) == [
        ("vllm", 0), ("rdmaq-shm", 0), ("vllm", 1), ("rdmaq-shm", 1), ("vllm", 2), ("rdmaq-shm", 2)]
    second = serve_plan.order_for(1, ["vllm", "rdmaq-shm"], 2)
    assert [q for q, _ in second] == ["rdmaq-shm", "vllm", "rdmaq-shm", "vllm"]
    assert serve_plan.order_for(0, ["rdmaq-shm"], 2) == [("rdmaq-shm", 0), ("rdmaq-shm", 1)]


def test_roles_and_cpu_delta():
    assert role_of("vllm serve", True) == "api_server"
    assert role_of("VLLM::EngineCore", False) == "engine_core"
    assert role_of("VLLM::Worker_TP1", False) == "worker_tp1"
    assert role_of("python -c from multiprocessing.resource_tracker", False) == "other"
    a = {1: ("worker_tp0", 1.0), 2: ("worker_tp1", 2.0), 3: ("engine_core", 0.5)}
    b = {1: ("worker_tp0", 3.5), 2: ("worker_tp1", 2.25), 4: ("other", 9.0)}
    assert serve_measure.cpu_delta(a, b) == {"worker_tp0": 2.5, "worker_tp1": 0.25}


def test_hog_attackers_run_as_sched_idle_and_stop():
    att = serve_attack.start("hogs-schedidle", 2, timeout=60)
    try:
        assert len(att.procs) == 2 and att.alive()
        for p in att.procs:
            assert os.sched_getscheduler(p.pid) == os.SCHED_IDLE
    finally:
        att.stop()
    assert not any(p.is_alive() for p in att.procs)
    plain = serve_attack.start("hogs", 1, timeout=60)
    try:
        assert os.sched_getscheduler(plain.procs[0].pid) == os.SCHED_OTHER
    finally:
        plain.stop()
    assert serve_attack.start("idle", 2).procs == []
    assert serve_attack.describe("tok-nopar", 2) == "tokenizer attacker, TOKENIZERS_PARALLELISM=false"
    assert serve_attack.describe("hogs-schedidle", 2) == "2 CPU hogs, SCHED_IDLE"


def _result(runs):
    return {"schema": serve_options.SCHEMA, "machine": {"versions": {}, "loadavg_start": [1.0, 1, 1],
                                                 "loadavg_end": [2.0, 1, 1]},
            "config": {"queues": ["vllm", "rdmaq-shm"], "settings": ["hogs", "hogs-schedidle"], "runs": 3,
                       "input_len": 32, "output_len": 64, "num_prompts": 10, "rate": 4,
                       "concurrency": 4, "seed": 0,
                       "setting_desc": {"hogs": "2 CPU hogs", "hogs-schedidle": "2 CPU hogs, SCHED_IDLE"}},
            "runs": runs}


def _run(setting, queue, tpot, itl50=1.0, error=None):
    r = {"setting": setting, "queue": queue, "run": 1,
         "metrics": {"tpot_p50_ms": tpot, "tpot_p99_ms": 2 * tpot, "itl_p50_ms": itl50,
                     "itl_p99_ms": 10.0, "ttft_p50_ms": 20.0, "e2el_p50_ms": 50.0,
                     "output_tok_s": 100.0},
         "worker_cpu_s": 5.0, "queue_timing": {"queue_share": 0.1}}
    if error:
        r["error"] = error
    return r


def test_summary_medians_spread_and_ratios():
    runs = [_run("hogs", "vllm", t) for t in (4.0, 2.0, 3.0)] + \
           [_run("hogs", "rdmaq-shm", t, itl50=0.0) for t in (1.0, 1.5, 9.0)] + \
           [_run("hogs", "rdmaq-shm", 100.0, error="client failed")] + \
           [_run("hogs-schedidle", "vllm", 2.0, itl50=0.0), _run("hogs-schedidle", "rdmaq-shm", 1.0)]
    summ = serve_report.summarize(_result(runs))
    assert summ[("hogs", "vllm")]["tpot_p50_ms"] == {"median": 3.0, "min": 2.0, "max": 4.0, "n": 3}
    assert summ[("hogs", "rdmaq-shm")]["tpot_p50_ms"]["median"] == 1.5  # the failed run is left out
    r = serve_report.ratios(summ, "hogs")
    assert r["tpot_p50_ms"] == pytest.approx(0.5)
    assert r["itl_p50_ms"] == 0.0
    assert "itl_p50_ms" not in serve_report.ratios(summ, "hogs-schedidle")  # 0 below: no ratio
    text = serve_report.format_markdown(_result(runs))
    assert "| hogs | vllm | 3.00 (2.00–4.00) |" in text
    assert "| hogs | **rdmaq-shm ÷ vllm** | 0.50 |" in text
    assert "| hogs-schedidle | **rdmaq-shm ÷ vllm** | 0.50 | 0.50 | n/a |" in text
    assert "| hogs | hogs-schedidle + vllm | 0.67 |" in text
    assert "1 failed run(s): hogs/rdmaq-shm/1: client failed" in text


@pytest.mark.parametrize("argv, message", [
    (["--queues", "vllm,zmq"], "unknown queue 'zmq'"),
    (["--settings", "idle,storm"], "unknown setting 'storm'"),
    (["--queues", "vllm,vllm"], "give each queue once"),
    (["--runs", "0"], "--runs"),
    (["--input-len", "200", "--output-len", "100"], "input + output <= --max-model-len"),
    (["--hogs", "0"], "--hogs must be >= 1"),
    (["--model", "/nonexistent-model-dir"], "no config.json there"),
])
def test_bad_arguments_are_named(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        serve.main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_report_rejects_other_files(tmp_path, capsys):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"schema": "rdmaq-bench/1"}))
    with pytest.raises(SystemExit):
        serve.main(["--report", str(p)])
    assert "is not a rdmaq-bench-serve/1 file" in capsys.readouterr().err


# ------------------------------------------------------------------ who waited where
def test_steptime_flush_says_which_threads_used_each_endpoint(wrapped):
    base, sub, d = wrapped
    w = sub(1)
    r = sub.create_from_handle(w.handle, 0)
    w.enqueue(("execute_model",))
    box = {}

    def read():
        box["tid"] = threading.get_native_id()
        r.dequeue()

    t = threading.Thread(target=read, name="reader-thread")
    t.start()
    t.join(30)
    steptime.flush(1)
    f = json.loads((d / f"g1-{os.getpid()}.json").read_text())
    by_role = {q["role"]: q for q in f["queues"]}
    assert by_role["writer"]["tids"] == [threading.get_native_id()]
    assert by_role["reader"]["tids"] == [box["tid"]]
    me = f["threads"][str(threading.get_native_id())]
    assert me["name"] == "MainThread"
    if os.path.exists("/proc/self/schedstat"):
        assert me["cpu_ns"] > 0 and me["slices"] >= 1 and me["runq_ns"] >= 0
    assert me["vol"] + me["invol"] >= 1
    assert "ring" not in by_role["writer"]  # vLLM's queue has no rdmaq counters


def test_steptime_flush_carries_an_rdmaq_endpoints_counters(wrapped):
    base, sub, d = wrapped

    class Rdmaq(sub):  # shaped like rdmaq's MessageQueue: its counters, its close lock
        _rdmaq = True

        def __init__(self, n_reader=1):
            super().__init__(n_reader)
            self._close_lock = threading.Lock()
            self.sleeps = 0

        def rdmaq_stats(self):
            return {"messages": 1, "ring": {"sleeps": self.sleeps, "spins": 2, "transport": "shm"}}

    steptime._wrap_class(Rdmaq)
    w = Rdmaq()
    w.enqueue(("execute_model",))
    w.sleeps = 5
    steptime.flush(1)
    (q,) = json.loads((d / f"g1-{os.getpid()}.json").read_text())["queues"]
    assert q["ring"] == {"sleeps": 5, "spins": 2}  # counters only


def _flushed(pid, title, queues, threads):
    return _file(pid, title, queues) | {"threads": threads}


def test_who_waited_shares_split_the_delays():
    out = serve_steps.analyze(_two_rpcs(), 0, 10**9)
    # broadcasts: both waited for by TP0 (asked at 0 and 6000, sent at 1000 and 10000)
    assert out["broadcast_waited_share"] == 1.0
    assert out["broadcast_delay_queued_us"]["p50"] is None
    # responses: the EngineCore asked at 1500 and 10500, before the sends at 5000 and 12000
    assert out["response_waited_share"] == 1.0
    files = _two_rpcs()
    files[0]["queues"][1]["t0"] = [5100, 10500]  # the first response was there when asked
    out = serve_steps.analyze(files, 0, 10**9)
    assert out["response_waited_share"] == 0.5
    assert out["response_delay_queued_us"]["p50"] == pytest.approx(0.1)  # 5200 - 5100
    assert out["response_delay_waited_us"]["p50"] == pytest.approx(0.1)  # 12100 - 12000


def test_thread_and_counter_deltas_between_flushes():
    def files(cpu, runq, sleeps):
        return [
            _flushed(1, ENGINE, [_q("b", "writer", [1], [2], [0], n_reader=1, tids=[11]),
                                 _q("r", "reader", [3], [4], [1], rank=0, tids=[11],
                                    ring={"messages": 10 * sleeps, "sleeps": sleeps})],
                     {"11": {"name": "MainThread", "cpu_ns": cpu, "runq_ns": runq, "slices": 3,
                             "vol": 5, "invol": 1},
                      "12": {"name": "busy", "cpu_ns": 5 * cpu, "runq_ns": 0},
                      "13": {"name": "idle", "cpu_ns": 7, "runq_ns": 0},
                      "14": {"name": "quiet", "cpu_ns": 1, "runq_ns": 0}}),
            _flushed(2, TP0, [_q("b", "reader", [1], [3], [0], rank=0, tids=[21]),
                              _q("r", "writer", [2], [3], [1], n_reader=1, tids=[22])],
                     {"21": {"name": "MainThread", "cpu_ns": 2 * cpu, "runq_ns": 2 * runq},
                      "22": {"name": "WorkerAsyncOutputCopy", "cpu_ns": cpu, "runq_ns": runq}})]

    before, after = files(1_000_000, 0, 1), files(4_000_000, 500_000, 3)
    rows = {(r["pid"], r["tid"]): r for r in serve_steps.thread_deltas(before, after, others=1)}
    ec = rows[(1, 11)]
    assert ec["uses"] == ["broadcast writer", "response reader"] and ec["proc"] == "engine_core"
    assert (ec["cpu_ms"], ec["runq_ms"], ec["slices"], ec["vol"]) == (3.0, 0.5, 0, 0)
    assert rows[(2, 21)]["uses"] == ["broadcast reader"] and rows[(2, 21)]["runq_ms"] == 1.0
    assert rows[(2, 22)]["uses"] == ["response writer"]
    assert (1, 12) in rows and (1, 13) not in rows  # the busiest other thread only
    (c,) = serve_steps.ring_deltas(before, after)
    assert c == {"proc": "engine_core", "pid": 1, "endpoint": "response reader",
                 "messages": 20, "sleeps": 2}
    qt = {"steps": 4, "threads": list(rows.values()), "rdmaq_counters": [c],
          "broadcast_waited_share": 0.25}
    assert serve_report.wait_value(qt, "worker_runq_us_per_step") == pytest.approx(250.0)
    assert serve_report.wait_value(qt, "ec_cpu_us_per_step") == pytest.approx(750.0)
    assert serve_report.wait_value(qt, "out_cpu_us_per_step") == pytest.approx(750.0)
    assert serve_report.wait_value(qt, "resp_woken_share") == 0.0  # not counted: none
    assert serve_report.wait_value(qt, "bc_woken_share") is None  # no rdmaq endpoint
    assert serve_report.wait_value(qt, "bc_waited_share") == 0.25


def test_hogs_in_sessions_of_their_own():
    """hogs-sessions: each hog leads a session (its own autogroup where the kernel groups
    by session); plain hogs share the harness's."""
    att = serve_attack.start("hogs-sessions", 2, timeout=60)
    try:
        assert all(os.getsid(p.pid) == p.pid for p in att.procs)
        if os.path.exists("/proc/self/autogroup"):
            assert len(att.sched_groups()) == 2
    finally:
        att.stop()
    plain = serve_attack.start("hogs", 2, timeout=60)
    try:
        assert all(os.getsid(p.pid) == os.getsid(0) for p in plain.procs)
        assert len(plain.sched_groups()) == 1
    finally:
        plain.stop()
    assert serve_attack.describe("hogs-sessions", 2) == "2 CPU hogs, each in a session of its own"
    assert " | " in serve_attack.sched_group(os.getpid())
