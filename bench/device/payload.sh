#!/usr/bin/env bash
# Build .devrun/, what `rdmaq bench` needs on a machine without a package index that has
# Python 3.12, gcc, numpy, psutil and torch (the GPU machine of docs/benchmarks/micro-h200.md):
#   .devrun/wheels/       cp312 wheels of pyzmq, cffi, pycparser, regex, urllib3, packaging
#   .devrun/vllm-py.tar.xz  vLLM 0.33.0's Python files, dist-info and spinloop module (not the
#                         CUDA kernels that make its wheel 336 MB)
#   .devrun/cache/        a loadable copy of vLLM's spinloop module (bench/queues.py), so the
#                         other machine needs no patchelf
# Run here, from a venv with rdmaq installed (pip install -e .[bench]) and patchelf on PATH:
#   PYTHON=/path/to/venv/bin/python bench/device/payload.sh
# Then carry .devrun to the other machine and source bench/device/env.sh there.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
OUT=.devrun
VLLM=${VLLM_VERSION:-0.33.0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/out/wheels"
echo "payload: wheels (cp312, manylinux x86_64)"
"$PY" -m pip download -q --only-binary=:all: --no-deps --implementation cp --python-version 3.12 \
	--abi cp312 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	--platform manylinux2014_x86_64 -d "$tmp/out/wheels" \
	pyzmq==27.3.0 cffi==2.1.1 pycparser regex urllib3 packaging
echo "payload: vLLM $VLLM's Python files (the wheel comes from pip's cache when it is there)"
"$PY" -m pip download -q --no-deps "vllm==$VLLM" -d "$tmp/whl"
"$PY" - "$tmp/whl"/vllm-*.whl "$tmp/vllm" <<'PYEOF'
import sys, zipfile
whl, dest = sys.argv[1:3]
with zipfile.ZipFile(whl) as z:
    keep = [n for n in z.namelist()
            if n.endswith(".py") or n.endswith("spinloop.abi3.so") or ".dist-info/" in n]
    z.extractall(dest, keep)
print(f"payload: {len(keep)} files from {whl.rsplit('/', 1)[-1]}")
PYEOF
tar -C "$tmp/vllm" -cJf "$tmp/out/vllm-py.tar.xz" .
echo "payload: a loadable copy of vllm/spinloop.abi3.so"
XDG_CACHE_HOME="$tmp/out/cache" "$PY" -c '
import sys
from rdmaq.bench.queues import loadable_spinloop
path, why = loadable_spinloop(sys.argv[1])
sys.exit(f"payload: {why}" if why else None)' "$tmp/vllm/vllm/spinloop.abi3.so"
rm -rf "$OUT"
mv "$tmp/out" "$OUT"
du -sh "$OUT"
find "$OUT" -type f | sort
