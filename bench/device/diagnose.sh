#!/usr/bin/env bash
# Scheduler diagnosis of the contended tail, for the machine that got .devrun (env.sh):
# TP=8 under 16 CPU hogs at 1 ms and 10 ms, rdmaq's default against its previous one (a
# QUEUE@VAR=VALUE variant: the 100 µs slice, no settling, the old window placement; csrc/wait.c)
# and vLLM (the better vLLM variant of every 16-hog cell so far; QUEUES=...,vllm-spinloop adds
# the other, ~27 s), every sub-run traced (tracefs, root), then a digest of a few lines per
# sub-run on stdout.
# Files in $OUT: env.txt, diag.json, diag.txt (tables), diag.err (progress, trace summaries),
# trace/schedtrace.txt, trace/excerpts.txt (raw events around the worst messages).
# Settings from the environment: QUEUES READERS ATTACKERS SIZES PACE DURATION LABEL OUT TRACE_KB.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/rdmaq-out}
mkdir -p "$OUT"
# shellcheck source=bench/device/env.sh
. bench/device/env.sh >"$OUT/env.txt" 2>&1 || { cat "$OUT/env.txt"; exit 1; }
tail -1 "$OUT/env.txt"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing >>"$OUT/env.txt" 2>&1
V=rdmaq-shm@RDMAQ_
QUEUES=${QUEUES:-rdmaq-shm,${V}SLICE_US=100@RDMAQ_SETTLE_FAR_US=0,vllm}
trace=(--sched-trace "$OUT/trace")
why=$(python3 -c 'from rdmaq.bench.schedtrace import unavailable; print(unavailable() or "")')
if [ -n "$why" ]; then
	echo "diagnose: no scheduler trace here: $why"
	trace=()
fi
t0=$SECONDS
python3 -m rdmaq.bench.cli --queues "$QUEUES" --readers "${READERS:-8}" --attackers "${ATTACKERS:-16}" \
	--sizes "${SIZES:-64}" --pace "${PACE:-1ms,10ms}" --duration "${DURATION:-2}" --time-cap 5 --stages \
	--idle-window 0.2 --sched-trace-kb "${TRACE_KB:-8192}" "${trace[@]}" --label "${LABEL:-h200}" --json "$OUT/diag.json" \
	>"$OUT/diag.txt" 2>"$OUT/diag.err"
rc=$?
echo "diagnose: rdmaq bench exit $rc after $((SECONDS - t0)) s"
grep -E "^rdmaq bench: (skipping|cell failed)" "$OUT/diag.err" | cut -c1-300
[ -f "$OUT/diag.json" ] && python3 bench/device/digest.py "$OUT/diag.json"
exit $rc
