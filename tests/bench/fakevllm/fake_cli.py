"""A stand-in for the ``vllm`` CLI, for testing rdmaq bench serve without vLLM.

``vllm serve MODEL ... --port P``: an HTTP server with /health and streamed /v1/completions
(one chunk per token, at once). ``vllm bench serve ARGS``: vllm.benchmarks.serve of this
directory. A test runs it through a small executable that puts this directory first on
sys.path (the harness's persistent client finds the stand-in vllm package through PYTHONPATH).
"""

import argparse
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        code = 200 if self.path == "/health" else 404
        self.send_response(code)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for i in range(int(body.get("max_tokens", 1))):
            chunk = {"choices": [{"index": 0, "text": f" w{i}"}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


def serve(argv):
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    args, _ = p.parse_known_args(argv)
    print(f"fake vllm serve {' '.join(argv)}", flush=True)
    # what a queue variant adds to a server's environment (QUEUE@NAME=VALUE)
    extra = sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith("RDMAQ_TEST_"))
    print(f"fake vllm serve environment: {' '.join(extra)}", flush=True)
    # where it runs (rdmaq bench serve --server-cpus)
    print(f"fake vllm serve cpus: {sorted(os.sched_getaffinity(0))}", flush=True)
    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


def bench_serve(argv):
    from vllm.benchmarks.serve import add_cli_args, main

    p = argparse.ArgumentParser()
    add_cli_args(p)
    main(p.parse_args(argv))


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2:])
    elif sys.argv[1:3] == ["bench", "serve"]:
        bench_serve(sys.argv[3:])
    else:
        raise SystemExit(f"fake vllm: unknown command {sys.argv[1:]}")
