#!/usr/bin/env bash
# The measured sets, for the machine that got .devrun (env.sh): for each reader count, idle and
# under CPU hogs, sizes 64 B-40 KB, paces 1 ms and 10 ms, rdmaq against both vLLM variants;
# one JSON per reader count, then the digest's per-cell medians on stdout.
# Files in $OUT: env.txt, tp<N>.json, tp<N>.txt (tables), tp<N>.err (progress).
# Settings from the environment: QUEUES READERS ATTACKERS SIZES PACE DURATION IDLE LABEL OUT RUN.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/rdmaq-out}
mkdir -p "$OUT"
# shellcheck source=bench/device/env.sh
. bench/device/env.sh >"$OUT/env.txt" 2>&1 || { cat "$OUT/env.txt"; exit 1; }
tail -1 "$OUT/env.txt"
rc=0
for tp in ${READERS:-8 4}; do
	t0=$SECONDS
	name=tp$tp${RUN:+-$RUN}
	python3 -m rdmaq.bench.cli --queues "${QUEUES:-rdmaq-shm,vllm,vllm-spinloop}" --readers "$tp" \
		--attackers "${ATTACKERS:-0,16}" --sizes "${SIZES:-64,2K,40K}" --pace "${PACE:-1ms,10ms}" \
		--duration "${DURATION:-2.5}" --idle-window "${IDLE:-1}" --time-cap 5 --stages \
		--label "${LABEL:-h200}" --json "$OUT/$name.json" >"$OUT/$name.txt" 2>"$OUT/$name.err" || rc=1
	echo "measure: TP=$tp done in $((SECONDS - t0)) s"
	grep -E "^rdmaq bench: (skipping|cell failed)" "$OUT/$name.err" | cut -c1-300
	[ -f "$OUT/$name.json" ] && python3 bench/device/digest.py --medians "$OUT/$name.json"
done
exit $rc
