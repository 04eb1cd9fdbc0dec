"""Text tables (perftest-like), ratios against vLLM and the targets, from the JSON result."""

from __future__ import annotations

from collections import defaultdict

BASELINE = "vllm"
# vLLM as shipped and with its C spin loop: every ratio is against the better of those
# present in the cell, metric by metric (the ratio records which one it was).
BASELINES = ("vllm", "vllm-spinloop")
SHORT = {"vllm": "v", "vllm-spinloop": "s"}


def size_label(n: int) -> str:
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def pace_label(ns: int) -> str:
    if ns == 0:
        return "b2b"
    if ns % 1_000_000 == 0:
        return f"{ns // 1_000_000}ms"
    if ns % 1_000 == 0:
        return f"{ns // 1_000}us"
    return f"{ns}ns"


def cpus_label(cpus, machine) -> str:
    if not cpus:
        return f"all({machine.get('cpus_allowed', '?')})"
    return str(len(cpus))


def contention_key(cell) -> tuple:
    return (tuple(cell["cpus"]) if cell["cpus"] else None, cell["attackers"], cell["tokenizer_attacker"])


def is_contended(cell, machine) -> bool:
    """Attackers, the tokenizer attacker, or fewer cores than writer + readers."""
    ncpu = len(cell["cpus"]) if cell["cpus"] else machine.get("cpus_allowed") or 0
    return bool(cell["attackers"] or cell["tokenizer_attacker"] or ncpu < cell["readers"] + 1)


def _f(v, fmt="{:.2f}"):
    return "-" if v is None else fmt.format(v)


def _pct(v):
    return "-" if v is None else f"{100 * v:.1f}"


def _pctcell(v):
    return "-" if v is None else f"{100 * v:.1f}%"


def _pct2(v):
    return "-" if v is None else f"{100 * v:.2f}"


def _row_head(row, machine, w=12) -> str:
    """queue, readers, cpus, attackers, tokenizer: the columns every table starts with."""
    return (f"{row['queue']:<{w}}{row['readers']:>3}{cpus_label(row['cpus'], machine):>8}"
            f"{row['attackers']:>4}{('y' if row['tokenizer_attacker'] else 'n'):>4}")


def baselines_line(result: dict) -> str:
    """Which of vLLM's queues this run compared against, and why any other did not run: every
    ratio is against the better of those that ran, so a missing one changes what they mean."""
    ran = [q for q in BASELINES if any(c["queue"] == q for c in result.get("cells", []))]
    skipped = result.get("skipped") or {}
    parts = [f"{q} ran" for q in ran]
    for q in BASELINES:
        if q in ran:
            continue
        why = skipped.get(q) or "not in --queues"
        parts.append(f"{q} skipped ({why})")
    if not ran:
        parts.append("nothing is compared")
    return "vLLM baselines: " + "; ".join(parts)


# vLLM's MessageQueue readers spin this long after their last message, then block
VLLM_SPIN_AFTER_LAST_S = 1.0
IDLE_NOTE = (f"vLLM's readers spin for {VLLM_SPIN_AFTER_LAST_S:g} s after their last message "
             "and then block: a late half past that spin shows them at ~0; while serving, a "
             "step follows the last within that second, so they spin the whole generation")


def idle_window_too_short(result: dict) -> str | None:
    """Say so where the idle window's second half lies within vLLM's spin after its last message."""
    windows = {c["idle"]["window_s"] for c in result.get("cells", []) if c.get("idle")}
    if windows and min(windows) < 2 * VLLM_SPIN_AFTER_LAST_S:
        return (f"idle window {min(windows):g} s: shorter than {2 * VLLM_SPIN_AFTER_LAST_S:g} s, "
                f"both halves lie within vLLM's {VLLM_SPIN_AFTER_LAST_S:g} s spin (--idle-window)")
    return None


def format_tables(result: dict) -> str:
    m = result["machine"]
    w = max([12] + [len(c["queue"]) + 1 for c in result["cells"]])
    lines = []
    hr = "-" * (124 + w)
    lines.append(hr)
    lines.append(f"# rdmaq bench on {m.get('label') or m.get('hostname')}: {m.get('cpu_model')}, "
                 f"{m.get('cpus_allowed')} cpus, kernel {m.get('kernel')}, python {m.get('python')}, "
                 f"load {' '.join(f'{x:.2f}' for x in m.get('loadavg_start', []))}")
    lines.append(f"# {baselines_line(result)}")
    lines.append("# one writer, N reader processes; latency = reader's return from dequeue - writer's "
                 "CLOCK_MONOTONIC stamp before enqueue")
    lines.append("# per message: max over readers (a TP step waits for its slowest worker); "
                 "warm-up excluded; CPU% = per process, busy phase")
    lines.append("# att = CPU-hog processes in the same cpuset; tok = tokenizer attacker; "
                 "b2b = back to back (latency includes queueing)")
    lines.append("# send50 = p50 of the writer's send call [us] (serialize, copy, wake readers)")
    lines.append(hr)
    lines.append(f"{'queue':<{w}}{'rd':>3}{'cpus':>8}{'att':>4}{'tok':>4}{'bytes':>7}{'pace':>6}"
                 f"{'msgs':>7}{'p50[us]':>10}{'p99[us]':>10}{'p99.9[us]':>11}{'max[us]':>10}"
                 f"{'kmsg/s':>9}{'MB/s':>9}{'rdCPU%':>8}{'wrCPU%':>8}{'send50':>8}")
    for cell in result["cells"]:
        head = _row_head(cell, m, w)
        if cell.get("error"):
            lines.append(f"{head}  ERROR: {cell['error'].splitlines()[-1][:90]}")
        for s in cell["subruns"]:
            lm = s["latency_max_over_readers"] or {}
            tp = s.get("throughput_msgs_per_s")
            lines.append(
                f"{head}{size_label(s['size']):>7}{pace_label(s['pace_ns']):>6}{s['measured']:>7}"
                f"{_f(lm.get('p50_us')):>10}{_f(lm.get('p99_us')):>10}{_f(lm.get('p999_us')):>11}"
                f"{_f(lm.get('max_us'), '{:.1f}'):>10}{_f(tp and tp / 1e3, '{:.1f}'):>9}"
                f"{_f(s.get('throughput_MB_per_s'), '{:.1f}'):>9}"
                f"{_pct(s.get('reader_cpu_busy_frac_mean')):>8}{_pct(s.get('writer_cpu_busy_frac')):>8}"
                f"{_f((s.get('writer_send_call') or {}).get('p50_us'), '{:.1f}'):>8}"
                + ("  ERRORS" if s["errors"] else ""))
    lines.append(hr)
    lines.append("# idle window (no messages; readers blocked in dequeue): CPU% per reader, mean "
                 "[early half / late half of the window]")
    lines.append(f"# {IDLE_NOTE}")
    short = idle_window_too_short(result)
    if short:
        lines.append(f"# {short}")
    for cell in result["cells"]:
        idle = cell.get("idle")
        if not idle:
            continue
        lines.append(f"{_row_head(cell, m, w)}   reader {_pct2(idle['reader_cpu_frac_early_mean']):>7} / "
                     f"{_pct2(idle['reader_cpu_frac_late_mean']):>7}   writer "
                     f"{_pct2(idle['writer_cpu_frac_early']):>7} / {_pct2(idle['writer_cpu_frac_late']):>7}"
                     f"   (window {idle['window_s']:.1f} s)")
    staged = [(c, s) for c in result["cells"] for s in c["subruns"] if s.get("stages")]
    # each size and pace's queues one under the other
    staged.sort(key=lambda cs: (cs[0]["readers"], str(contention_key(cs[0])), cs[1]["size"],
                                cs[1]["pace_ns"]))
    if staged:
        lines.append(hr)
        lines.append("# stages of the slowest reader's message, p50 / p99 [us]; reader = seen to "
                     "returned (copy_out + deserialize); waits ended: ready / spin / window / woken "
                     "(all readers)")
        names = ("serialize", "copy_in", "publish", "detect", "copy_out", "deserialize", "reader_side")
        lines.append(f"{'queue':<{w}}{'rd':>3}{'cpus':>8}{'att':>4}{'tok':>4}{'bytes':>7}{'pace':>6}"
                     + "".join(f"{n.replace('_side', ''):>16}" for n in names) + "   waits")
        for c, s in staged:
            st = s["stages"]
            how = st.get("how", {})
            rc = s.get("reader_counters") or {}
            lines.append(f"{_row_head(c, m, w)}{size_label(s['size']):>7}{pace_label(s['pace_ns']):>6}"
                         + "".join(f"{st[n]['p50_us']:>8.1f}/{st[n]['p99_us']:<7.1f}" if n in st
                                   else f"{'-':>16}" for n in names)
                         + "   " + "/".join(str(how.get(k, 0)) for k in ("ready", "spin", "window", "woken"))
                         + (f"  misses {rc.get('misses', 0)} preempted {rc.get('preempted', 0)} "
                            f"naps {rc.get('naps', 0)} busy {rc.get('busy', 0)} settles {rc.get('settles', 0)}"
                            if rc else "")
                         + "  tail " + "/".join(f"{k}:{v}" for k, v in st.get("tail_how", {}).items()))
        lines.extend(_reader_side_ratios(staged, m, w))
    ratios = result.get("ratios") or []
    if ratios:
        lines.append(hr)
        lines.append("# ratios against the better vLLM variant of each cell and figure, from this run "
                     "(< 1: lower latency); v = vllm, s = vllm-spinloop was the better")
        lines.append(f"{'queue':<{w}}{'rd':>3}{'cpus':>8}{'att':>4}{'tok':>4}{'bytes':>7}{'pace':>6}"
                     f"{'p50 ratio':>11}{'p99 ratio':>11}{'p99.9 ratio':>13}{'thru ratio':>12}")
        for r in ratios:
            vs = r.get("against", {})

            def rat(key, k, r=r, vs=vs):
                return _f(r[key], "{:.3f}") + SHORT.get(vs.get(k), "")
            lines.append(f"{_row_head(r, m, w)}{size_label(r['size']):>7}{pace_label(r['pace_ns']):>6}"
                         f"{rat('p50_ratio', 'p50_us'):>11}{rat('p99_ratio', 'p99_us'):>11}"
                         f"{rat('p999_ratio', 'p999_us'):>13}{rat('throughput_ratio', 'throughput'):>12}")
    targets = result.get("targets") or []
    if targets:
        lines.append(hr)
        lines.append("# targets (reported, never asserted)")
        for t in targets:
            lines.append(f"# [{t['status']}] {t['name']}: {t['detail']}")
    lines.append(hr)
    return "\n".join(lines)


def _reader_side_ratios(staged, m, w) -> list[str]:
    """Each rdmaq queue's reader side (seen to returned) ÷ vLLM's, per size and pace."""
    base = {(c["readers"], contention_key(c), s["size"], s["pace_ns"]): s["stages"]["reader_side"]
            for c, s in staged if c["queue"] == "vllm" and "reader_side" in s["stages"]}
    out: list[str] = []
    for c, s in staged:
        key = (c["readers"], contention_key(c), s["size"], s["pace_ns"])
        mine = s["stages"].get("reader_side")
        if c["queue"].startswith("rdmaq") and mine and key in base:
            v = base[key]
            if not out:
                out.append("# reader side (seen to returned) ÷ vLLM's, same run: p50 / p99")
            out.append(f"{_row_head(c, m, w)}{size_label(s['size']):>7}{pace_label(s['pace_ns']):>6}"
                       f"{_f(mine['p50_us'] / v['p50_us'] if v['p50_us'] else None, '{:.3f}'):>9} /"
                       f"{_f(mine['p99_us'] / v['p99_us'] if v['p99_us'] else None, '{:.3f}'):>7}")
    return out


def best_baseline(subs: dict) -> dict:
    """From {baseline queue: sub-run}, the better value of each figure and whose it is:
    {'p50_us': (value, queue), ..., 'throughput': (value, queue)}."""
    best: dict = {}
    for q, s in subs.items():
        lm = s.get("latency_max_over_readers") or {}
        for k in ("p50_us", "p99_us", "p999_us"):
            v = lm.get(k)
            if v and (k not in best or v < best[k][0]):
                best[k] = (v, q)
        tp = s.get("throughput_msgs_per_s")
        if tp and ("throughput" not in best or tp > best["throughput"][0]):
            best["throughput"] = (tp, q)
    return best


def compute_ratios(cells: list[dict]) -> list[dict]:
    base: dict = defaultdict(dict)
    for c in cells:
        if c["queue"] in BASELINES:
            for s in c["subruns"]:
                base[(c["readers"], contention_key(c), s["size"], s["pace_ns"])][c["queue"]] = s
    out = []
    for c in cells:
        if c["queue"] in BASELINES:
            continue
        for s in c["subruns"]:
            b = best_baseline(base.get((c["readers"], contention_key(c), s["size"], s["pace_ns"]), {}))
            mine = s["latency_max_over_readers"]
            if not b or not mine:
                continue

            def ratio(k, mine=mine, b=b):
                return mine[k] / b[k][0] if k in b else None
            tp = s.get("throughput_msgs_per_s")
            out.append({
                "queue": c["queue"], "readers": c["readers"], "cpus": c["cpus"],
                "attackers": c["attackers"], "tokenizer_attacker": c["tokenizer_attacker"],
                "size": s["size"], "pace_ns": s["pace_ns"],
                "p50_ratio": ratio("p50_us"), "p99_ratio": ratio("p99_us"),
                "p999_ratio": ratio("p999_us"),
                "throughput_ratio": (tp / b["throughput"][0]) if tp and "throughput" in b else None,
                # which vLLM variant each ratio is against
                "against": {k: b[k][1] for k in ("p50_us", "p99_us", "p999_us", "throughput") if k in b},
            })
    return out


def evaluate_targets(result: dict) -> list[dict]:
    """The issue's targets, evaluated on this run; 'n/a' when the run lacks the configuration."""
    m, cells, ratios = result["machine"], result["cells"], result.get("ratios") or []
    cell_by = {(c["queue"], c["readers"], contention_key(c)): c for c in cells}
    out = []

    # 1. contended TP=8: rdmaq p99 (max over readers) <= 1/10 of vLLM's, paced runs
    for q in ("rdmaq-shm", "rdmaq-verbs"):
        rs = [r for r in ratios if r["queue"] == q and r["readers"] == 8 and r["pace_ns"] > 0
              and is_contended(cell_by[(q, 8, contention_key(r))], m) and r["p99_ratio"] is not None]
        if not rs:
            continue
        met = [r for r in rs if r["p99_ratio"] <= 0.1]
        worst = max(rs, key=lambda r: r["p99_ratio"])
        best = min(rs, key=lambda r: r["p99_ratio"])
        out.append({
            "name": f"contended TP=8 {q} p99 <= 1/10 of vllm (paced)",
            "status": "met" if len(met) == len(rs) else ("partly met" if met else "missed"),
            "detail": f"{len(met)}/{len(rs)} configurations; ratio best {best['p99_ratio']:.3f} "
                      f"({size_label(best['size'])}, {pace_label(best['pace_ns'])}, att {best['attackers']}), "
                      f"worst {worst['p99_ratio']:.3f} ({size_label(worst['size'])}, "
                      f"{pace_label(worst['pace_ns'])}, att {worst['attackers']})",
            "configs": len(rs), "met": len(met),
        })

    # 2. reader idle CPU < 1% (idle window), and busy-phase reader CPU at the slowest pace
    for q in ("rdmaq-shm", "rdmaq-verbs") + BASELINES:
        qc = [c for c in cells if c["queue"] == q and c.get("idle")]
        if not qc:
            continue
        late = max(c["idle"]["reader_cpu_frac_late_mean"] for c in qc)
        early = max(c["idle"]["reader_cpu_frac_early_mean"] for c in qc)
        paced = [s["reader_cpu_busy_frac_mean"] for c in qc for s in c["subruns"]
                 if s["pace_ns"] >= 10_000_000 and s["reader_cpu_busy_frac_mean"] is not None]
        det = (f"idle window, worst cell mean per reader: early {100 * early:.2f}%, late {100 * late:.2f}%")
        if paced:
            det += f"; between paced messages (pace >= 10 ms) up to {100 * max(paced):.1f}%"
        ok = late < 0.01 and early < 0.01
        status = ("met" if ok else "missed") if q not in BASELINES else "reference"
        out.append({"name": f"{q} reader idle CPU < 1%", "status": status,
                    "detail": det, "target_applies": q not in BASELINES})

    # 3. uncontended rdmaq-shm p50 <= vllm p50 for 64 B - 40 KB
    rs = [r for r in ratios if r["queue"] == "rdmaq-shm" and r["size"] <= 40 * 1024
          and not is_contended(cell_by[("rdmaq-shm", r["readers"], contention_key(r))], m)
          and r["p50_ratio"] is not None]
    if rs:
        met = [r for r in rs if r["p50_ratio"] <= 1.0]
        worst = max(rs, key=lambda r: r["p50_ratio"])
        out.append({
            "name": "uncontended rdmaq-shm p50 <= vllm p50 (64 B - 40 KB)",
            "status": "met" if len(met) == len(rs) else ("partly met" if met else "missed"),
            "detail": f"{len(met)}/{len(rs)} configurations; worst ratio {worst['p50_ratio']:.3f} "
                      f"(rd {worst['readers']}, {size_label(worst['size'])}, {pace_label(worst['pace_ns'])})",
            "configs": len(rs), "met": len(met),
        })
    return out


def group_cells(cells):
    g = defaultdict(list)
    for c in cells:
        g[(c["readers"], contention_key(c))].append(c)
    return g


def format_markdown(result: dict) -> str:
    """Compact Markdown: per reader count and contention, each queue beside vLLM's variants from
    the same run; ratios against the better variant (s: vllm-spinloop was the better)."""
    m = result["machine"]
    out = []
    queues = [q for q in dict.fromkeys(c["queue"] for c in result["cells"]) if q not in BASELINES]
    out.append(f"{baselines_line(result)}\n")
    for (rd, ck), cells in group_cells(result["cells"]).items():
        by_q = {c["queue"]: c for c in cells}
        bases = [q for q in BASELINES if q in by_q]
        cpus, att, tok = ck
        out.append(f"**TP={rd}, cpus {cpus_label(list(cpus) if cpus else None, m)}, "
                   f"{att} CPU hogs{', tokenizer attacker' if tok else ''}** "
                   f"(max over readers; µs)\n")
        head, sep = "| bytes | pace |", "|---:|---:|"
        for q in bases:
            head += f" {q} p50 | {q} p99 | {q} rd CPU |"
            sep += "---:|---:|---:|"
        for q in queues:
            head += f" {q} p50 | {q} p99 | {q} rd CPU | p50 ratio | p99 ratio |"
            sep += "---:|---:|---:|---:|---:|"
        out += [head, sep]
        first = by_q[bases[0]] if bases else next(iter(by_q.values()))
        for s0 in first["subruns"]:
            key = (s0["size"], s0["pace_ns"])
            row = f"| {size_label(key[0])} | {pace_label(key[1])} |"

            def find(c, key=key):
                if not c:
                    return None
                return next((s for s in c["subruns"] if (s["size"], s["pace_ns"]) == key), None)
            subs = {q: find(by_q[q]) for q in bases}
            best = best_baseline({q: v for q, v in subs.items() if v})
            for q in bases:
                b = subs[q] or {}
                bl = b.get("latency_max_over_readers") or {}
                row += (f" {_f(bl.get('p50_us'), '{:.0f}')} | {_f(bl.get('p99_us'), '{:.0f}')} |"
                        f" {_pctcell(b.get('reader_cpu_busy_frac_mean'))} |")
            for q in queues:
                s = find(by_q.get(q))
                sl = (s or {}).get("latency_max_over_readers") or {}

                def rat(k, sl=sl, best=best):
                    if not sl or k not in best:
                        return "-"
                    return f"{sl[k] / best[k][0]:.2f}" + (" s" if best[k][1] == "vllm-spinloop" else "")
                row += (f" {_f(sl.get('p50_us'), '{:.0f}')} | {_f(sl.get('p99_us'), '{:.0f}')} |"
                        f" {_pctcell((s or {}).get('reader_cpu_busy_frac_mean'))} |"
                        f" {rat('p50_us')} | {rat('p99_us')} |")
            out.append(row)
        idle = " · ".join(
            f"{c['queue']} {_pct2(c['idle']['reader_cpu_frac_early_mean'])}% / "
            f"{_pct2(c['idle']['reader_cpu_frac_late_mean'])}%"
            for c in cells if c.get("idle"))
        out.append(f"\nIdle readers (CPU per reader, first / second half of a "
                   f"{cells[0]['idle']['window_s'] if cells[0].get('idle') else '?'} s window): {idle}\n")
    short = idle_window_too_short(result)
    if short:
        out.append(f"Note: {short}.\n")
    return "\n".join(out)
