"""A ``rdmaq bench serve`` sweep: settings × queues × runs in the plan's order, cut into parts
that end before a deadline, the servers kept between them, and what it leaves behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..common import machine
from ..common.output import write_json as _write_json
from . import attack as serve_attack
from . import plan as serve_plan
from .client import BenchClient
from .confine import Confinement, make_cgroup, remove_cgroup, set_quota, split_cpus
from .launch import check_spinloop, describe_gpus, server_args, server_env, warm_up
from .measure import StepTimer, client_env, rdmaq_stats, run_client
from .options import IPC, SCHEMA, config_of, hogs_of, runs_by_setting
from .plan import base_queue
from .server import ServerError, VllmServer


def confinement_of(cfg: dict, previous: dict | None) -> Confinement:
    """The sweep's CPUs and CPU-quota group (a resumed sweep's: the ones it recorded; its group
    made again if it is gone). The group is skipped, with the reason, where none can be made."""
    if previous:
        conf = Confinement.from_record(previous)
    else:
        allowed = sorted(os.sched_getaffinity(0))
        conf = Confinement(quota_cpus=cfg.get("server_quota"))
        if cfg.get("server_cpus"):
            conf.server_cpus, conf.client_cpus = split_cpus(cfg["server_cpus"], allowed)
    if conf.quota_cpus is not None and (conf.cgroup or not conf.quota_skipped):
        name = Path(conf.cgroup).name if conf.cgroup else f"rdmaq-serve-{os.getpid()}"
        # no limit while the servers start: start_servers sets the quota once they are up
        conf.cgroup, conf.quota_skipped = make_cgroup(name, None)
        if conf.quota_skipped:
            log_line(f"--server-quota {conf.quota_cpus:g}: skipped: {conf.quota_skipped}")
    return conf


def new_result(args, vllm: str, model: Path, queues: list[str], settings: list[str]) -> dict:
    m = machine.describe(args.label)
    if args.device == "cuda":
        m["gpus"] = describe_gpus()
    return {"schema": SCHEMA, "argv": machine.recorded_argv(sys.argv[1:]),
            "config": config_of(args, vllm, model, queues, settings),
            "machine": m, "servers": {}, "parts": [], "runs": []}


class Sweep:
    """One part of a sweep: its servers, its client, and the runs it has time for."""

    def __init__(self, args, result: dict, out: Path):
        self.args, self.result, self.out = args, result, out
        self.cfg = result["config"]
        self.model = Path(self.cfg["model"])
        self.servers: dict[str, VllmServer] = {}
        self.timers: dict[str, StepTimer] = {}
        self.t0 = time.monotonic()
        self.part: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                     "deadline_s": args.deadline, "runs": 0}
        result["parts"].append(self.part)
        self.conf = confinement_of(self.cfg, result.get("confinement"))
        result["confinement"] = self.conf.record()
        if self.conf.client_cpus:  # the harness is the client's side: off the server's CPUs
            os.sched_setaffinity(0, self.conf.client_cpus)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def _dirs(self, q: str) -> tuple[Path | None, Path]:
        st_dir = None if not self.cfg["step_timing"] else self.out / f"steptime-{q}"
        return st_dir, self.out / f"rdmaq-stats-{q}"

    def start_servers(self, previous: dict) -> None:
        """Attach to the servers an earlier part left (healthy ones), start the others: all
        launched at once on a GPU (they load and capture in parallel), one by one on a CPU."""
        new = []
        for q in self.cfg["queues"]:
            st_dir, stats_dir = self._dirs(q)
            env = server_env(q, self.cfg["device"], st_dir, stats_dir, self.conf.server_cpus)
            state = previous.get(q)
            if state:
                srv = VllmServer.attach(state, vllm=self.cfg["vllm"], model=self.model,
                                        workdir=self.out / "logs", env=env,
                                        max_model_len=self.cfg["max_model_len"])
                if srv.owns_session() and srv.healthy():
                    self.servers[q] = srv
                    self.result["servers"][q]["reused_by_part"] = len(self.result["parts"])
                    log_line(f"{q} server of the previous part is up (pid {srv.sid}): reusing it")
                    if st_dir is not None:
                        self.timers[q] = StepTimer(st_dir, self.args.keep_step_timing)
                    continue
                if srv.owns_session():  # up but not answering: stop it
                    srv.stop(self.args.stop_grace)
                log_line(f"{q} server of the previous part is gone: starting a new one")
            if st_dir is not None:
                shutil.rmtree(st_dir, ignore_errors=True)
                st_dir.mkdir()
                self.timers[q] = StepTimer(st_dir, self.args.keep_step_timing)
            shutil.rmtree(stats_dir, ignore_errors=True)
            srv = VllmServer(vllm=self.cfg["vllm"], model=self.model, ipc=IPC[base_queue(q)], name=q,
                             workdir=self.out / "logs", env=env,
                             max_model_len=self.cfg["max_model_len"], tp=self.cfg["tp"],
                             args=server_args(self.cfg), prefix=self.conf.server_prefix())
            self.servers[q] = srv
            new.append(srv)
        parallel = self.cfg["device"] == "cuda"
        for srv in new:
            log_line(f"starting vllm serve -tp {self.cfg['tp']} --distributed-ipc {srv.ipc} "
                 f"({srv.name}, {self.elapsed():.0f} s)")
            srv.launch()
            if not parallel:
                srv.wait_healthy(self.args.start_timeout)
        for srv in new:
            if srv.startup_s is None:  # launched with the others
                srv.wait_healthy(self.args.start_timeout)
            warm_up(srv, self.model)
            st_dir, _ = self._dirs(srv.name)
            self.result["servers"][srv.name] = {
                "startup_s": round(srv.startup_s or 0.0, 1), "port": srv.port,
                "command": srv.command(), "memory_mib": srv.memory(), "started_by_part":
                len(self.result["parts"]),
                "processes": {str(k): v for k, v in srv.processes().items()}}
            log_line(f"  {srv.name} healthy after {srv.startup_s:.0f} s")
        for q, srv in self.servers.items():
            self.result["servers"][q]["spinloop"] = check_spinloop(q, srv, self._dirs(q)[0])
        if self.conf.cgroup:
            try:
                set_quota(self.conf.cgroup, self.conf.quota_cpus)
                log_line(f"servers up: {self.conf.describe()}")
            except OSError as e:
                raise ServerError(f"--server-quota: setting {self.conf.cgroup}/cpu.max "
                                  f"failed: {e.strerror or e}") from e

    def run_all(self) -> bool:
        """The runs left, while they fit before the deadline; -> whether none is left."""
        cfg = self.cfg
        steps = serve_plan.remaining(
            serve_plan.plan(cfg["settings"], cfg["queues"], runs_by_setting(cfg)), self.result["runs"])
        durations = [r["duration_s"] for r in self.result["runs"] if "duration_s" in r]
        client_tmp = tempfile.mkdtemp(prefix="rdmaq-serve-client-")
        self.result["client_tmp"] = client_tmp
        client = BenchClient(cfg["client"], cfg["vllm"], client_env(client_tmp),
                             self.conf.client_prefix())
        try:
            for setting in cfg["settings"]:
                todo = [s for s in steps if s.setting == setting]
                if not todo:
                    continue
                est = serve_plan.run_estimate_s(durations, cfg["num_prompts"], cfg["rate"])
                if not serve_plan.fits(self.elapsed(), est, self.args.deadline):
                    return False
                log_line(f"setting {setting}: {cfg['setting_desc'][setting]} ({self.elapsed():.0f} s)")
                att = serve_attack.start(
                    setting, hogs_of(setting, cfg["hogs"], cfg.get("hogs_in_group", cfg["hogs"])),
                    cpus=self.conf.server_cpus, cgroup=self.conf.cgroup)
                try:
                    for step in todo:
                        est = serve_plan.run_estimate_s(durations, cfg["num_prompts"], cfg["rate"])
                        if not serve_plan.fits(self.elapsed(), est, self.args.deadline):
                            log_line(f"deadline: {len(steps)} run(s) left for --resume")
                            return False
                        t = time.monotonic()
                        rec = self.run_one(step, client, att)
                        rec["duration_s"] = round(time.monotonic() - t, 2)
                        durations.append(rec["duration_s"])
                        steps.remove(step)
                        self.result["runs"].append(rec)
                        self.part["runs"] += 1
                        log_line(_run_line(rec, self.elapsed()))
                        _write_json(self.out / "results.json", self.result)
                finally:
                    att.stop()
            return True
        finally:
            client.close()
            self.result["client_tmp_left"] = (sorted(os.listdir(client_tmp))
                                              if os.path.isdir(client_tmp) else [])
            shutil.rmtree(client_tmp, ignore_errors=True)

    def run_one(self, step: serve_plan.Step, client: BenchClient, att) -> dict:
        srv = self.servers[step.queue]
        rec: dict[str, Any] = {"setting": step.setting, "queue": step.queue, "run": step.run,
                               "seq": len(self.result["runs"]) + 1,
                               "part": len(self.result["parts"]), "server_pid": srv.sid,
                               "device": self.cfg["device"]}
        timer = self.timers.get(step.queue)
        if timer is not None:
            timer.baseline()
        rec |= run_client(self.cfg, client, self.model, srv, self.servers, att,
                          self.out / "raw", step.name, self.out / "logs",
                          self.cfg["client_timeout"])
        if not att.alive():
            rec.setdefault("error", "an attacker died during the run")
        groups = att.sched_groups()
        rec["sched_groups"] = {"server": serve_attack.sched_group(srv.sid or 0),
                               "attackers": len(groups), "attacker": groups[0] if groups else None}
        if timer is not None and "t_ns" in rec:
            rec["queue_timing"] = timer.collect(*rec["t_ns"])
        srv.note_shm()
        if not srv.healthy():
            rec.setdefault("error", f"server {step.queue} unhealthy after the run")
        return rec

    def keep(self) -> None:
        """Leave the servers up for the next part."""
        _write_json(self.out / "servers.json",
                    {q: srv.state() for q, srv in self.servers.items()})
        for q in self.servers:
            self.result["servers"][q]["kept_after_part"] = len(self.result["parts"])

    def stop(self) -> None:
        for srv in self.servers.values():  # all at once: each stop below then mostly waits
            if srv.sid is not None and srv.owns_session():
                try:
                    os.kill(srv.sid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for q, srv in self.servers.items():
            log_line(f"stopping {q} server")
            self.result["servers"].setdefault(q, {})["cleanup"] = srv.stop(self.args.stop_grace)
            self.result["servers"][q]["rdmaq_queue_stats"] = rdmaq_stats(self.out / f"rdmaq-stats-{q}")
        left = remove_cgroup(self.conf.cgroup)  # the servers and the attackers are gone
        if left:
            log_line(left)
            self.result["confinement"]["cgroup_left"] = left
        try:
            (self.out / "servers.json").unlink()
        except FileNotFoundError:
            pass


def sweep(args, result: dict, out: Path) -> dict:
    """Run one part of the sweep recorded in ``result`` (all of it without a deadline)."""
    (out / "raw").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    previous = {}
    if args.resume and (out / "servers.json").exists():
        previous = json.loads((out / "servers.json").read_text())
    before = _listing()
    part = Sweep(args, result, out)
    complete = False
    try:
        part.start_servers(previous)
        complete = part.run_all()
    except ServerError as e:
        result["error"] = str(e)
        log_line(f"ERROR {e}")
    finally:
        kept = not complete and args.keep_servers and "error" not in result
        if kept:
            part.keep()
            log_line(f"servers left running for --resume ({out / 'servers.json'})")
        else:
            part.stop()
        result["complete"] = complete
        part.part["complete"] = complete
        part.part["servers_kept"] = kept
        part.part["elapsed_s"] = round(part.elapsed(), 1)
        if not kept:
            result["leftovers"] = _leftovers(before, part.servers, result.get("client_tmp"))
        result["machine"]["loadavg_end"] = list(os.getloadavg())
        result["machine"]["time_end"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        result["elapsed_s"] = round(sum(p.get("elapsed_s", 0) for p in result["parts"]), 1)
        result["failed_runs"] = sum(1 for r in result["runs"] if r.get("error"))
        _write_json(out / "results.json", result)
    return result


def _listing() -> dict[str, set[str]]:
    out = {}
    for d in ("/dev/shm", tempfile.gettempdir()):
        try:
            out[d] = set(os.listdir(d))
        except OSError:
            out[d] = set()
    return out


def _leftovers(before: dict, servers: dict, client_tmp: str | None) -> dict:
    """New entries of /dev/shm and the temporary directory since the start: "ours" are names
    a server process used or the harness's own directories (must be empty), "others" were
    made by other processes."""
    after = _listing()
    ours_names = set()
    for srv in servers.values():
        ours_names |= srv.shm_seen
        if srv.tmpdir:
            ours_names.add(os.path.basename(srv.tmpdir))
    if client_tmp:
        ours_names.add(os.path.basename(client_tmp))
    out: dict[str, list[str]] = {"ours": [], "others": []}
    for d, names in after.items():
        for n in sorted(names - before[d]):
            out["ours" if n in ours_names else "others"].append(os.path.join(d, n))
    return out


def log_line(msg: str) -> None:
    print(f"rdmaq bench serve: {msg}", file=sys.stderr, flush=True)


def _run_line(rec: dict, elapsed: float) -> str:
    head = f"  [{rec['seq']}] {rec['setting']} {rec['queue']} run {rec['run']}"
    if rec.get("error"):
        return f"{head}: ERROR {rec['error']}"
    m = rec["metrics"]
    from .report import run_value

    share = run_value(rec, "queue_share")
    return (f"{head}: TPOT p50 {m['tpot_p50_ms']:.2f} p99 {m['tpot_p99_ms']:.2f} ms, "
            f"ITL p99 {m['itl_p99_ms']:.2f} ms, TTFT p50 {m['ttft_p50_ms']:.1f} ms, "
            f"{m['output_tok_s']:.0f} tok/s, workers {rec['worker_cpu_s']:.1f} CPU s, server "
            f"{rec.get('server_cpu_s_per_1k_tok', float('nan')):.2f} CPU s per 1k tok, "
            f"others {rec['idle_server_cpu_s']:.2f} CPU s, "
            f"queue {'-' if share is None else f'{100 * share:.1f}%'}, "
            f"load {rec['loadavg_after'][0]:.2f} ({elapsed:.0f} s)")
