#!/usr/bin/env bash
# Python lint: ruff (style, import order, likely bugs) over rdmaq/, bench/, tests/ and tools/, and
# mypy (types: strict for the package, the bodies of the benchmark) over rdmaq/ and bench/.
# Both read their configuration from pyproject.toml.  Installs its tools with pip into
# $RDMAQ_VENV (default: .venv), pinned so that a finding means a change in this tree.
# Exit status: 0 clean, 1 findings, 2 the tools could not be installed.
# `tests/lint/python.sh --fix` lets ruff fix what it can first.
set -uo pipefail
cd "$(dirname "$0")/../.."
VENV=${RDMAQ_VENV:-$PWD/.venv}
export PIP_DISABLE_PIP_VERSION_CHECK=1
RUFF=ruff==0.17.6
MYPY=mypy==2.4.1
# what mypy needs to see the package's imports typed (torch, vLLM and the bench's plotting
# packages are optional: pyproject.toml lets mypy go on without them)
TYPES=(types-cffi types-psutil pyzmq numpy)

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" || exit 2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! "$VENV/bin/python" -m pip install -q "$RUFF" "$MYPY" "${TYPES[@]}" >"$log" 2>&1; then
	echo "lint: pip install failed:"; cat "$log"; exit 2
fi

rc=0
if [ "${1:-}" = --fix ]; then
	"$VENV/bin/ruff" check --fix -q rdmaq bench tests tools
fi
echo "== ruff check rdmaq bench tests tools"
"$VENV/bin/ruff" check rdmaq bench tests tools || rc=1
echo "== mypy (rdmaq, bench)"
"$VENV/bin/mypy" || rc=1
exit $rc
