#!/usr/bin/env bash
# tests/bench for CI: install what the harness tests need into $PYTHON, else $RDMAQ_VENV's
# python, else the active one (idempotent; pip caches under ~/.cache), then run them once
# each as functional checks (--benchmark-disable).
# RDMAQ_BENCH_VLLM=0 skips installing vLLM (its test is then skipped, not failed; under
# RDMAQ_REQUIRE_ALL=1, as in tests/run_all.sh, a skip for a missing dependency fails).
set -euo pipefail
cd "$(dirname "$0")/../.."
# the suite's venv (tests/run_all.sh passes RDMAQ_VENV), else the active Python
PY=${PYTHON:-${RDMAQ_VENV:+$RDMAQ_VENV/bin/python}}
PY=${PY:-python}
$PY -m pip install -q pytest pytest-timeout pytest-benchmark numpy psutil matplotlib
if [ "${RDMAQ_BENCH_VLLM:-1}" = 1 ]; then
    # torch first (the local CPU wheel), so that nothing pulls a CUDA build; then vLLM without
    # its dependency tree: its MessageQueue needs only these few (docs/benchmarks.md).
    $PY -c 'import torch' 2>/dev/null || $PY -m pip install -q torch==2.13.0
    $PY -c 'import vllm' 2>/dev/null || $PY -m pip install -q --no-deps vllm==0.33.0
    $PY -m pip install -q packaging psutil pyzmq urllib3 regex
fi
exec $PY -m pytest -q -p no:cacheprovider tests/bench --benchmark-disable
