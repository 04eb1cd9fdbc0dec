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

# shellcheck disable=SC2154 # cmd=(...) comes from job.sh
ctl=/run/rdmaq-ctl
# Start from a clean environment: the kernel hands PID 1 a few odd variables.
for v in $(compgen -e); do unset "$v"; done
export HOME=/root USER=root LOGNAME=root SHELL=/bin/bash LANG=C.UTF-8
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# shellcheck source=/dev/null
source "$ctl/boot.env"

poweroff_now() {
	# Flushes the working dir if it is mounted cache=loose; the control share
	# is written synchronously anyway.
	sync
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
vlog() { [ "${RDMAQ_VM_VERBOSE_BOOT:-0}" = 1 ] && echo "vm: [$(uptime_s)] $*" >&4; return 0; }

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
# rxe (kernel 6.1) receives RoCEv2 only through its UDP socket in the initial
# netns, and an rxe device cannot change netns (rdma dev set ... netns:
# EOPNOTSUPP, no disassociate_ucontext). So both netdevs stay in the initial
# netns; the second host's view (only rxe1 visible) is a mount namespace, see
# peer-exec. rxe sends its packets out of its own netdev, but the kernel's
# address resolution (rdma_cm, TCP) would treat the other address as local:
# policy routing (set up by tests/rxe/net) makes it cross the veth pair.
rdma_setup() {
	# sch_netem: network-fault tests shape the veth pair with tc netem.
	modprobe -a rdma_rxe rdma_ucm veth sch_netem || setup_fail "modprobe rdma_rxe rdma_ucm veth sch_netem"
	ip link add veth0 type veth peer name veth1 || setup_fail "ip link add veth0/veth1"
	# Addresses and policy routing (tests/rxe/net).
	"${RDMAQ_VM_STAGE2%/*}/net" setup || setup_fail "rxe-net setup: addresses and policy routing for veth0/veth1"
	vlog "creating rxe0, rxe1"
	# ACTIVE, with the RoCEv2 IPv4 GID (::ffff:a.b.c.d) on GID index 1.
	local out
	out=$("${RDMAQ_VM_STAGE2%/*}/net" rxe-add rxe0 rxe1 2>&1) || setup_fail "rxe-net rxe-add rxe0 rxe1: $out"
}

vlog "loading rdma_rxe"
rdma_setup
[ -c /dev/infiniband/uverbs0 ] || setup_fail "/dev/infiniband/uverbs0 missing"
# Written whole, then renamed: vm-run may be polling for it.
echo "guest uptime at ready: $(uptime_s) s" >"$ctl/ready.tmp" && mv "$ctl/ready.tmp" "$ctl/ready"
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
export RDMAQ_VM=1 RDMAQ_VM_WORKDIR RDMAQ_VM_DEV0=rxe0 RDMAQ_VM_IP0=192.0.2.1 \
	RDMAQ_VM_DEV1=rxe1 RDMAQ_VM_IP1=192.0.2.2 RDMAQ_VM_GID_INDEX=1
# rxe-peer CMD: run CMD as the second host (see peer-exec); rxe-net: the
# network between the two hosts, and faults on it (see net).
mkdir -p /run/rdmaq-bin
ln -s "${RDMAQ_VM_STAGE2%/*}/peer-exec" /run/rdmaq-bin/rxe-peer
ln -s "${RDMAQ_VM_STAGE2%/*}/net" /run/rdmaq-bin/rxe-net
export PATH=$PATH:/run/rdmaq-bin
ulimit -l unlimited
ulimit -n 65536 2>/dev/null
cd "$RDMAQ_VM_CWD" || { echo "vm: cannot cd to $RDMAQ_VM_CWD" >&4; echo 126 >"$ctl/rc"; poweroff_now; }

if ! type -P "${cmd[0]}" >/dev/null && ! [[ ${cmd[0]} == */* && -x ${cmd[0]} ]]; then
	echo "vm-run: command not found in the guest: ${cmd[0]} (PATH=$PATH)" >&4
	echo 127 >"$ctl/rc"
	poweroff_now
fi
# In the foreground: a background job of a non-interactive shell would start
# with SIGINT ignored, and Python then ignores it too.
"${cmd[@]}" </dev/null >&3 2>&4 3>&- 4>&-
rc=$?
vlog "command exited $rc"
echo "$rc" >"$ctl/rc"
poweroff_now
