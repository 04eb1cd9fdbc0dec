#!/usr/bin/env bash
# What a release to a package index would ship, checked: `python -m build` makes the
# sdist, then the wheel from that sdist (so csrc/, its headers and sources.mk must be
# in the sdist: MANIFEST.in); the wheel goes into a fresh venv with nothing from this
# checkout, and the core tests run against it from outside the checkout.
#   - the C tests of tests/core (test_c_core.py, test_c_units.py, and
#     test_endpoint_lifetime.py's AddressSanitizer build of the extension) compile csrc/
#     from the checkout, not the wheel: the core tier runs them;
#   - dependencies come from a wheelhouse under the cache, --no-index; it is
#     refreshed from the package index only when the wheel asks for something new.
# Usage: tests/dist/ci.sh   (RDMAQ_VENV: the suite's venv, which runs `build`)
# Cache: ${RDMAQ_DIST_CACHE:-~/.cache/rdmaq-dist} (the wheelhouse, ~230 MB with torch).
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
SUITE_PY=${RDMAQ_VENV:-$REPO/.venv}/bin/python
CACHE=${RDMAQ_DIST_CACHE:-$HOME/.cache/rdmaq-dist}
WHEELS=$CACHE/wheels
export PIP_DISABLE_PIP_VERSION_CHECK=1

T0=$SECONDS
say() { printf 'dist: %s (%d s)\n' "$*" $((SECONDS - T0)); }

# pip, quiet; on failure everything it said
pip_q() {
	local log rc=0
	log=$(mktemp)
	"$@" >"$log" 2>&1 || rc=$?
	((rc)) && { say "failed (exit $rc): $*"; cat "$log"; }
	rm -f "$log"
	return $rc
}

WORK=$(mktemp -d /tmp/rdmaq-dist.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WHEELS"

say "python -m build: the sdist, then the wheel from it"
"$SUITE_PY" -c 'import build' 2>/dev/null || pip_q "$SUITE_PY" -m pip install -q build || exit 1
pip_q "$SUITE_PY" -m build --outdir "$WORK/dist" "$REPO" || exit 1
SDIST=$(ls "$WORK"/dist/rdmaq-*.tar.gz)
WHEEL=$(ls "$WORK"/dist/rdmaq-*.whl)
say "built $(basename "$SDIST") ($(du -k "$SDIST" | cut -f1) KB) and $(basename "$WHEEL")"

# What the sdist must carry to build anywhere; what the wheel must not lack
sdist_files=$(tar -tzf "$SDIST") wheel_files=$(unzip -Z1 "$WHEEL")
missing=()
for f in csrc/sources.mk csrc/include/rdmaq.h csrc/ring.c csrc/format.h rdmaq/_build.py setup.py \
	pyproject.toml LICENSE README.md; do
	grep -qx "rdmaq-[^/]*/$f" <<<"$sdist_files" || missing+=("sdist:$f")
done
for f in rdmaq/py.typed rdmaq/bench/cli.py rdmaq/bench/serve/tiny_llama.py rdmaq/vllm/plugin.py; do
	grep -qx "$f" <<<"$wheel_files" || missing+=("wheel:$f")
done
grep -qx 'rdmaq/_rdmaq\.[^/]*\.so' <<<"$wheel_files" || missing+=("wheel:rdmaq/_rdmaq.*.so")
if ((${#missing[@]})); then
	say "FAILED: missing from the release files: ${missing[*]}"
	exit 1
fi

say "a fresh venv with the wheel and its [test] extra (and torch, for the tensor tests), --no-index"
VENV=$WORK/venv
python3 -m venv "$VENV" || exit 1
# --no-compile: no .pyc for torch's thousands of files, which this venv runs once
install() { "$VENV/bin/python" -m pip install -q --no-compile --no-index --find-links "$WHEELS" "$WHEEL[test]" torch==2.13.0; }
if ! install >/dev/null 2>&1; then
	say "refreshing the wheelhouse $WHEELS from the package index"
	pip_q "$VENV/bin/python" -m pip download -q -d "$WHEELS" "$WHEEL[test]" torch==2.13.0 || exit 1
	rm -f "$WHEELS"/rdmaq-*.whl  # rdmaq comes from this build, never from the wheelhouse
	pip_q install || exit 1
fi

# From outside the checkout, so that `import rdmaq` cannot find its source tree
cd "$WORK" || exit 1
"$VENV/bin/python" -c 'import rdmaq, rdmaq._rdmaq, sys; p = rdmaq.__file__
sys.exit(0 if "/site-packages/" in p else f"rdmaq imported from {p}, not the installed wheel")' || exit 1
say "tests/core, tests/cli and tests/doctor against the installed wheel"
RDMAQ_REQUIRE_ALL=${RDMAQ_REQUIRE_ALL:-1} "$VENV/bin/pytest" -q -rs -p no:cacheprovider \
	-c "$REPO/pyproject.toml" --rootdir "$REPO" --transport shm \
	--ignore "$REPO/tests/core/test_c_core.py" --ignore "$REPO/tests/core/test_c_units.py" \
	--ignore "$REPO/tests/core/test_endpoint_lifetime.py" \
	"$REPO/tests/core" "$REPO/tests/cli" "$REPO/tests/doctor"
