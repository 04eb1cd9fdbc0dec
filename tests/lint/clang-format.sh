#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Is the C code formatted as .clang-format says?  Prints the change that
# clang-format would make to each file that is not, and exits 1; exits 0
# when every file is formatted.
#
#   tests/lint/clang-format.sh [FILE...]     (default: csrc/ and tests/c/)
#   clang-format -i FILE...                  formats a file in place
#
# Installs clang-format (Debian's package, clang-format 14 on Debian 12)
# when it is missing.  Other major versions may format differently.
set -euo pipefail
cd "$(dirname "$0")/../.."

WANT_MAJOR=14

find_clang_format() {
	local c
	for c in clang-format-$WANT_MAJOR clang-format; do
		if command -v "$c" >/dev/null 2>&1; then
			echo "$c"
			return 0
		fi
	done
	return 1
}

if ! CF=$(find_clang_format); then
	echo "clang-format.sh: installing clang-format (apt)" >&2
	SUDO=
	[ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends clang-format
	CF=$(find_clang_format) || { echo "clang-format.sh: clang-format still missing" >&2; exit 2; }
fi
major=$("$CF" --version | sed -n 's/.*clang-format version \([0-9]*\).*/\1/p')
if [ "$major" != "$WANT_MAJOR" ]; then
	echo "clang-format.sh: $CF is version $major, the style is checked with $WANT_MAJOR:" \
		"differences may come from the version" >&2
fi

if [ $# -gt 0 ]; then
	files=("$@")
elif git rev-parse --git-dir >/dev/null 2>&1; then
	mapfile -t files < <(git ls-files -co --exclude-standard -- 'csrc/*.[ch]' 'tests/c/*.[ch]')
else
	mapfile -t files < <(find csrc tests/c -name '*.[ch]' | sort)
fi

bad=0
for f in "${files[@]}"; do
	if ! "$CF" --style=file "$f" | diff -u --label "$f" --label "$f (clang-format)" "$f" - ; then
		bad=$((bad + 1))
	fi
done
if [ $bad -gt 0 ]; then
	echo "clang-format.sh: $bad of ${#files[@]} files are not formatted: clang-format -i FILE..." >&2
	exit 1
fi
echo "clang-format.sh: ${#files[@]} files formatted"
