#!/usr/bin/env bash
# Rehearse the GPU machine's setup here, without a GPU (docs/benchmarks/gpu-setup.md).
#
# A venv like the machine's Python (its torch 2.11.0+cu130 with the nvidia-* libraries, triton,
# transformers 5.17, tokenizers and the rest of its package list; pydantic and the other
# packages it lacks are removed if pip pulled them in), the payload built for this Python
# (build_payload.py --python 3.11 --fast: the same files as the machine's, quicker to compress),
# unpacked by unpack.py, rdmaq built into it as device.sh does, the tiny model, and
# preflight.py --fake-cuda: vLLM's CUDA platform answering as an H200, with a stand-in
# libcuda.so.1 (empty cu* functions) so that vLLM's compiled modules load against torch.
#
#   bash bench/device/check_payload.sh [--reuse]    # --reuse: keep an earlier payload build
#
# Caches under ${RDMAQ_GPU_CHECK:-~/.cache/rdmaq-gpu-check} (the venv ~7 GB, the wheels).
# Exit status: preflight's (0: everything the serving path imports is there).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${RDMAQ_GPU_CHECK:-$HOME/.cache/rdmaq-gpu-check}
VENV=$CACHE/venv
PY=${PYTHON:-python3.11}
REUSE=0
[ "${1:-}" = --reuse ] && REUSE=1
export PIP_DISABLE_PIP_VERSION_CHECK=1
say() { printf 'check_payload: %s\n' "$*"; }
mkdir -p "$CACHE"

# the machine's packages that vLLM's serving path touches (KINDS.md's list; versions where known)
DEVICE_PKGS=(torch==2.11.0 triton==3.6.0 transformers==5.17.0 tokenizers==0.23.2
  huggingface_hub==1.33.0 safetensors==0.8.0 sentencepiece==0.2.2 tiktoken==0.14.0 numpy psutil
  pyyaml requests aiohttp uvloop cloudpickle msgpack prometheus-client anyio httpx h11 jinja2
  regex filelock fsspec packaging pillow einops py-cpuinfo tqdm protobuf scipy
  opencv-python-headless ninja setuptools six nvidia-ml-py cuda-bindings matplotlib typer click
  rich annotated-doc wheel)
NOT_ON_DEVICE=(pydantic pydantic_core annotated-types typing-inspection)
if [ ! -f "$VENV/.complete" ]; then
  say "building $VENV (torch 2.11.0+cu130 and the CUDA 13 libraries: several GB)"
  rm -rf "$VENV"; "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q "${DEVICE_PKGS[@]}"
  "$VENV/bin/pip" uninstall -y -q "${NOT_ON_DEVICE[@]}" 2>/dev/null || true
  touch "$VENV/.complete"
fi
PYVER=$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')

PAYLOAD=$CACHE/payload-$PYVER
if [ $REUSE = 0 ] || [ ! -f "$PAYLOAD/site/manifest.json" ]; then
  say "payload for Python $PYVER (fast compression)"
  python3 "$REPO/bench/device/build_payload.py" --python "$PYVER" --fast --out "$PAYLOAD" \
    --work "$CACHE/work-$PYVER"
fi

DEST=$(mktemp -d /tmp/rdmaq-gpu-check.XXXXXX)
trap 'rm -rf "$DEST"' EXIT
"$VENV/bin/python" "$REPO/bench/device/unpack.py" "$PAYLOAD/kernels-1" "$PAYLOAD/kernels-2" --dest "$DEST"
"$VENV/bin/python" "$REPO/bench/device/unpack.py" "$PAYLOAD/site" --dest "$DEST" --require-complete
# shellcheck source=/dev/null
. "$DEST/env.sh"

# a libcuda.so.1 with the driver functions vLLM's modules link (they are never called here)
mkdir -p "$DEST/stub"
for so in "$DEST"/site/vllm/*.so "$DEST"/site/vllm/vllm_flash_attn/*.so; do
  nm -D --undefined-only "$so" | awk '$2 ~ /^cu/ {sub(/@.*/, "", $2); print $2}'
done | sort -u | awk 'BEGIN{print "int rdmaq_stub_libcuda;"} {print "int " $1 "(void){return 999;}"}' \
  > "$DEST/stub/libcuda.c"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$DEST/stub/libcuda.so.1" "$DEST/stub/libcuda.c"

say "rdmaq into the payload's site (as device.sh setup does)"
"$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation --no-index --upgrade \
  --target "$DEST/site" "$REPO" >"$DEST/pip-rdmaq.log" 2>&1 || { tail -30 "$DEST/pip-rdmaq.log"; exit 1; }
(cd "$DEST" && "$VENV/bin/python" -m rdmaq.bench.serve.tiny_llama "$DEST/models/tiny" >/dev/null)  # the payload's rdmaq

say "preflight, vLLM's CUDA platform faked"
cd "$DEST"
LD_LIBRARY_PATH="$DEST/stub" "$VENV/bin/python" "$REPO/bench/device/preflight.py" --fake-cuda \
  --bench-model "$DEST/models/tiny" --json "$CACHE/preflight-$PYVER.json"
