#!/bin/bash
# Entrypoint of the rdmaq SoftRoCE test image (docker/Dockerfile).
#
#   1. find an RDMA device (RDMAQ_DEVICE, else the first one libibverbs lists);
#      if there is none, the container is privileged and the host's rdma_rxe
#      module is reachable (-v /lib/modules:/lib/modules:ro), create one:
#      rdma link add rxe0 type rxe netdev <RDMAQ_RXE_NETDEV or default route's>
#   2. sanity check with perftest (tests/rxe/perftest-check.sh: ibv_devinfo,
#      ibv_rc_pingpong, ib_write_lat on the device), unless RDMAQ_SKIP_PERFTEST=1
#   3. run the command given as arguments, else `python -m pytest -q --transport verbs tests/core tests/verbs tests/doctor`
#      against the installed rdmaq; exit with its status.
#
# Exit status: the test command's, or 3 (no usable RDMA device), 4 (perftest
# sanity check failed), 2 (bad environment).
set -uo pipefail

log() { printf 'rdmaq-entrypoint: %s\n' "$*" >&2; }
die() { # status message...
	local rc=$1
	shift
	log "error: $*"
	exit "$rc"
}

list_devices() { ibv_devinfo -l 2>/dev/null | sed -n 's/^[[:space:]]\+\([^[:space:]]\+\)$/\1/p'; }

has_cap() { # capability bit number: effective set of this process
	local eff
	eff=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status)
	(((16#$eff >> $1) & 1))
}

# IPv4 address of a netdev, and the RoCEv2 GID index that maps it.
netdev_ipv4() { ip -4 -o addr show dev "$1" 2>/dev/null | awk '{ sub("/.*", "", $4); print $4; exit }'; }
roce_v2_ipv4_gid() { # dev -> "index ipv4" of the first RoCEv2 IPv4-mapped GID
	local p=/sys/class/infiniband/$1/ports/1 g i gid
	for g in "$p"/gids/*; do
		i=${g##*/}
		gid=$(cat "$g" 2>/dev/null) || continue
		[[ $gid == 0000:0000:0000:0000:0000:ffff:* ]] || continue
		[ "$(cat "$p/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ] || continue
		gid=${gid#0000:0000:0000:0000:0000:ffff:}
		printf '%s %d.%d.%d.%d\n' "$i" $((16#${gid:0:2})) $((16#${gid:2:2})) $((16#${gid:5:2})) $((16#${gid:7:2}))
		return 0
	done
	return 1
}

create_rxe() {
	local ndev=${RDMAQ_RXE_NETDEV:-}
	# CAP_SYS_ADMIN (21) and CAP_NET_ADMIN (12) are what --privileged adds here.
	has_cap 21 && has_cap 12 || return 1
	modprobe rdma_rxe 2>/dev/null || {
		log "cannot load rdma_rxe (mount the host's /lib/modules, or load it on the host)"
		return 1
	}
	[ -n "$ndev" ] || ndev=$(ip route show default 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit } }')
	[ -n "$ndev" ] || die 2 "no default route to pick a netdev: set RDMAQ_RXE_NETDEV"
	log "creating rxe0 on $ndev"
	rdma link add rxe0 type rxe netdev "$ndev" || return 1
	local i
	for ((i = 0; i < 100; i++)); do
		make_uverbs_nodes
		[ -n "$(list_devices)" ] && return 0
		sleep 0.1
	done
	return 1
}

# A privileged container's /dev was filled when it started: a device created
# since has no node here, and libibverbs skips a device without its node.
make_uverbs_nodes() {
	local d n
	mkdir -p /dev/infiniband
	for d in /sys/class/infiniband_verbs/uverbs*; do
		n=/dev/infiniband/${d##*/}
		[ -e "$n" ] || [ ! -r "$d/dev" ] || mknod -m 666 "$n" c $(tr : ' ' <"$d/dev") ||
			log "cannot create $n"
	done
}

# --- 1. device ----------------------------------------------------------------
devs=$(list_devices)
if [ -z "$devs" ]; then
	log "no RDMA device visible"
	create_rxe && devs=$(list_devices)
fi
if [ -z "$devs" ]; then
	log "hints: on the host, modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <if>;"
	log "       run with --device /dev/infiniband (see docker/README.md)"
	log "       /dev/infiniband here: $(ls /dev/infiniband 2>&1 | tr '\n' ' ')"
	die 3 "no usable RDMA device"
fi
dev=${RDMAQ_DEVICE:-$(head -n1 <<<"$devs")}
grep -qxF "$dev" <<<"$devs" || die 3 "RDMAQ_DEVICE=$dev is not among the visible devices: $(tr '\n' ' ' <<<"$devs")"

if read -r gid ip4 < <(roce_v2_ipv4_gid "$dev"); then
	log "device $dev, RoCEv2 IPv4 GID index $gid ($ip4)"
else
	log "warning: $dev has no RoCEv2 IPv4 GID (is its netdev up with an IPv4 address?)"
	gid=
	ip4=
fi
memlock=$(ulimit -l)
if [ "$memlock" != unlimited ] && ! has_cap 14; then
	log "warning: RLIMIT_MEMLOCK is ${memlock} KiB and CAP_IPC_LOCK is missing:"
	log "         memory registration will fail; run with --ulimit memlock=-1:-1"
fi
export RDMAQ_DEVICE=$dev RDMAQ_VM_DEV0=$dev
[ -n "$gid" ] && export RDMAQ_VM_GID_INDEX=$gid RDMAQ_VM_IP0=$ip4

# --- 2. perftest sanity check -------------------------------------------------
if [ "${RDMAQ_SKIP_PERFTEST:-0}" != 1 ]; then
	# One device only: the cross-device checks need the VM's second host.
	RDMAQ_VM_DEV1=none RDMAQ_RESULTS_DIR=${RDMAQ_RESULTS_DIR:-/tmp/rdmaq-results} \
		tests/rxe/perftest-check.sh || die 4 "perftest sanity check failed"
fi

# --- 3. tests -----------------------------------------------------------------
[ $# -gt 0 ] || set -- python -m pytest -q -rs -p no:cacheprovider --transport verbs tests/core tests/verbs tests/doctor
log "running: $*"
"$@"
rc=$?
log "exit status $rc"
exit $rc
