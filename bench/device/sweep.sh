#!/usr/bin/env bash
# The idle tail against reader CPU, for the machine that got .devrun (env.sh): TP=8 on an idle
# machine, 64 B and 2 KB, 1 ms and 10 ms, rdmaq with the waiting settings a user can choose
# (QUEUE@VAR=VALUE variants: no anticipation, the spin budget) and both vLLM variants; then
# `rdmaq bench sweep`: one plot of the p99 ratio to the better vLLM against reader CPU, and its
# points.
# Files in $OUT: env.txt, sweep.json (the run), sweep.txt (tables), sweep.err (progress),
# sweep.png, sweep-points.json; the points on stdout.
# Settings from the environment: QUEUES READERS SIZES PACE DURATION LABEL OUT.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/rdmaq-out}
mkdir -p "$OUT"
# shellcheck source=bench/device/env.sh
. bench/device/env.sh >"$OUT/env.txt" 2>&1 || { cat "$OUT/env.txt"; exit 1; }
tail -1 "$OUT/env.txt"
V=rdmaq-shm@RDMAQ_
DEFAULT_QUEUES="rdmaq-shm,${V}ANTICIPATE=0,${V}ANTICIPATE=0@RDMAQ_SPIN_US=0,${V}SPIN_US=200"
DEFAULT_QUEUES+=",${V}SPIN_US=1000000,vllm,vllm-spinloop"
t0=$SECONDS
python3 -m rdmaq.bench.cli --queues "${QUEUES:-$DEFAULT_QUEUES}" --readers "${READERS:-8}" --attackers 0 \
	--sizes "${SIZES:-64,2K}" --pace "${PACE:-1ms,10ms}" --duration "${DURATION:-1}" --time-cap 5 --stages \
	--idle-window 0.2 --label "${LABEL:-h200}" --json "$OUT/sweep.json" >"$OUT/sweep.txt" 2>"$OUT/sweep.err"
rc=$?
echo "sweep: rdmaq bench exit $rc after $((SECONDS - t0)) s"
grep -E "^rdmaq bench: (skipping|cell failed)" "$OUT/sweep.err" | cut -c1-300
[ -f "$OUT/sweep.json" ] && python3 -m rdmaq.bench.cli sweep "$OUT/sweep.json" --plot "$OUT/sweep.png" \
	--json "$OUT/sweep-points.json"
exit $rc
