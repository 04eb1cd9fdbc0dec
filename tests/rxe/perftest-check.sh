#!/bin/bash
# Prove that the SoftRoCE devices work before rdmaq's own tests run, and record
# perftest's latency as the baseline rdmaq's numbers are compared with.
#
#   tests/rxe/vm-run -- tests/rxe/perftest-check.sh        (from the host)
#   tests/rxe/perftest-check.sh                            (inside the VM, or on
#                                                           any host with rxe)
# Checks, each with a timeout:
#   ibv_devinfo; ibv_rc_pingpong on DEV0 (loopback) and DEV0 -> DEV1;
#   ib_write_lat on DEV0 (loopback), DEV0 -> DEV1 (GID exchange over TCP) and
#   DEV0 -> DEV1 through rdma_cm (-R).
# DEV1 runs as the second host (tests/rxe/peer-exec: only DEV1 visible); the
# cross-device checks are skipped when DEV1 does not exist or is not usable
# here (RDMAQ_VM_DEV1=none skips them too).
#
# Environment:
#   RDMAQ_VM_DEV0/RDMAQ_VM_IP0   first device and its IPv4 (rxe0, 192.0.2.1)
#   RDMAQ_VM_DEV1/RDMAQ_VM_IP1   second device (rxe1, 192.0.2.2)
#   RDMAQ_VM_GID_INDEX           RoCEv2 IPv4 GID index (default: looked up)
#   RDMAQ_PERFTEST_ITERS         iterations per latency test (default 2000)
#   RDMAQ_PERFTEST_SIZES         message sizes in bytes (default "2 64")
#   RDMAQ_RESULTS_DIR            where perftest-rxe.json and perftest-rxe.txt go
#                                (default ./results/rxe)
# Exit status: 0 if every check passed, 1 otherwise.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dev0=${RDMAQ_VM_DEV0:-rxe0}
ip0=${RDMAQ_VM_IP0:-192.0.2.1}
dev1=${RDMAQ_VM_DEV1:-rxe1}
ip1=${RDMAQ_VM_IP1:-192.0.2.2}
iters=${RDMAQ_PERFTEST_ITERS:-2000}
sizes=${RDMAQ_PERFTEST_SIZES:-2 64}
results=${RDMAQ_RESULTS_DIR:-results/rxe}
port=18515
tmo=60

failures=0
log() { printf '\n=== %s\n' "$*"; }
fail() { printf 'perftest-check: FAIL: %s\n' "$*" >&2; failures=$((failures + 1)); }

# GID index of the RoCEv2 IPv4-mapped GID for $2 on device $1.
gid_index() {
	local want d i
	want=0000:0000:0000:0000:0000:ffff:$(printf '%02x%02x:%02x%02x' ${2//./ })
	for d in /sys/class/infiniband/"$1"/ports/1/gids/*; do
		i=${d##*/}
		[ "$(cat "$d" 2>/dev/null)" = "$want" ] &&
			[ "$(cat "/sys/class/infiniband/$1/ports/1/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ] &&
			{ echo "$i"; return 0; }
	done
	return 1
}

# Wait until a TCP server listens on $port (perftest's side channel).
wait_listen() { # pid
	local i
	for ((i = 0; i < 300; i++)); do
		ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && return 0
		kill -0 "$1" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# Wait until an rdma_cm id listens (perftest -R servers open no TCP port).
wait_cm_listen() { # pid
	local i
	for ((i = 0; i < 300; i++)); do
		rdma resource show cm_id 2>/dev/null | grep -q 'state LISTEN' && return 0
		kill -0 "$1" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# run_pair NAME WAIT "server cmd" "client cmd": server in the background,
# client once it listens; both must exit 0. Output goes to $work/NAME.{srv,cli}.
run_pair() {
	local name=$1 waitfn=$2 srv=$3 cli=$4 spid rc=0 try
	log "$name"
	echo "server: $srv"
	echo "client: $cli"
	for try in 1 2 3; do
		rc=0
		timeout $tmo bash -c "$srv" >"$work/$name.srv" 2>&1 &
		spid=$!
		if ! $waitfn "$spid"; then
			fail "$name: server did not start listening"
			cat "$work/$name.srv"
			kill "$spid" 2>/dev/null
			wait "$spid" 2>/dev/null
			return 1
		fi
		timeout $tmo bash -c "$cli" >"$work/$name.cli" 2>&1 || rc=$?
		if [ $rc != 0 ]; then
			# A failed client leaves the server waiting for it.
			sleep 1
			kill "$spid" 2>/dev/null
			wait "$spid" 2>/dev/null
		else
			wait "$spid" || rc=$?
		fi
		# perftest -R connects twice and its server re-listens in between; a
		# client that is quicker than the re-listen is rejected (REJ reason 8,
		# invalid service ID) and then crashes. That is perftest's race, not a
		# device fault: try again.
		[ $rc != 0 ] && [ $try -lt 3 ] && grep -q 'RDMA_CM_EVENT_REJECTED; error: 8' "$work/$name.cli" || break
		echo "(perftest rdma_cm re-listen race: client rejected, retrying)"
	done
	cat "$work/$name.cli"
	if [ $rc != 0 ]; then
		fail "$name: exit status $rc"
		echo "--- server output"
		cat "$work/$name.srv"
		return 1
	fi
}

# perftest result line -> JSON object. Columns: bytes iterations t_min t_max
# t_typical t_avg t_stdev p99 p99.9 (microseconds).
lat_json() { # name path file
	awk -v name="$1" -v path="$2" '
		/#bytes/ { hdr = 1; next }
		hdr && $1 ~ /^[0-9]+$/ && NF >= 9 {
			printf "{\"test\": \"%s\", \"path\": \"%s\", \"bytes\": %s, \"iterations\": %s, " \
				"\"t_min_us\": %s, \"t_max_us\": %s, \"t_typical_us\": %s, \"t_avg_us\": %s, " \
				"\"t_stdev_us\": %s, \"p99_us\": %s, \"p99_9_us\": %s}\n",
				name, path, $1, $2, $3, $4, $5, $6, $7, $8, $9
			exit
		}' "$3"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
peer=("$here/peer-exec")
have_dev1=0
# DEV1 must exist and be usable here (a container may see its sysfs only).
[ -e "/sys/class/infiniband/$dev1" ] && ibv_devinfo -l 2>/dev/null | grep -qw "$dev1" && have_dev1=1

log "ibv_devinfo"
ibv_devinfo -d "$dev0" || fail "ibv_devinfo -d $dev0"
[ $have_dev1 = 1 ] && { "${peer[@]}" ibv_devinfo || fail "ibv_devinfo for $dev1 (peer view)"; }
gid0=${RDMAQ_VM_GID_INDEX:-$(gid_index "$dev0" "$ip0")} || {
	fail "$dev0 has no RoCEv2 GID for $ip0"
	exit 1
}
gid1=$gid0
[ $have_dev1 = 1 ] && { gid1=${RDMAQ_VM_GID_INDEX:-$(gid_index "$dev1" "$ip1")} || fail "$dev1 has no RoCEv2 GID for $ip1"; }
echo "GID index: $dev0 $gid0$([ $have_dev1 = 1 ] && echo ", $dev1 $gid1")"

run_pair rc_pingpong.loop wait_listen \
	"ibv_rc_pingpong -d $dev0 -g $gid0 -n 100" \
	"ibv_rc_pingpong -d $dev0 -g $gid0 -n 100 127.0.0.1"
[ $have_dev1 = 1 ] && run_pair rc_pingpong.cross wait_listen \
	"${peer[*]} ibv_rc_pingpong -g $gid1 -n 100" \
	"ibv_rc_pingpong -d $dev0 -g $gid0 -n 100 $ip1"

json=()
for s in $sizes; do
	run_pair "write_lat.loop.$s" wait_listen \
		"ib_write_lat -d $dev0 -x $gid0 -s $s -n $iters -F" \
		"ib_write_lat -d $dev0 -x $gid0 -s $s -n $iters -F 127.0.0.1" &&
		json+=("$(lat_json ib_write_lat "$dev0-$dev0" "$work/write_lat.loop.$s.cli")")
	[ $have_dev1 = 1 ] || continue
	run_pair "write_lat.cross.$s" wait_listen \
		"${peer[*]} ib_write_lat -x $gid1 -s $s -n $iters -F" \
		"ib_write_lat -d $dev0 -x $gid0 -s $s -n $iters -F $ip1" &&
		json+=("$(lat_json ib_write_lat "$dev0-$dev1" "$work/write_lat.cross.$s.cli")")
	run_pair "write_lat.cross_cm.$s" wait_cm_listen \
		"${peer[*]} ib_write_lat -R -s $s -n $iters -F" \
		"ib_write_lat -R -d $dev0 -s $s -n $iters -F $ip1" &&
		json+=("$(lat_json "ib_write_lat -R" "$dev0-$dev1" "$work/write_lat.cross_cm.$s.cli")")
done

mkdir -p "$results" || { fail "cannot create $results"; exit 1; }
if [ -n "${RDMAQ_VM_WORKDIR:-}" ]; then
	case $(cd "$results" && pwd -P)/ in
	"$RDMAQ_VM_WORKDIR"/*) ;;
	*) echo "perftest-check: note: $results is outside the VM's shared working dir; it vanishes with the VM" >&2 ;;
	esac
fi
{
	printf '{\n  "what": "perftest on SoftRoCE (rdma_rxe); emulated, not NIC figures",\n'
	printf '  "host": "%s", "kernel": "%s", "cpus": %s,\n' "$(uname -n)" "$(uname -r)" "$(nproc)"
	printf '  "perftest": "%s",\n' "$(dpkg-query -W -f '${Version}' perftest 2>/dev/null)"
	printf '  "date": "%s",\n  "results": [\n' "$(date -u +%FT%TZ)"
	for ((i = 0; i < ${#json[@]}; i++)); do
		printf '    %s%s\n' "${json[$i]}" "$([ $i -lt $((${#json[@]} - 1)) ] && echo ,)"
	done
	printf '  ]\n}\n'
} >"$results/perftest-rxe.json"
{
	printf '%-16s %-10s %6s %10s %10s %10s %10s\n' test path bytes t_min_us t_typ_us p99_us t_max_us
	for j in "${json[@]}"; do
		sed -E 's/.*"test": "([^"]*)", "path": "([^"]*)", "bytes": ([0-9]+),.*"t_min_us": ([0-9.]+), "t_max_us": ([0-9.]+), "t_typical_us": ([0-9.]+),.*"p99_us": ([0-9.]+),.*/\1|\2|\3|\4|\6|\7|\5/' <<<"$j" |
			awk -F'|' '{ printf "%-16s %-10s %6s %10s %10s %10s %10s\n", $1, $2, $3, $4, $5, $6, $7 }'
	done
} >"$results/perftest-rxe.txt"
log "summary ($results/perftest-rxe.json)"
cat "$results/perftest-rxe.txt"

if [ $failures != 0 ]; then
	echo "perftest-check: $failures check(s) failed" >&2
	exit 1
fi
echo "perftest-check: all checks passed"
