"""One ``vllm serve -tp 2`` for ``rdmaq bench serve``: start, health, CPU time, stop, clean up.

The server runs in its own session (one process group: API server, EngineCore, two TP workers,
multiprocessing's resource tracker) with a private TMPDIR, also its VLLM_RPC_BASE_PATH, where
vLLM puts its ZMQ ipc sockets and other temporary files. Every /dev/shm name a server process
maps or holds open is noted while it runs; after the stop (SIGTERM to the API server, then
SIGKILL to the whole session after a grace period) the ones vLLM left behind are listed and
removed, and so is the TMPDIR.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil

SHM_DIR = "/dev/shm"


class ServerError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def role_of(title: str, is_main: bool) -> str:
    """api_server, engine_core, worker_tp<N>, or other (resource tracker and the like)."""
    if is_main:
        return "api_server"
    if "EngineCore" in title:
        return "engine_core"
    if "Worker_TP" in title:
        return "worker_tp" + title.rsplit("Worker_TP", 1)[1].split()[0]
    return "other"


def _session_pids(sid: int) -> list[int]:
    """Processes of session ``sid`` (every server process; vLLM starts no new session)."""
    out = []
    for p in psutil.process_iter(["pid", "status"]):
        if p.info["status"] == psutil.STATUS_ZOMBIE:
            continue  # exited; its parent reaps it
        try:
            if os.getsid(p.pid) == sid:
                out.append(p.pid)
        except (ProcessLookupError, PermissionError, OSError):
            pass
    return out


def _shm_names(pid: int) -> set[str]:
    """/dev/shm names process ``pid`` maps or holds open."""
    names = set()
    prefix = SHM_DIR + "/"
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                i = line.find(prefix)
                if i >= 0:
                    names.add(line[i + len(prefix):].rstrip("\n").removesuffix(" (deleted)"))
    except OSError:
        pass
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(prefix):
                names.add(target[len(prefix):].removesuffix(" (deleted)"))
    except OSError:
        pass
    return {n for n in names if n and "/" not in n}


class VllmServer:
    def __init__(self, *, vllm: str, model: Path, ipc: str, workdir: Path, env: dict,
                 max_model_len: int, extra_args: list[str] | None = None):
        self.vllm, self.model, self.ipc = vllm, model, ipc
        self.workdir = workdir
        self.log_path = workdir / f"serve-{ipc}.log"
        self.env = dict(env)
        self.max_model_len = max_model_len
        self.extra_args = list(extra_args or [])
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.tmpdir: str | None = None
        self.shm_seen: set[str] = set()
        self.startup_s: float | None = None
        self.cleanup: dict = {}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [self.vllm, "serve", str(self.model), "-tp", "2", "--distributed-ipc", self.ipc,
                "--host", "127.0.0.1", "--port", str(self.port), "--enforce-eager",
                "--max-model-len", str(self.max_model_len), *self.extra_args]

    def start(self, timeout: float) -> None:
        """Start and wait for /health; ServerError (with the log's tail) if it dies or times out."""
        # short path: ZMQ ipc socket paths must fit in sun_path (108 bytes)
        self.tmpdir = tempfile.mkdtemp(prefix=f"rdmaq-serve-{self.ipc}-")
        self.port = free_port()
        env = dict(self.env, TMPDIR=self.tmpdir, VLLM_RPC_BASE_PATH=self.tmpdir)
        t0 = time.monotonic()
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        while True:
            if self.proc.poll() is not None:
                raise ServerError(f"vllm serve ({self.ipc}) exited with {self.proc.returncode} "
                                  f"before it was healthy; log tail:\n{self.log_tail()}")
            if time.monotonic() - t0 > timeout:
                raise ServerError(f"vllm serve ({self.ipc}) not healthy after {timeout:.0f} s; "
                                  f"log tail:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.5)
        self.startup_s = time.monotonic() - t0
        self.note_shm()

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def pids(self) -> list[int]:
        return _session_pids(self.proc.pid) if self.proc else []

    def processes(self) -> dict[int, tuple[str, str]]:
        """pid -> (role, title) of every server process now."""
        out = {}
        api_pid = self.proc.pid if self.proc is not None else None
        for pid in self.pids():
            try:
                cmd = psutil.Process(pid).cmdline()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            title = cmd[0] if cmd else ""
            out[pid] = (role_of(title, pid == api_pid), title)
        return out

    def cpu_snapshot(self) -> dict[int, tuple[str, float]]:
        """pid -> (role, user+system CPU seconds, all threads)."""
        snap = {}
        for pid, (role, _) in self.processes().items():
            try:
                t = psutil.Process(pid).cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            snap[pid] = (role, t.user + t.system)
        return snap

    def memory(self) -> dict[str, float]:
        """role -> resident MiB."""
        out: dict[str, float] = {}
        for pid, (role, _) in self.processes().items():
            try:
                rss = psutil.Process(pid).memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            out[role] = out.get(role, 0.0) + rss / 2**20
        return out

    def note_shm(self) -> None:
        for pid in self.pids():
            self.shm_seen |= _shm_names(pid)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/health", timeout=10) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    def stop(self, grace: float) -> dict:
        """SIGTERM the API server, wait for the whole session to exit, SIGKILL what is left
        after ``grace`` seconds; then remove what vLLM left in /dev/shm and its TMPDIR."""
        report: dict[str, Any] = {"sigkilled": [], "shm_left_by_vllm": [], "tmp_left_by_vllm": [],
                  "shm_remaining": [], "tmpdir_remaining": False, "processes_remaining": []}
        if self.proc is None:
            return report
        self.note_shm()
        t0 = time.monotonic()
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        while self.proc.poll() is None or self.pids():
            if time.monotonic() - t0 > grace:
                break
            time.sleep(0.2)
        left = self.pids()
        if left:
            report["sigkilled"] = [f"{pid} {t}" for pid, (_, t) in self.processes().items()]
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 30
            while (self.proc.poll() is None or self.pids()) and time.monotonic() < deadline:
                time.sleep(0.2)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        report["stop_s"] = round(time.monotonic() - t0, 2)
        report["returncode"] = self.proc.returncode
        report["processes_remaining"] = self.pids()
        for name in sorted(self.shm_seen):
            path = os.path.join(SHM_DIR, name)
            if os.path.lexists(path):
                report["shm_left_by_vllm"].append(name)
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
        if self.tmpdir and os.path.isdir(self.tmpdir):
            report["tmp_left_by_vllm"] = sorted(os.listdir(self.tmpdir))
            shutil.rmtree(self.tmpdir, ignore_errors=True)
        report["shm_seen"] = sorted(self.shm_seen)
        report["shm_remaining"] = [n for n in sorted(self.shm_seen)
                                   if os.path.lexists(os.path.join(SHM_DIR, n))]
        report["tmpdir"] = self.tmpdir
        report["tmpdir_remaining"] = bool(self.tmpdir and os.path.exists(self.tmpdir))
        self.cleanup = report
        return report
