#!/bin/bash
# PID 1 of the SoftRoCE test VM after switch_root (see guest-init.sh, vm-run).
#
# Sets up two RDMA "hosts" joined by a veth pair, then runs the caller's command
# with its stdout/stderr on the virtio-serial ports vm-run relays, records its
# exit status in the control share, and powers the VM off.
#
#   init netns:  veth0 192.0.2.1/24, rxe0
#   netns peer:  veth1 192.0.2.2/24, rxe1   (rdma netns mode: exclusive, so each
#                                            netns sees only its own device)

ctl=/run/rdmaq-ctl
# Start from a clean environment: the kernel hands PID 1 a few odd variables.
for v in $(compgen -e); do unset "$v"; done
export HOME=/root USER=root LOGNAME=root SHELL=/bin/bash LANG=C.UTF-8
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# shellcheck source=/dev/null
source "$ctl/boot.env"

poweroff_now() {
	# 9p writes to the control share are synchronous; nothing else to flush.
	echo o >/proc/sysrq-trigger
	sleep 60
}

port_dev() { # virtio-serial port name -> /dev node
	local d
	for d in /sys/class/virtio-ports/*; do
		[ "$(cat "$d/name" 2>/dev/null)" = "$1" ] && { echo "/dev/${d##*/}"; return 0; }
	done
	return 1
}
out=$(port_dev rdmaq.stdout) && err=$(port_dev rdmaq.stderr) || {
	echo "stage2: virtio-serial ports missing" >/dev/console
	echo "stage2: virtio-serial ports missing" >"$ctl/boot-error"
	poweroff_now
}
exec 3>"$out" 4>"$err"

uptime_s() { cut -d' ' -f1 /proc/uptime; }
vlog() { [ "${RDMAQ_VM_VERBOSE:-0}" = 1 ] && echo "vm: [$(uptime_s)] $*" >&4; return 0; }

setup_fail() {
	echo "$*" >"$ctl/setup-error"
	{
		echo "vm: RDMA setup failed: $*"
		echo "--- rdma link"; rdma link 2>&1
		echo "--- ip -br addr"; ip -br addr 2>&1
		echo "--- ls /dev/infiniband"; ls -l /dev/infiniband 2>&1
		echo "--- lsmod | grep rdma/ib/rxe"; lsmod 2>&1 | grep -E 'rdma|^ib_|rxe'
		echo "--- dmesg (tail)"; dmesg 2>&1 | tail -n 20
	} >&4 2>&1
	poweroff_now
}

# --- base system ----------------------------------------------------------
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
ln -sfn /proc/self/fd /dev/fd 2>/dev/null
hostname rdmaq-vm
vlog "stage2 started"

# --- two RDMA hosts -------------------------------------------------------
rdma_setup() {
	ip link set lo up || return 1
	modprobe -a rdma_rxe rdma_ucm veth || setup_fail "modprobe rdma_rxe rdma_ucm veth"
	# Exclusive: an RDMA device belongs to one netns, like a netdev. Must be
	# set before the peer netns exists.
	rdma system set netns exclusive || setup_fail "rdma system set netns exclusive"
	ip netns add peer || setup_fail "ip netns add peer"
	ip link add veth0 type veth peer name veth1 netns peer || setup_fail "ip link add veth0/veth1"
	ip addr add 192.0.2.1/24 dev veth0 &&
		ip link set veth0 up &&
		ip -n peer link set lo up &&
		ip -n peer addr add 192.0.2.2/24 dev veth1 &&
		ip -n peer link set veth1 up || setup_fail "configuring veth0/veth1"
	rdma link add rxe0 type rxe netdev veth0 || setup_fail "rdma link add rxe0"
	ip netns exec peer rdma link add rxe1 type rxe netdev veth1 || setup_fail "rdma link add rxe1 (netns peer)"
}

# ACTIVE port and the RoCEv2 IPv4 GID (::ffff:a.b.c.d) on GID index 1.
rxe_ready() { # dev ipv4 [netns]
	local pre=() gid
	[ -n "${3:-}" ] && pre=(ip netns exec "$3")
	"${pre[@]}" sh -c "grep -q ACTIVE /sys/class/infiniband/$1/ports/1/state &&
		grep -qx '0000:0000:0000:0000:0000:ffff:$(printf '%02x%02x:%02x%02x' ${2//./ })' \
			/sys/class/infiniband/$1/ports/1/gids/1 &&
		grep -qx 'RoCE v2' /sys/class/infiniband/$1/ports/1/gid_attrs/types/1" 2>/dev/null
}

rdma_setup
vlog "rxe devices created"
for i in $(seq 100); do
	rxe_ready rxe0 192.0.2.1 && rxe_ready rxe1 192.0.2.2 peer && break
	[ "$i" = 100 ] && setup_fail "rxe0/rxe1 not ACTIVE with a RoCEv2 IPv4 GID at index 1 after 10 s"
	sleep 0.1
done
[ -c /dev/infiniband/uverbs0 ] || setup_fail "/dev/infiniband/uverbs0 missing"
echo "guest uptime at ready: $(uptime_s) s" >"$ctl/ready"
vlog "rxe0 and rxe1 ACTIVE"

# --- the command ------------------------------------------------------------
# shellcheck source=/dev/null
source "$ctl/job.sh" # exports, RDMAQ_VM_CWD, RDMAQ_VM_PYVERBS, cmd=(...)
if [ "${RDMAQ_VM_PYVERBS:-1}" = 1 ] && [ -d /usr/lib/python3/dist-packages/pyverbs ]; then
	# Only pyverbs, not all of Debian's dist-packages, which would shadow the
	# venv's packages.
	mkdir -p /run/rdmaq-pyverbs
	ln -s /usr/lib/python3/dist-packages/pyverbs /run/rdmaq-pyverbs/pyverbs
	export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/run/rdmaq-pyverbs
fi
ulimit -l unlimited
ulimit -n 65536 2>/dev/null
cd "$RDMAQ_VM_CWD" || { echo "vm: cannot cd to $RDMAQ_VM_CWD" >&4; echo 126 >"$ctl/rc"; poweroff_now; }

# In the foreground: a background job of a non-interactive shell would start
# with SIGINT ignored, and Python then ignores it too.
"${cmd[@]}" </dev/null >&3 2>&4 3>&- 4>&-
rc=$?
vlog "command exited $rc"
echo "$rc" >"$ctl/rc"
poweroff_now
