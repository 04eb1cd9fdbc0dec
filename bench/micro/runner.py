"""Runs one cell: one queue, N readers, one contention setting, all sub-runs.

Layout per cell (the same for every queue): K attacker processes and an
optional tokenizer attacker, then one writer and N reader processes
(multiprocessing spawn), all confined to the same cpuset when one is given.
The processes stay up across the cell's sub-runs (sizes x paces); the parent
starts each sub-run only when every reader has reported the previous one, and
measures the idle window at the end with psutil while the readers wait in a
blocking receive.
"""

from __future__ import annotations

import os
import shutil
import time

from rdmaq.command import quiet_spawn_context

from ..common import attackers as attacker_procs
from ..common.children import CellError, Peer, expect
from ..common.queues import make_adapter, private_rpc_dir
from ..common.stats import analyze
from . import proc


def _schedstat_s(pid):
    """CPU time of all of pid's threads in ns resolution (/proc/PID/task/*/schedstat), or None."""
    try:
        total = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _cpu_s(pids):
    """Per process CPU seconds: schedstat (ns) where the kernel has it, else psutil (clock ticks)."""
    out = []
    for pid in pids:
        v = _schedstat_s(pid)
        if v is None:
            v = _psutil_cpu_s(pid)
        out.append(v)
    return out


def _psutil_cpu_s(pid):
    """CPU seconds from psutil (clock ticks), for kernels without schedstat; NaN without psutil."""
    try:
        import psutil
    except ImportError:
        return float("nan")
    try:
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system
    except psutil.Error:
        return float("nan")


def run_cell(queue, n_readers, cpus, attackers, tokenizer, subruns, idle_window_s, progress,
             attacker_policy="normal", tracer=None):
    """Return the cell's figures (JSON-ready) and, per sub-run, max-over-readers latencies (ns).

    With a tracer (schedtrace.Tracer), each sub-run is traced and the trace read against its
    messages: figures["sched_trace"]."""
    ctx = quiet_spawn_context()  # Ctrl-C reaches the parent alone, which ends the children
    adapter = make_adapter(queue)
    adapter.stages = any(s.get("stages") for s in subruns)
    cell = {
        "queue": queue,
        "readers": n_readers,
        "cpus": sorted(cpus) if cpus else None,
        "attackers": attackers,
        "tokenizer_attacker": bool(tokenizer),
        "attacker_policy": attacker_policy,
        "subruns": [],
        "idle": None,
        "error": None,
    }
    raw = []
    hogs, peers, tok = [], [], None
    rpc_dir = private_rpc_dir(adapter)
    try:
        t_start = time.monotonic()
        for _ in range(attackers):
            h = ctx.Process(target=attacker_procs.hog_main, args=(cpus, attacker_policy), daemon=True)
            h.start()
            hogs.append(h)
        if tokenizer:
            a, b = ctx.Pipe()
            tokenizer_proc = ctx.Process(target=attacker_procs.tokenizer_main, args=(b, cpus, attacker_policy),
                                         daemon=True)
            tok = Peer("tokenizer attacker", tokenizer_proc, a)
            tok.process.start()
            expect([tok], "ready", 300)

        a, b = ctx.Pipe()
        writer = Peer("writer", ctx.Process(target=proc.writer_main,
                                             args=(b, adapter, n_readers, cpus), daemon=True), a)
        readers = []
        for i in range(n_readers):
            a, b = ctx.Pipe()
            readers.append(Peer(f"reader {i}", ctx.Process(target=proc.reader_main,
                                                            args=(b, adapter, i, cpus), daemon=True), a))
        peers = [writer] + readers
        for p in peers:
            p.process.start()
        for p, msg in zip(peers, expect(peers, "imported", 600)):
            p.pid = msg[1]
        (_, handle), = expect([writer], "handle", 120)
        for r in readers:
            r.conn.send(("handle", handle))
        expect(peers, "ready", 300)
        cell["setup_s"] = time.monotonic() - t_start

        att_pids = [h.pid for h in hogs] + ([tok.process.pid] if tok else [])
        att_cpu0, att_t0 = _cpu_s(att_pids), time.monotonic()
        roles = {"writer": writer.pid, "readers": [r.pid for r in readers],
                 "hogs": [h.pid for h in hogs], "tok": tok.process.pid if tok else None,
                 "bench": os.getpid()}
        for k, sub in enumerate(subruns):
            if tracer:
                tracer.start()
            for r in readers:
                r.conn.send(("run", sub))
            writer.conn.send(("run", sub))
            (_, wres), = expect([writer], "done", sub["time_cap_s"] + 300)
            rres = [m[1] for m in expect(readers, "done", 300)]
            figures, lat_max = analyze(wres, rres)
            figures = {"size": sub["size"], "pace_ns": sub["pace_ns"], "warmup": sub["warmup"],
                       **figures}
            if tracer:
                from .schedtrace import analyze_subrun

                text, lost = tracer.stop()
                figures["sched_trace"] = analyze_subrun(text, lost, wres, rres, roles)
            if figures.get("throughput_msgs_per_s"):
                figures["throughput_MB_per_s"] = figures["throughput_msgs_per_s"] * sub["size"] / 1e6
            cell["subruns"].append(figures)
            raw.append(lat_max)
            progress(cell, figures, k, len(subruns))
        if att_pids:
            dt = time.monotonic() - att_t0
            cell["attacker_cpu_frac"] = [(c1 - c0) / dt for c0, c1 in zip(att_cpu0, _cpu_s(att_pids))]

        # Idle window: every reader is in the queue's blocking receive, nothing is sent.
        for r in readers:
            r.conn.send(("finish",))
        expect(readers, "waiting", 60)
        pids = [p.pid for p in peers]
        time.sleep(0.05)
        half = idle_window_s / 2
        c0, t0 = _cpu_s(pids), time.monotonic()
        time.sleep(half)
        c1, t1 = _cpu_s(pids), time.monotonic()
        time.sleep(half)
        c2, t2 = _cpu_s(pids), time.monotonic()
        early = [(b - a) / (t1 - t0) for a, b in zip(c0, c1)]
        late = [(b - a) / (t2 - t1) for a, b in zip(c1, c2)]
        cell["idle"] = {
            "window_s": idle_window_s,
            "note": "starts ~0.05 s after the readers' last message; early = first half, late = second half",
            "writer_cpu_frac_early": early[0],
            "writer_cpu_frac_late": late[0],
            "reader_cpu_frac_early": early[1:],
            "reader_cpu_frac_late": late[1:],
            "reader_cpu_frac_early_mean": sum(early[1:]) / n_readers,
            "reader_cpu_frac_late_mean": sum(late[1:]) / n_readers,
        }

        writer.conn.send(("finish",))
        expect([writer], "finished", 60)
        expect(readers, "bye", 60)
        writer.conn.send(("exit",))
        expect([writer], "bye", 60)
        for p in peers:
            p.process.join(30)
        cell["wall_s"] = time.monotonic() - t_start
    except CellError as e:
        cell["error"] = str(e)
    except Exception as e:  # a harness bug must not lose the other cells' results
        import traceback

        cell["error"] = f"harness error: {e!r}\n{traceback.format_exc()}"
    finally:
        children = [p.process for p in peers] + hogs + ([tok.process] if tok else [])
        children = [c for c in children if c.pid is not None]  # not those Ctrl-C kept from starting
        for c in children:
            if c.is_alive():
                c.terminate()
        for c in children:
            c.join(5)
            if c.is_alive():
                c.kill()
                c.join(5)
        shutil.rmtree(rpc_dir, ignore_errors=True)
    return cell, raw
