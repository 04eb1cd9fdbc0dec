#!/bin/bash
# CI entry point for the SoftRoCE tests: prepare the host, boot one VM, prove
# the rxe devices work (perftest, pyverbs), then run the verbs test command.
#
#   tests/rxe/ci.sh [CMD ARGS...]
#
# CMD defaults to `python -m pytest -x -q --transport verbs tests/core tests/verbs tests/doctor`
# (tests/core's transport-parametrized tests over verbs, and tests/verbs),
# otherwise only the device checks run. With the default CMD the same VM then
# runs vLLM's cross-host path, tests/vllm/test_verbs_remote.py, with the venv
# tests/vllm/ci.sh builds (`--venv-mq`: vLLM 0.33 on CPU torch, this checkout
# installed; cached under ~/.cache/rdmaq-vllm and shared with the vllm tier);
# RDMAQ_RXE_VLLM=0 leaves it out. rdmaq itself must already be installed on
# the host (the guest runs the host's Python and the repo's checkout).
# Prints the time of each phase. Exit status: the first failing phase's
# (vm-run's codes 125/241/242/243 for VM problems, see tests/rxe/vm-run).
#
# Environment: RDMAQ_RESULTS_DIR (perftest results, default results/rxe under
# the repo), RDMAQ_CI_TIMEOUT (whole VM run, default 2400 s), RDMAQ_VM_* and
# PYTEST_ADDOPTS as for vm-run.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd -P)

now() { echo "${EPOCHREALTIME/./}"; }
secs() { local d=$(($(now) - $1)); printf '%d.%01d' $((d / 1000000)) $((d % 1000000 / 100000)); }
phase() { printf '\n##### rxe-ci: %s\n' "$*"; }

# --- inside the VM ------------------------------------------------------------
if [ "${1:-}" = --in-vm ]; then
	shift
	cd "$repo" || exit 1
	t=$(now)
	phase "perftest-check"
	"$here/perftest-check.sh"
	rc=$?
	echo "rxe-ci: perftest-check: ${rc} in $(secs "$t") s" >&2
	[ $rc = 0 ] || exit $rc
	t=$(now)
	phase "pyverbs smoke"
	python "$here/test_pyverbs_smoke.py"
	rc=$?
	echo "rxe-ci: pyverbs smoke: ${rc} in $(secs "$t") s" >&2
	[ $rc = 0 ] || exit $rc
	[ $# -gt 0 ] || exit 0
	t=$(now)
	phase "tests: $*"
	"$@"
	rc=$?
	echo "rxe-ci: tests: ${rc} in $(secs "$t") s" >&2
	if [ -n "${RDMAQ_RXE_VLLM_PYTHON:-}" ]; then
		t=$(now)
		phase "vLLM remote readers over RDMA (tests/vllm/test_verbs_remote.py)"
		# From tests/vllm: the venv's installed rdmaq, not the source tree.
		(cd tests/vllm && "$RDMAQ_RXE_VLLM_PYTHON" -m pytest -q -rs -p no:cacheprovider test_verbs_remote.py)
		vrc=$?
		echo "rxe-ci: vLLM remote readers: ${vrc} in $(secs "$t") s" >&2
		[ $rc = 0 ] && rc=$vrc
	fi
	exit $rc
fi

# --- on the host --------------------------------------------------------------
cd "$repo" || exit 1
unset RDMAQ_RXE_VLLM_PYTHON
if [ $# = 0 ] && [ -d tests/verbs ]; then
	set -- python -m pytest -x -q -rs --transport verbs tests/core tests/verbs tests/doctor
	if [ "${RDMAQ_RXE_VLLM:-1}" = 1 ]; then
		t=$(now)
		phase "venv for vLLM's cross-host test (tests/vllm/ci.sh --venv-mq)"
		RDMAQ_RXE_VLLM_PYTHON=$(bash "$repo/tests/vllm/ci.sh" --venv-mq) ||
			{ echo "rxe-ci: no vLLM venv: tests/vllm/ci.sh --venv-mq failed" >&2; exit 1; }
		export RDMAQ_RXE_VLLM_PYTHON
		echo "rxe-ci: vLLM venv: $(secs "$t") s" >&2
	fi
fi
export RDMAQ_RESULTS_DIR=${RDMAQ_RESULTS_DIR:-$repo/results/rxe}

t_all=$(now)
t=$(now)
phase "setup-host"
"$here/setup-host.sh" || { echo "rxe-ci: setup-host failed" >&2; exit 1; }
echo "rxe-ci: setup-host: $(secs "$t") s" >&2

t=$(now)
phase "VM: boot, device checks${1:+, tests}"
# -v: vm-run reports boot-to-ready and the whole run's time.
"$here/vm-run" -v --timeout "${RDMAQ_CI_TIMEOUT:-2400}" -- "$here/ci.sh" --in-vm "$@"
rc=$?
echo "rxe-ci: VM run: exit $rc in $(secs "$t") s; total $(secs "$t_all") s" >&2
exit $rc
