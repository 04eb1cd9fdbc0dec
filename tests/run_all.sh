#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs
# (apt + pip, downloads cached under ~/.cache), then runs every tier:
#   core      C core + shm transport + Python API (incl. ASan/UBSan/TSan builds);
#             tests/core over shm (the verbs tier runs it over verbs); tests/cli
#             (the rdmaq command, the build's messages); tests/doctor (rdmaq
#             doctor without RDMA; the verbs tier runs it with); tests/meta (the
#             suite's own rules).  Which tier runs each folder: tests/meta/test_tiers.py
#   dist      `python -m build`: the sdist, the wheel from it, installed in a fresh
#             venv, tests/core and tests/cli against it (tests/dist/ci.sh)
#   verbs     tests/core's shared tests over verbs + tests/verbs, on real
#             SoftRoCE inside a QEMU VM (tests/rxe)
#   docker    the containerized SoftRoCE run (docker/): image built here,
#             run with docker inside the VM against its rxe devices
#   vllm      vLLM's own MessageQueue tests against rdmaq + a TP=2 serve
#   bench     benchmark harness smoke test (benchmarks disabled)
#   lint      ruff + mypy over the Python, clang-format over the C (tests/lint)
#   mutation  a seeded random sample of the mutants tests/mutation/sweep.py
#             generates over csrc/ and rdmaq/, each against the tests that run
#             its line; the full sweep: tests/mutation/sweep.py (docs/testing.md)
# Usage: tests/run_all.sh [TIER...]   (default: all of them, in this order)
# Every pytest run prints its skip reasons (-rs).  Disk and time: README.md.
# RDMAQ_REQUIRE_ALL=1 (the default here): a test skipped for a missing
# dependency fails (tests/conftest.py).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$HOME/.cache/pip}
export PIP_DISABLE_PIP_VERSION_CHECK=1
VENV=${RDMAQ_VENV:-$ROOT/.venv}
TIERS=("$@")
[ ${#TIERS[@]} -eq 0 ] && TIERS=(core dist verbs docker vllm bench lint mutation)
export RDMAQ_REQUIRE_ALL=${RDMAQ_REQUIRE_ALL:-1}
declare -A RESULT
FAILED=0

stage() { printf '\n==== %s ==== (%s)\n' "$*" "$(date +%T)"; }
note() { printf '  run_all: %s\n' "$*"; }

# When apt's lists were last refreshed for us (older than 12 h: refreshed again); ours, so
# under our cache and not in apt's own directories.
APT_STAMP=$HOME/.cache/rdmaq-apt-updated

apt_install() {
	local missing=()
	for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
	[ ${#missing[@]} -eq 0 ] && return 0
	stage "apt-get install ${missing[*]}"
	if [ ! -f "$APT_STAMP" ] || [ -n "$(find "$APT_STAMP" -mmin +720 2>/dev/null)" ]; then
		apt-get update -qq && mkdir -p "${APT_STAMP%/*}" && touch "$APT_STAMP"
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

setup_venv() {
	stage "python venv $VENV"
	# building rdmaq (libibverbs-dev: its verbs extension) and the C tests; each tier's
	# script installs the rest it needs (tests/rxe/setup-host.sh: rdma-core, providers, ...)
	apt_install gcc libc6-dev make libibverbs-dev
	[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" || return 1
	# torch first, pinned, so nothing ever pulls a CUDA build
	"$VENV/bin/python" -c 'import torch' 2>/dev/null ||
		note "installing torch 2.13.0+cpu (a 183 MB wheel; ~0.9 GB installed with its dependencies)"
	"$VENV/bin/pip" install -q torch==2.13.0 || return 1
	note "installing rdmaq editable (compiles csrc/) with its [test] extra (pytest, hypothesis, numpy, psutil, matplotlib; ~200 MB installed)"
	"$VENV/bin/pip" install -q -e "$ROOT[test]" || return 1
	"$VENV/bin/python" -c "import rdmaq, rdmaq._rdmaq; print('rdmaq', rdmaq.__version__, 'built')"
}

run_tier() {
	local tier=$1 t0=$SECONDS rc
	case $tier in
	core)	stage "core tests"
		"$VENV/bin/python" -m pytest -q -rs -p no:cacheprovider --transport shm tests/core tests/cli \
			tests/doctor tests/meta ;;
	verbs)	stage "verbs tests in the SoftRoCE VM"
		PATH="$VENV/bin:$PATH" RDMAQ_VENV=$VENV bash tests/rxe/ci.sh ;;
	vllm)	stage "vLLM tests"
		RDMAQ_VENV=$VENV bash tests/vllm/ci.sh ;;
	dist)	stage "release files: sdist and wheel in a fresh venv"
		RDMAQ_VENV=$VENV bash tests/dist/ci.sh ;;
	docker)	stage "containerized SoftRoCE tests"
		RDMAQ_VENV=$VENV bash docker/ci.sh ;;
	bench)	stage "benchmark harness (benchmarks disabled)"
		RDMAQ_VENV=$VENV bash tests/bench/ci.sh ;;
	lint)	stage "lint: ruff, mypy, clang-format"
		RDMAQ_VENV=$VENV bash tests/lint/python.sh && bash tests/lint/clang-format.sh ;;
	mutation) stage "mutation tier (a seeded sample of generated mutants)"
		# a fixed seed: the same sample for the same code (RDMAQ_MUTATION_SEED picks
		# another); the vLLM adapter's mutants run in the full sweep (docs/testing.md)
		# and the curated regression set still applies to the code (no build, no run)
		"$VENV/bin/python" tests/mutation/run.py --check &&
			"$VENV/bin/pip" install -q coverage &&
			"$VENV/bin/python" tests/mutation/sweep.py --no-vllm --sample "${RDMAQ_MUTANTS:-32}" \
				--min-scored 30 --seed "${RDMAQ_MUTATION_SEED:-21}" ;;
	*)	echo "unknown tier $tier"; return 2 ;;
	esac
	rc=$?
	RESULT[$tier]="rc=$rc $((SECONDS - t0))s"
	TIMES+=("\"$tier\": {\"rc\": $rc, \"seconds\": $((SECONDS - t0))}")
	return $rc
}

# results/tiers.json: each tier's exit status and time, the set-up's, the machine and its load
# average (tools/gen_tables.py writes README's suite times from a copy under docs/testing/)
write_times() {
	local IFS=,
	mkdir -p results
	printf '{"schema": "rdmaq-tier-times/1", "date": "%s", "commit": "%s", "cpus": %s, "load": [%s, %s], "setup_seconds": %s, "seconds": %s, "tiers": {%s}}\n' \
		"$(date -u '+%Y-%m-%d %H:%M UTC')" "$(git rev-parse --short HEAD 2>/dev/null)" "$(nproc)" "$LOAD0" \
		"$(cut -d' ' -f1 /proc/loadavg)" "$SETUP_S" "$((SECONDS - t_all))" "${TIMES[*]}" >results/tiers.json
}

TIMES=()
LOAD0=$(cut -d' ' -f1 /proc/loadavg)
t_all=$SECONDS
if ! setup_venv; then
	echo "setup failed"
	exit 1
fi
SETUP_S=$((SECONDS - t_all))
for tier in "${TIERS[@]}"; do
	run_tier "$tier" || FAILED=1
done
stage "summary ($((SECONDS - t_all))s)"
for tier in "${TIERS[@]}"; do printf '%-8s %s\n' "$tier" "${RESULT[$tier]:-not run}"; done
write_times
exit $FAILED
