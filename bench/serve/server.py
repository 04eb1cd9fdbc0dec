"""One ``vllm serve`` for ``rdmaq bench serve``: start, health, CPU time, stop, clean up.

The server runs in its own session (one process group: API server, EngineCore, the TP workers,
multiprocessing's resource tracker) with a private TMPDIR, also its VLLM_RPC_BASE_PATH, where
vLLM puts its ZMQ ipc sockets and other temporary files. Every /dev/shm name a server process
maps or holds open is noted while it runs; after the stop (SIGTERM to the API server, then
SIGKILL to the whole session after a grace period) the ones vLLM left behind are listed and
removed, and so is the TMPDIR.

Being its own session, a server outlives the harness when asked to (``state()`` records what
``attach()`` needs to drive and stop it from a later harness process): a sweep cut into parts
starts its servers once.
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

try:
    import psutil
except ImportError:  # `rdmaq bench serve --help` works without it; a run checks for it first
    psutil = None  # type: ignore[assignment]

SHM_DIR = "/dev/shm"


class ServerError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def role_of(title: str, is_main: bool) -> str:
    """api_server, engine_core, worker (vLLM names a worker VLLM::Worker, adding _TP<N> and
    the like only for the parallel groups larger than one: worker_tp<N>, worker_dp<N>_tp<M>),
    or other (resource tracker and the like)."""
    if is_main:
        return "api_server"
    if "EngineCore" in title:
        return "engine_core"
    if "VLLM::Worker" in title:
        rest = title.split("VLLM::Worker", 1)[1].split()
        return "worker" + (rest[0].lower() if rest else "")
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
    """``name`` tells servers apart (the queue: vllm, vllm-spinloop, rdmaq); ``ipc`` is the
    ``--distributed-ipc`` value; ``args`` the rest of ``vllm serve``'s arguments after the
    model and the tensor-parallel size."""

    def __init__(self, *, vllm: str, model: Path, ipc: str, workdir: Path, env: dict,
                 max_model_len: int, extra_args: list[str] | None = None, name: str | None = None,
                 tp: int = 2, args: list[str] | None = None, prefix: list[str] | None = None):
        self.vllm, self.model, self.ipc = vllm, model, ipc
        # what runs the command on the server's CPUs and in its cgroup (bench/serve/confine.py)
        self.prefix = list(prefix or [])
        self.name = name or ipc
        self.workdir = workdir
        self.log_path = workdir / f"serve-{self.name}.log"
        self.env = dict(env)
        self.max_model_len = max_model_len
        self.tp = tp
        # the CPU build's arguments unless told otherwise
        self.args = list(args) if args is not None else ["--enforce-eager"]
        self.extra_args = list(extra_args or [])
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.sid: int | None = None  # the API server's pid: its session's and process group's id
        self.tmpdir: str | None = None
        self.shm_seen: set[str] = set()
        self.startup_s: float | None = None
        self.cleanup: dict = {}
        self._t_launch: float | None = None
        self._command: list[str] | None = None  # an attached server's, as launched

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        if self._command is not None:
            return list(self._command)
        return [self.vllm, "serve", str(self.model), "-tp", str(self.tp), "--distributed-ipc",
                self.ipc, "--host", "127.0.0.1", "--port", str(self.port), *self.args,
                "--max-model-len", str(self.max_model_len), *self.extra_args]

    def start(self, timeout: float) -> None:
        """Start and wait for /health; ServerError (with the log's tail) if it dies or times out."""
        self.launch()
        self.wait_healthy(timeout)

    def launch(self) -> None:
        """Start the server in a session of its own; wait_healthy() waits for it."""
        # short path: ZMQ ipc socket paths must fit in sun_path (108 bytes)
        self.tmpdir = tempfile.mkdtemp(prefix=f"rdmaq-serve-{self.name}-")
        self.port = free_port()
        env = dict(self.env, TMPDIR=self.tmpdir, VLLM_RPC_BASE_PATH=self.tmpdir)
        self._t_launch = time.monotonic()
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(self.prefix + self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.sid = self.proc.pid

    def wait_healthy(self, timeout: float) -> None:
        assert self._t_launch is not None, "launch() first"
        while True:
            if not self.alive():
                rc = self.proc.returncode if self.proc is not None else None
                raise ServerError(f"vllm serve ({self.name}) exited with {rc} "
                                  f"before it was healthy; log tail:\n{self.log_tail()}")
            if time.monotonic() - self._t_launch > timeout:
                raise ServerError(f"vllm serve ({self.name}) not healthy after {timeout:.0f} s; "
                                  f"log tail:\n{self.log_tail()}")
            if self.healthy(timeout=5):
                break
            time.sleep(0.5)
        self.startup_s = time.monotonic() - self._t_launch
        self.note_shm()

    def alive(self) -> bool:
        """The API server process is running (a server this harness attached to included)."""
        if self.proc is not None:
            return self.proc.poll() is None
        if self.sid is None:
            return False
        try:
            return psutil.Process(self.sid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def owns_session(self) -> bool:
        """The recorded session leader is this server's `vllm serve` (not another process that
        got its pid: a results directory brought to a new machine records old pids)."""
        if self.sid is None:
            return False
        try:
            cmd = psutil.Process(self.sid).cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False
        return "serve" in cmd and str(self.port) in cmd

    def state(self) -> dict:
        """What attach() needs to take this server over in another harness process."""
        return {"name": self.name, "ipc": self.ipc, "sid": self.sid, "port": self.port,
                "tmpdir": self.tmpdir, "shm_seen": sorted(self.shm_seen),
                "startup_s": self.startup_s, "command": self.command(), "log": str(self.log_path)}

    @classmethod
    def attach(cls, state: dict, *, vllm: str, model: Path, workdir: Path, env: dict,
               max_model_len: int) -> VllmServer:
        """A server started by an earlier harness process (its state())."""
        srv = cls(vllm=vllm, model=model, ipc=state["ipc"], workdir=workdir, env=env,
                  max_model_len=max_model_len, name=state["name"])
        srv.sid, srv.port, srv.tmpdir = state["sid"], state["port"], state["tmpdir"]
        srv.shm_seen = set(state.get("shm_seen") or [])
        srv.startup_s = state.get("startup_s")
        srv.log_path = Path(state.get("log") or srv.log_path)
        srv._command = state.get("command")
        return srv

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def pids(self) -> list[int]:
        return _session_pids(self.sid) if self.sid is not None else []

    def processes(self) -> dict[int, tuple[str, str]]:
        """pid -> (role, title) of every server process now."""
        out = {}
        api_pid = self.sid
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

    def healthy(self, timeout: float = 10) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/health", timeout=timeout) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    def stop(self, grace: float) -> dict:
        """SIGTERM the API server, wait for the whole session to exit, SIGKILL what is left
        after ``grace`` seconds; then remove what vLLM left in /dev/shm and its TMPDIR."""
        report: dict[str, Any] = {"sigkilled": [], "shm_left_by_vllm": [], "tmp_left_by_vllm": [],
                  "shm_remaining": [], "tmpdir_remaining": False, "processes_remaining": []}
        if self.sid is None:
            return report
        self.note_shm()
        t0 = time.monotonic()
        if self.alive():
            try:
                os.kill(self.sid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        while self.alive() or self.pids():
            if time.monotonic() - t0 > grace:
                break
            time.sleep(0.2)
        left = self.pids()
        if left:
            report["sigkilled"] = [f"{pid} {t}" for pid, (_, t) in self.processes().items()]
            try:
                os.killpg(self.sid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 30
            while (self.alive() or self.pids()) and time.monotonic() < deadline:
                time.sleep(0.2)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        report["stop_s"] = round(time.monotonic() - t0, 2)
        report["returncode"] = self.proc.returncode if self.proc is not None else None
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
