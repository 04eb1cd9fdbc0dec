#!/bin/sh
# SPDX-License-Identifier: MIT
# Run a C test built by tests/c/Makefile with its variant's runtime options:
#
#   tests/c/run.sh VARIANT BINARY [ARGS...]     VARIANT: asan, tsan or rel
#
# The test replaces this script (exec), so a caller's time limit kills the
# test itself.  Exit status: the test's (0 pass, 1 fail, 77 skip).
set -e
if [ $# -lt 2 ]; then
	echo "usage: $0 asan|tsan|rel BINARY [ARGS...]" >&2
	exit 2
fi
variant=$1
exe=$2
shift 2
case $variant in
asan)
	export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
	export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
	;;
tsan)
	export TSAN_OPTIONS=halt_on_error=1
	# TSan needs a fixed address-space layout on some kernels.
	if command -v setarch >/dev/null 2>&1; then
		exec setarch -R "$exe" "$@"
	fi
	;;
rel) ;;
*)
	echo "$0: unknown variant '$variant' (asan, tsan or rel)" >&2
	exit 2
	;;
esac
exec "$exe" "$@"
