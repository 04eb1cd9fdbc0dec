"""A few lines per sub-run of `rdmaq bench --json` results: what fits a short console.

    python3 bench/device/digest.py [--medians] RESULT.json [...]

Per file: the machine's scheduler settings; per cell and sub-run: p50/p99/p99.9 (µs, max over
readers), reader CPU, the ratios against the better vLLM variant; with --sched-trace, what the
slowest 1 % waited for (the trace's summary of them) and the worst message.  --medians: per
queue and setting only the medians of the paced sub-runs' ratios (what the targets are set on),
the reader CPU and the idle window's.
"""

from __future__ import annotations

import json
import sys


def _f(v, fmt="{:.0f}"):
    return "-" if v is None else fmt.format(v)


def _q(q):
    return "/".join("-" if v is None else f"{v:g}" for v in q)


def _top(d, n=3):
    return ",".join(f"{k} {v:g}" for k, v in list(d.items())[:n])


def _pace(ns):
    return "b2b" if not ns else f"{ns / 1e6:g}ms"


def medians(res: dict) -> list[str]:
    """Per queue, reader count and attackers: medians (min-max) of the paced ratios, CPU."""
    import statistics

    out = []
    groups: dict = {}
    for r in res.get("ratios", []):
        if r["pace_ns"]:
            groups.setdefault((r["queue"], r["readers"], r["attackers"]), []).append(r)
    cells = {(c["queue"], c["readers"], c["attackers"]): c for c in res["cells"]}
    for key, rs in groups.items():
        parts = []
        for k in ("p50_ratio", "p99_ratio", "p999_ratio"):
            v = [r[k] for r in rs if r[k] is not None]
            if v:
                parts.append(f"{k.split('_')[0]} {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})")
        spin = sum(r.get("against", {}).get("p99_us") == "vllm-spinloop" for r in rs)
        c = cells.get(key, {})
        cpu: dict = {}
        for s in c.get("subruns", []):
            if s["pace_ns"] and s.get("reader_cpu_busy_frac_mean") is not None:
                cpu[s["pace_ns"]] = max(cpu.get(s["pace_ns"], 0), s["reader_cpu_busy_frac_mean"])
        idle = c.get("idle") or {}
        out.append(f"{key[0]} TP={key[1]} att={key[2]}: median of {len(rs)} paced cells {', '.join(parts)}; "
                   f"p99 against spinloop in {spin}; rdCPU max "
                   + " ".join(f"{_pace(p)} {100 * v:.1f}%" for p, v in sorted(cpu.items()))
                   + (f"; idle {100 * idle['reader_cpu_frac_early_mean']:.2f}%/"
                      f"{100 * idle['reader_cpu_frac_late_mean']:.2f}%" if idle else ""))
    return out


def digest(path: str, only_medians: bool = False) -> str:
    with open(path) as f:
        res = json.load(f)
    m = res["machine"]
    sch = m.get("sched", {})
    feats = sch.get("features", "?")
    if feats != "unreadable":
        feats = " ".join(x for x in feats.split() if any(k in x for k in (
            "PLACE_", "DELAY_", "RUN_TO_PARITY", "PREEMPT_SHORT", "WAKEUP_PREEMPTION", "NEXT_BUDDY",
            "HRTICK", "WA_", "TTWU_QUEUE")))
    load = [" ".join(f"{x:.1f}" for x in m.get(k) or []) for k in ("loadavg_start", "loadavg_end")]
    out = [f"## {path.rsplit('/', 1)[-1]}: {m.get('label') or m.get('hostname')} {m.get('cpus_allowed')} cpus, "
           f"kernel {m.get('kernel')}, load {load[0]} -> {load[1]}, rdmaq {m.get('rdmaq_git')}",
           f"   preempt {sch.get('dynamic_preempt')} ({sch.get('preempt')}), base_slice_ns "
           f"{sch.get('base_slice_ns')}, HZ {sch.get('config', {}).get('CONFIG_HZ')}, autogroup "
           f"{sch.get('sched_autogroup_enabled')}, idle {sch.get('cpuidle_driver')}; features: {feats}"]
    if only_medians:
        return "\n".join(out + medians(res))
    ratios = {(r["queue"], r["readers"], r["attackers"], r["size"], r["pace_ns"]): r for r in res.get("ratios", [])}
    for c in res["cells"]:
        if c.get("error"):
            why = c["error"].splitlines()[-1][:200]
            out.append(f"{c['queue']} rd={c['readers']} att={c['attackers']}: ERROR {why}")
        for s in c["subruns"]:
            lm = s.get("latency_max_over_readers") or {}
            r = ratios.get((c["queue"], c["readers"], c["attackers"], s["size"], s["pace_ns"]))
            rat = ""
            if r:
                vs = r.get("against", {})
                rat = "  ratio " + " ".join(
                    f"{_f(r[k], '{:.3f}')}{'s' if vs.get(key) == 'vllm-spinloop' else ''}"
                    for k, key in (("p50_ratio", "p50_us"), ("p99_ratio", "p99_us"), ("p999_ratio", "p999_us")))
            rc = s.get("reader_counters") or {}
            how = (s.get("stages") or {}).get("how", {})
            waits = "/".join(str(how.get(k, 0)) for k in ("ready", "spin", "window", "woken"))
            waits = (f"  waits r/s/w/k {waits} busy {rc.get('busy', 0)} preempted {rc.get('preempted', 0)} "
                     f"settles {rc.get('settles', 0)} misses {rc.get('misses', 0)}"
                     if s.get("stages") else "")
            out.append(f"{c['queue']} rd={c['readers']} att={c['attackers']} {s['size']}B {_pace(s['pace_ns'])}: "
                       f"p50/p99/p99.9 {_f(lm.get('p50_us'))}/{_f(lm.get('p99_us'))}/{_f(lm.get('p999_us'))} us "
                       f"rdCPU {_f(100 * (s.get('reader_cpu_busy_frac_mean') or 0), '{:.1f}')}%{rat}"
                       + waits)
            st = s.get("sched_trace") if c["queue"].startswith("rdmaq") else None  # vLLM's readers spin
            if not st or "slowest" not in st:
                if st:
                    out.append(f"   trace: {st.get('text', '')[:200]}")
                continue
            sw, a, b = st["sched_wakeups"], st["all"], st["slowest"]
            wr = b.get("writer_send_to_publish") or {}
            out.append(f"   all: runq {_q(a['runq'])}; on waker cpu {a['woken_on_waker_cpu']}/{a['woken']}, "
                       f"moved {a['woken_off_last_cpu']}; wake->run p99/max {sw['p99_us']}/{sw['max_us']}, >1ms "
                       f"{sw['over_1ms']}/{sw['n']}; lost {st['lost'].get('overrun', 0) + st['lost'].get('dropped', 0)}"
                       f" | slowest {b['n']}: runq {_q(b['runq'])} run {_q(b['run'])} asleep {_q(b['asleep'])}; "
                       f"at pub S/run/R {b['asleep_at_publish']}/{b['running_at_publish']}/{b['runnable_at_publish']}; "
                       f"on waker cpu {b['woken_on_waker_cpu']}/{b['woken']}; pre {b['preempted']}; slept "
                       f"{_q(b['slept_us'])}; behind {_top(b['runq_behind_us'])}; left {_top(b['holders_left_as'])}; "
                       f"wr runq {_q(wr.get('runq', []))}")
            for d in st.get("slowest_detail", [])[:1]:
                w, k = d.get("waking", {}), d.get("wakeup", {})
                beh = ",".join(f"{x['who'].split(':')[0]}@{x['cpu']} {x['us']:g}{x['left_as'] or ''}"
                               for x in d.get("behind", [])[:3])
                out.append(f"   #{d['msg']} r{d['reader']} {d['latency_us']:g}us: s->p {d.get('send_to_publish_us')} "
                           f"{d['at_publish']} last{d['last_cpu']}; waking +{w.get('at_us')} "
                           f"{w.get('waker', '').split(':')[0]}@{w.get('waker_cpu')}; wakeup +{k.get('at_us')} "
                           f"cpu{k.get('target_cpu')} slept {k.get('slept_us')} busy {k.get('cpu_busy_us')}; "
                           f"ran +{(d.get('ran') or {}).get('at_us')}; seen +{d.get('seen_at_us')}; "
                           f"behind {beh}; pre x{d.get('preempted', 0)}"
                           + (f"; wr runq {d['writer_runq']['us']}" if d.get("writer_runq") else ""))
    return "\n".join(out)


if __name__ == "__main__":
    args = sys.argv[1:]
    only = "--medians" in args
    files = [a for a in args if a != "--medians"]
    if not files:
        sys.exit(__doc__)
    print("\n".join(digest(p, only) for p in files))
