"""Latency statistics of one sub-run (one queue, size, pace, contention setting)."""

from __future__ import annotations

import numpy as np

# Quantiles kept in the JSON to redraw CDFs without the raw samples.
CDF_Q = sorted(set(
    [i / 100 for i in range(0, 100)]
    + [0.991, 0.992, 0.993, 0.994, 0.995, 0.996, 0.997, 0.998, 0.999, 0.9995, 0.9999, 1.0]
))


def _arr(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype=np.int64) if b else np.zeros(0, dtype=np.int64)


def summarize(values_ns: np.ndarray) -> dict | None:
    """p50/p90/p99/p99.9/max/mean in microseconds (linear interpolation percentiles)."""
    if values_ns.size == 0:
        return None
    us = values_ns.astype(np.float64) / 1e3
    p = np.percentile(us, [50, 90, 99, 99.9])
    return {
        "n": int(us.size),
        "min_us": float(us.min()),
        "p50_us": float(p[0]),
        "p90_us": float(p[1]),
        "p99_us": float(p[2]),
        "p999_us": float(p[3]),
        "max_us": float(us.max()),
        "mean_us": float(us.mean()),
    }


HOW = ("none", "ready", "spin", "window", "woken")


def stage_figures(writer, readers, send, recv, lat, n) -> dict:
    """Where the time goes, per message, on the path to its slowest reader: p50/p99 µs of
    each stage, and how readers' waits ended.  The writer's stages come from its send
    call, the reader's from the queue's stamps (same clock on one host)."""
    ws = [_arr(b) for b in writer["stages"]]
    m = min(n, ws[0].size)
    t_send = send[0][:m]
    slow = lat[:, :m].argmax(axis=0)
    rs = [[_arr(b)[:m] for b in r["stages"]] for r in readers]
    cols = np.arange(m)

    def pick(k):  # stage k of each message's slowest reader
        return np.stack([r[k] for r in rs])[slow, cols]

    stamp, seen, copied = pick(0), pick(1), pick(2)
    # A queue whose ring holds no stamp (vLLM's) records 0: the writer's own record of the
    # same message (its ``mid``, taken as it sets the flags) stands in.
    stamp = np.where(stamp == 0, ws[1][:m], stamp)
    done = np.stack([recv[i][:m] for i in range(len(readers))])[slow, cols]
    parts = {
        "serialize": ws[0][:m] - t_send,    # send call to the C put: pickling, Python
        "copy_in": ws[1][:m] - ws[0][:m],   # waiting for room, copying into the ring
        "publish": ws[2][:m] - ws[1][:m],   # barrier, waking sleeping readers
        "detect": seen - stamp,             # publish stamp to the reader seeing it
        "copy_out": copied - seen,
        "deserialize": done - copied,       # unpickling, back in the caller
        "reader_side": done - seen,         # seen to returned: the reader's path after its wait
    }
    out = {k: {"p50_us": float(np.percentile(v, 50)) / 1e3, "p99_us": float(np.percentile(v, 99)) / 1e3}
           for k, v in parts.items()}
    hows = np.concatenate([r[3] for r in rs])
    out["how"] = {HOW[h] if h < len(HOW) else str(h): int((hows == h).sum()) for h in np.unique(hows)}
    # How the slowest reader's wait ended, for the slowest 1 % of messages: what the tail is made of.
    worst = np.argsort(lat[:, :m].max(axis=0))[-max(1, m // 100):]
    tail = pick(3)[worst]
    out["tail_how"] = {HOW[h] if h < len(HOW) else str(h): int((tail == h).sum()) for h in np.unique(tail)}
    return out


def analyze(writer: dict, readers: list[dict]) -> tuple[dict, np.ndarray]:
    """Combine the writer's and readers' raw records; return (figures, max-over-readers ns)."""
    send = [_arr(r["send_t"]) for r in readers]
    recv = [_arr(r["recv_t"]) for r in readers]
    errors = [e for r in readers for e in r["errors"]]
    n = min((a.size for a in send), default=0)
    if any(a.size != n for a in send):
        errors.append("readers received different numbers of measured messages: "
                      + ", ".join(str(a.size) for a in send))
    if n and any(not np.array_equal(send[0][:n], s[:n]) for s in send[1:]):
        errors.append("readers saw different send stamps for the same sequence numbers")
    lat = np.stack([recv[i][:n] - send[i][:n] for i in range(len(readers))]) if n else \
        np.zeros((len(readers), 0), dtype=np.int64)
    lat_max = lat.max(axis=0) if n else np.zeros(0, dtype=np.int64)
    out = {
        "measured": int(n),
        "errors": errors,
        "latency_max_over_readers": summarize(lat_max),
        "latency_all_readers": summarize(lat.ravel()),
        "latency_per_reader_p50_us": [float(np.percentile(x, 50)) / 1e3 for x in lat] if n else [],
        "latency_per_reader_p99_us": [float(np.percentile(x, 99)) / 1e3 for x in lat] if n else [],
        "negative_latencies": int((lat < 0).sum()),
    }
    if n:
        span_ns = int(max(r[n - 1] for r in recv) - send[0][0])
        out["throughput_msgs_per_s"] = (n / (span_ns / 1e9)) if span_ns > 0 else None
        # quantiles of max-over-readers; the grid (CDF_Q) is stored once per JSON file
        out["cdf_us"] = [float(v) for v in np.quantile(lat_max.astype(np.float64) / 1e3, CDF_Q)]
    else:
        out["throughput_msgs_per_s"] = None
    # CPU of the busy phase: first measured message to end of sub-run.
    if n and writer.get("stages") and all(r.get("stages") for r in readers):
        out["stages"] = stage_figures(writer, readers, send, recv, lat, n)
    if all(r.get("counters") for r in readers):
        # the queue's own counters over the sub-run, summed over readers
        keys = readers[0]["counters"].keys()
        out["reader_counters"] = {k: sum(r["counters"].get(k, 0) for r in readers) for k in keys
                                  if k != "slice_ns"}
    rd_cpu = [r["cpu_ns"] / r["wall_ns"] for r in readers if r["cpu_ns"] is not None and r["wall_ns"]]
    out["reader_cpu_busy_frac"] = rd_cpu
    out["reader_cpu_busy_frac_mean"] = float(np.mean(rd_cpu)) if rd_cpu else None
    out["reader_cpu_busy_s"] = [r["cpu_ns"] / 1e9 if r["cpu_ns"] is not None else None for r in readers]
    out["writer_cpu_busy_s"] = writer["cpu_ns"] / 1e9 if writer.get("cpu_ns") is not None else None
    out["writer_cpu_busy_frac"] = (writer["cpu_ns"] / writer["wall_ns"]) \
        if writer.get("cpu_ns") is not None and writer.get("wall_ns") else None
    out["writer_sent"] = writer["sent"]
    # duration of the writer's send call (serialize, copy, wake readers): the writer's share
    out["writer_send_call"] = summarize(_arr(writer.get("send_dur", b"")))
    return out, lat_max
