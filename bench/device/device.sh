#!/usr/bin/env bash
# The GPU machine's side of rdmaq's benchmarks on vLLM 0.26, from one payload (build_payload.py;
# docs/benchmarks/gpu-setup.md). Run from the repository root there; each step is one short command line.
#
#   bench/device/device.sh unpack          unpack the payload pieces this copy carries (.payload/*)
#                                       into $DEST and say which are still missing
#   bench/device/device.sh setup           (all pieces there) build rdmaq into $DEST/site, make the
#                                       models, check the serving path (preflight.py, on the GPU)
#   bench/device/device.sh smoke           three servers on the tiny model, 4 requests per queue, idle
#   bench/device/device.sh sweep           the sweep on the 1B model, cut at $DEADLINE s, servers kept
#   bench/device/device.sh resume          the next part of it (stops the servers once all ran);
#                                       SWEEP=ab resumes the A/B instead
#   bench/device/device.sh ab              the A/B of rdmaq's waiting under CPU hogs (docs/investigations/next-gpu-run.md:
#                                       AB_QUEUES, AB_SETTINGS), servers kept, like sweep
#   bench/device/device.sh step            rdmaq bench step on the GPU: TP 4 and 8 ranks sharing it,
#                                       rdmaq-shm, vllm, vllm-spinloop, idle and hogs, 3 runs,
#                                       cut at $DEADLINE - 60 s (rebuilds rdmaq into $DEST/site
#                                       when the setup's copy is older than this one)
#   bench/device/device.sh micro         the microbenchmark (rdmaq bench): for each of $READERS (8 4)
#                                       readers, idle and under 16 CPU hogs, 64 B-40 KB, 1 ms and
#                                       10 ms, rdmaq-shm against both vLLM variants; one JSON per
#                                       reader count and the digest's per-cell medians
#   bench/device/device.sh micro-sweep   the idle tail against reader CPU: TP=8 on an idle machine,
#                                       rdmaq with the waiting settings a user can choose
#                                       (QUEUE@VAR=VALUE variants) and both vLLM variants, then
#                                       `rdmaq bench sweep`'s plot and points
#   bench/device/device.sh diagnose      the contended tail with the scheduler traced (tracefs):
#                                       TP=8 under 16 hogs, rdmaq's default against a variant
#                                       and vLLM, a digest of a few lines per sub-run
#                                       (micro*, diagnose: QUEUES READERS ATTACKERS SIZES PACE
#                                       DURATION change the defaults)
#   bench/device/device.sh cpuset          the servers confined as in a container, on a cpuset:
#                                       --server-cpus $SERVER_CPUS (4), settings idle, hogs,
#                                       hogs-ingroup (CONTAINER_SETTINGS), servers kept, like
#                                       sweep (SWEEP=cpuset resumes it)
#   bench/device/device.sh quota           the same with a CPU quota instead: --server-quota
#                                       $SERVER_QUOTA (4; cgroup v2, root), SWEEP=quota
#   bench/device/device.sh restore FILE    a sweep's last part brought back (sweep-partN.tgz, carried
#                                       in the repository copy) into $DEST/sweep, for `resume` on
#                                       a new machine (new servers are started)
#   bench/device/device.sh status          what $DEST holds, the kept servers, the GPU's memory
#
# Results are written under $DEST (outside the repository copy: kept between calls while the
# machine is held) and each step copies them into $OUT (at most 8 files; the tool brings them
# back). Exit status: the step's (rdmaq bench serve: 3 = runs left for `resume`). SERVE_ARGS:
# more `rdmaq bench serve` arguments for every step (as the step's own extra arguments are).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEST=${RDMAQ_GPU_DEST:-/tmp/rdmaq-gpu}
OUT=${OUT:-$DEST/out}
PY=${PYTHON:-python3}
DEADLINE=${DEADLINE:-480}  # s: a call lasts 600 s at most; stopping (at most 30 s, the servers
                           # together) and packing come after the last run
mkdir -p "$DEST" "$OUT"
# vLLM's CUDA platform and NCCL: keep what the machine sets (NVLink multicast off)
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

say() { printf 'device.sh: %s\n' "$*"; }

payload_env() {
  [ -f "$DEST/env.sh" ] || { say "no complete payload in $DEST: run 'unpack' with every piece"; exit 1; }
  # shellcheck source=/dev/null
  . "$DEST/env.sh"
}

# a results directory into $OUT: results.json and summary.md as they are, the rest as one tar
pack() {  # pack DIR NAME
  local dir=$1 name=$2
  [ -d "$dir" ] || return 0
  for f in results.json summary.md serve.png; do
    [ -f "$dir/$f" ] && cp "$dir/$f" "$OUT/$name-$f"
  done
  tar czf "$OUT/$name.tgz" -C "$dir" --exclude=model --exclude='steptime-*/g*.json' . &&
    say "packed $dir into $OUT/$name.tgz ($(du -h "$OUT/$name.tgz" | cut -f1))"
}

bench() {  # bench ARGS...: rdmaq bench serve from the payload (not the source tree's rdmaq/)
  # a SIGTERM before the call's end: the harness stops (servers kept) and the step still packs
  # shellcheck disable=SC2086  # SERVE_ARGS: words on purpose
  (cd "$DEST" && timeout --kill-after=30 $((DEADLINE + 60)) "$PY" -m rdmaq.cli bench serve "$@" ${SERVE_ARGS:-})
}

install_rdmaq() {  # this copy's rdmaq into $DEST/site
  local t
  t=$(date +%s)
  "$PY" -m pip install -q --no-deps --no-build-isolation --no-index --upgrade \
    --target "$DEST/site" "$REPO" >"$DEST/pip-rdmaq.log" 2>&1 ||
    { tail -30 "$DEST/pip-rdmaq.log"; say "building rdmaq failed"; exit 1; }
  say "rdmaq built into $DEST/site in $(( $(date +%s) - t )) s"
}

fresh_rdmaq() {  # fresh_rdmaq DIR...: build rdmaq into $DEST/site again when these bench/ folders changed
  local d f
  for d in "$@"; do
    for f in "$REPO"/bench/"$d"/*.py; do
      cmp -s "$f" "$DEST/site/rdmaq/bench/${f#"$REPO"/bench/}" || { install_rdmaq; return; }
    done
  done
}

micro() {  # micro NAME ARGS...: rdmaq bench (the microbenchmark) into $OUT/NAME.{json,txt,err}
  local name=$1
  shift
  (cd "$DEST" && timeout --kill-after=30 $((DEADLINE + 60)) "$PY" -m rdmaq.cli bench "$@" --time-cap 5 \
     --stages --label "${LABEL:-H200}" --json "$OUT/$name.json") >"$OUT/$name.txt" 2>"$OUT/$name.err"
}

skipped() {  # what a microbenchmark run skipped or lost, from its progress
  grep -E "^rdmaq bench: (skipping|cell failed)" "$OUT/$1.err" | cut -c1-300
}

parts() {  # the parts a sweep directory's results.json records
  "$PY" -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["parts"]))' "$1/results.json" 2>/dev/null || echo 0
}

step=${1:-status}
case $step in
  unpack)
    shopt -s nullglob
    pieces=("$REPO"/.payload/*/)
    "$PY" "$REPO/bench/device/unpack.py" "${pieces[@]}" --dest "$DEST" ;;
  setup)
    "$PY" "$REPO/bench/device/unpack.py" --dest "$DEST" --require-complete || exit 1
    payload_env
    install_rdmaq
    for shape in tiny llama-3.2-1b; do
      [ -f "$DEST/models/$shape/config.json" ] ||
        (cd "$DEST" && "$PY" -m rdmaq.bench.serve.tiny_llama "$DEST/models/$shape" --shape "$shape" \
          --dtype bfloat16 --device cuda) || exit 1
    done
    nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
    (cd "$DEST" && "$PY" "$REPO/bench/device/preflight.py" --bench-model "$DEST/models/tiny" \
       --json "$OUT/preflight.json") ;;
  smoke)
    payload_env
    rm -rf "$DEST/smoke"
    bench --device cuda --model "$DEST/models/tiny" --out "$DEST/smoke" --settings idle \
      --runs 1 --num-prompts 4 --rate 8 --output-len 32 --input-len 32 --label "${LABEL:-H200}" "${@:2}"
    rc=$?; pack "$DEST/smoke" smoke; exit $rc ;;
  sweep)
    payload_env
    rm -rf "$DEST/sweep"
    bench --device cuda --model "$DEST/models/llama-3.2-1b" --out "$DEST/sweep" \
      --keep-servers --deadline "$DEADLINE" --label "${LABEL:-H200}" "${@:2}"
    rc=$?; pack "$DEST/sweep" "sweep-part$(parts "$DEST/sweep")"; exit $rc ;;
  ab)
    payload_env
    rm -rf "$DEST/ab"
    bench --device cuda --model "$DEST/models/llama-3.2-1b" --out "$DEST/ab" \
      --queues "${AB_QUEUES:-vllm,vllm-spinloop,rdmaq-shm,rdmaq-shm@RDMAQ_EXPERIMENT=busy_spin_us=3000,rdmaq-shm@RDMAQ_SLICE_US=0}" \
      --settings "${AB_SETTINGS:-hogs,hogs-sessions}" --num-prompts 64 --gpu-memory-utilization 0.15 \
      --keep-servers --deadline "$DEADLINE" --label "${LABEL:-H200}" "${@:2}"
    rc=$?; pack "$DEST/ab" "ab-part$(parts "$DEST/ab")"; exit $rc ;;
  step)
    # barrier amplification of a TP step, the ranks sharing the one GPU (rdmaq bench step);
    # STEP_TP, STEP_QUEUES, STEP_SETTINGS, STEP_WORK_US, STEP_STEPS, STEP_RUNS change the defaults
    payload_env
    fresh_rdmaq step common .  # an older setup's rdmaq: build again
    rm -rf "$DEST/step" && mkdir -p "$DEST/step"
    (cd "$DEST" && timeout --kill-after=30 $((DEADLINE + 60)) "$PY" -m rdmaq.cli bench step --device cuda \
       --tp "${STEP_TP:-4,8}" --queues "${STEP_QUEUES:-rdmaq-shm,vllm,vllm-spinloop}" \
       --settings "${STEP_SETTINGS:-idle,hogs}" --work-us "${STEP_WORK_US:-300}" \
       --steps "${STEP_STEPS:-2000}" --runs "${STEP_RUNS:-3}" --deadline $((DEADLINE - 60)) \
       --json "$DEST/step/results.json" --markdown "$DEST/step/summary.md" \
       --label "${LABEL:-H200}" "${@:2}") 2>&1 | tee "$DEST/step/log.txt"
    rc=${PIPESTATUS[0]}; pack "$DEST/step" step; exit "$rc" ;;
  micro)
    payload_env
    fresh_rdmaq micro common .
    rc=0
    for tp in ${READERS:-8 4}; do
      t0=$SECONDS
      micro "tp$tp" --queues "${QUEUES:-rdmaq-shm,vllm,vllm-spinloop}" --readers "$tp" \
        --attackers "${ATTACKERS:-0,16}" --sizes "${SIZES:-64,2K,40K}" --pace "${PACE:-1ms,10ms}" \
        --duration "${DURATION:-2.5}" --idle-window "${IDLE:-1}" || rc=1
      say "micro: TP=$tp done in $((SECONDS - t0)) s"
      skipped "tp$tp"
      [ -f "$OUT/tp$tp.json" ] && "$PY" "$REPO/bench/device/digest.py" --medians "$OUT/tp$tp.json"
    done
    exit $rc ;;
  micro-sweep)
    payload_env
    fresh_rdmaq micro common .
    v=rdmaq-shm@RDMAQ_
    queues="rdmaq-shm,${v}ANTICIPATE=0,${v}ANTICIPATE=0@RDMAQ_SPIN_US=0,${v}SPIN_US=200"
    queues+=",${v}SPIN_US=1000000,vllm,vllm-spinloop"
    micro sweep --queues "${QUEUES:-$queues}" --readers "${READERS:-8}" --attackers 0 \
      --sizes "${SIZES:-64,2K}" --pace "${PACE:-1ms,10ms}" --duration "${DURATION:-1}" --idle-window 0.2
    rc=$?
    skipped sweep
    [ -f "$OUT/sweep.json" ] && (cd "$DEST" && "$PY" -m rdmaq.cli bench sweep "$OUT/sweep.json" \
      --plot "$OUT/sweep.png" --json "$OUT/sweep-points.json")
    exit $rc ;;
  diagnose)
    payload_env
    fresh_rdmaq micro common .
    mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
    v=rdmaq-shm@RDMAQ_
    trace=(--sched-trace "$OUT/trace" --sched-trace-kb "${TRACE_KB:-8192}")
    why=$(cd "$DEST" && "$PY" -c 'from rdmaq.bench.micro.schedtrace import unavailable; print(unavailable() or "")')
    [ -n "$why" ] && { say "diagnose: no scheduler trace here: $why"; trace=(); }
    micro diag --queues "${QUEUES:-rdmaq-shm,${v}SLICE_US=100@RDMAQ_SETTLE_FAR_US=0,vllm}" \
      --readers "${READERS:-8}" --attackers "${ATTACKERS:-16}" --sizes "${SIZES:-64}" \
      --pace "${PACE:-1ms,10ms}" --duration "${DURATION:-2}" --idle-window 0.2 "${trace[@]}"
    rc=$?
    skipped diag
    [ -f "$OUT/diag.json" ] && "$PY" "$REPO/bench/device/digest.py" "$OUT/diag.json"
    exit $rc ;;
  cpuset|quota)
    payload_env
    if [ "$step" = cpuset ]; then confine=(--server-cpus "${SERVER_CPUS:-4}")
    else confine=(--server-quota "${SERVER_QUOTA:-4}"); fi
    rm -rf "${DEST:?}/$step"
    bench --device cuda --model "$DEST/models/llama-3.2-1b" --out "$DEST/$step" "${confine[@]}" \
      --settings "${CONTAINER_SETTINGS:-idle,hogs,hogs-ingroup}" --num-prompts 64 \
      --keep-servers --deadline "$DEADLINE" --label "${LABEL:-H200}" "${@:2}"
    rc=$?; pack "$DEST/$step" "$step-part$(parts "$DEST/$step")"; exit $rc ;;
  resume)
    payload_env
    dir=$DEST/${SWEEP:-sweep}
    bench --out "$dir" --resume --keep-servers --deadline "$DEADLINE" "${@:2}"
    rc=$?; pack "$dir" "${SWEEP:-sweep}-part$(parts "$dir")"; exit $rc ;;
  restore)
    [ -f "${2:-}" ] || { say "restore: give a sweep-partN.tgz"; exit 2; }
    dir=$DEST/${SWEEP:-sweep}
    rm -rf "$dir" && mkdir -p "$dir" && tar xzf "$2" -C "$dir" &&
      say "restored $2 into $dir: $(parts "$dir") part(s) so far" ;;
  status)
    "$PY" "$REPO/bench/device/unpack.py" --dest "$DEST"
    [ -f "$DEST/sweep/servers.json" ] && say "kept servers: $(cat "$DEST/sweep/servers.json" | head -c 400)"
    nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader 2>/dev/null
    exit 0 ;;
  *)
    sed -n '2,/^set -uo/p' "$0" | grep '^#'; exit 2 ;;
esac
