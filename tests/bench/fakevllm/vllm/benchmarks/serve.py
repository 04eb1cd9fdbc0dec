"""Stand-in for ``vllm.benchmarks.serve`` (tests/bench/fakevllm: see fake_cli.py).

Takes the arguments rdmaq bench serve passes, sends ``--num-prompts`` streamed completions
to ``--base-url`` one after another, prints the two lines the harness marks its CPU
snapshots at, and writes a result file with the keys it reads.
"""

import json
import os
import statistics
import time
import urllib.request


def add_cli_args(parser):
    for flag in ("--backend", "--base-url", "--model", "--tokenizer", "--dataset-name",
                 "--percentile-metrics", "--metric-percentiles", "--result-dir",
                 "--result-filename"):
        parser.add_argument(flag)
    for flag in ("--random-input-len", "--random-output-len", "--num-prompts",
                 "--max-concurrency", "--seed"):
        parser.add_argument(flag, type=int)
    parser.add_argument("--request-rate", type=float)
    for flag in ("--ignore-eos", "--disable-tqdm", "--save-result"):
        parser.add_argument(flag, action="store_true")
    parser.add_argument("--metadata", nargs="*", default=[])


def _one(base_url, model, n_tokens):
    body = json.dumps({"model": model, "prompt": "x", "max_tokens": n_tokens,
                       "stream": True}).encode()
    req = urllib.request.Request(f"{base_url}/v1/completions", data=body,
                                 headers={"content-type": "application/json"})
    t0 = time.monotonic()
    stamps = []
    with urllib.request.urlopen(req, timeout=60) as r:
        for line in r:
            if line.startswith(b"data: {"):
                stamps.append(time.monotonic())
    return t0, stamps


def main(args):
    if os.environ.get("FAKE_VLLM_CLIENT_FAIL"):
        raise SystemExit(7)
    print(f"fake vllm bench serve cpus: {sorted(os.sched_getaffinity(0))}", flush=True)
    print("Starting initial single prompt test run...", flush=True)
    _one(args.base_url, args.model, 2)
    print("Starting main benchmark run...", flush=True)
    t_start = time.monotonic()
    ttft, tpot, itl, e2e, tokens = [], [], [], [], 0
    for _ in range(args.num_prompts):
        t0, stamps = _one(args.base_url, args.model, args.random_output_len)
        ttft.append((stamps[0] - t0) * 1e3)
        gaps = [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])]
        itl += gaps
        tpot.append(statistics.mean(gaps))
        e2e.append((stamps[-1] - t0) * 1e3)
        tokens += len(stamps)
    duration = time.monotonic() - t_start
    print("============ Serving Benchmark Result ============", flush=True)
    q = statistics.quantiles
    result = {"completed": args.num_prompts, "failed": 0, "duration": duration,
              "total_output_tokens": tokens, "output_throughput": tokens / duration,
              "request_throughput": args.num_prompts / duration}
    for name, xs in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2e)):
        cuts = q(xs, n=100) if len(xs) > 1 else xs * 99
        result |= {f"p50_{name}_ms": statistics.median(xs), f"p99_{name}_ms": cuts[98],
                   f"mean_{name}_ms": statistics.mean(xs)}
    for kv in args.metadata:
        k, _, v = kv.partition("=")
        result[k] = v
    with open(os.path.join(args.result_dir, args.result_filename), "w") as f:
        json.dump(result, f)
    return result
