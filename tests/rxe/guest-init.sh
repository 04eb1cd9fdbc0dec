#!/bin/busybox sh
# /init of the SoftRoCE test VM's initramfs (built by setup-host.sh).
#
# Assembles the guest's root from the host's: the host root read-only over 9p,
# tmpfs on /run, tmpfs-backed overlays where the guest must write (/tmp too), the
# kernel's module tree, and the caller's working dir read-write at the same
# path. Then switch_root into the host's bash running guest-stage2.sh.
# Keep it busybox-only: nothing else exists until the switch.

/bin/busybox --install -s /bin
export PATH=/bin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

fail() {
	echo "rdmaq-vm init: $*" >/dev/console
	[ -w /ctl ] && echo "init: $*" >/ctl/boot-error
	echo o >/proc/sysrq-trigger
	sleep 60
}

# virtio_pci et al. in dependency order (see setup-host.sh).
for m in $(cat /mod/order); do
	insmod "/mod/$m" || fail "insmod $m failed"
done

p9='trans=virtio,version=9p2000.L,msize=262144'
mount -t 9p -o "$p9,cache=none" rdmaq_ctl /ctl || fail "cannot mount the control share"
# RDMAQ_VM_WORKDIR, RDMAQ_VM_KROOT, RDMAQ_VM_KVER, RDMAQ_VM_STAGE2 (sh-quoted).
. /ctl/boot.env || fail "cannot read /ctl/boot.env"

# cache=loose: the host root does not change under a test run, and metadata
# caching is what makes exec/import over 9p bearable under emulation.
mount -t 9p -o "$p9,ro,cache=loose" rdmaq_root /newroot || fail "cannot mount the host root"

r=/newroot
mount -t tmpfs -o mode=0755 tmpfs $r/run || fail "tmpfs /run"
mkdir -p $r/run/rdmaq-ctl
mount --move /ctl $r/run/rdmaq-ctl || fail "move /ctl"

# Writable (throw-away) views of host dirs: /etc for netns and tools' state,
# /usr/lib so the guest kernel's module dir can appear under /usr/lib/modules,
# /tmp for scratch files while the host's files there (a cache or a checkout
# under /tmp) stay visible.
for d in etc var root home tmp usr/lib; do
	[ -d "$r/$d" ] || continue
	o=$r/run/rdmaq-ovl/$(echo "$d" | tr / _)
	mkdir -p "$o/upper" "$o/work"
	mount -t overlay -o "lowerdir=$r/$d,upperdir=$o/upper,workdir=$o/work" overlay "$r/$d" ||
		fail "overlay on /$d"
done

mkdir -p "$r/usr/lib/modules/$RDMAQ_VM_KVER"
mount --bind "$r$RDMAQ_VM_KROOT/lib/modules/$RDMAQ_VM_KVER" "$r/usr/lib/modules/$RDMAQ_VM_KVER" ||
	fail "cannot bind the module tree $RDMAQ_VM_KROOT"

# The working dir, read-write, at the caller's path. cache=mmap (default):
# no caching, host and guest see each other's writes, mmap works (ld.so).
# cache=loose (RDMAQ_VM_WORKDIR_CACHE): cached, faster for many imports, but
# host-side changes during the run may not show; stage2 syncs before poweroff.
if [ -n "$RDMAQ_VM_WORKDIR" ]; then
	# A workdir under /run sits on the fresh tmpfs: make the mount point.
	mkdir -p "$r$RDMAQ_VM_WORKDIR" 2>/dev/null
	mount -t 9p -o "$p9,cache=${RDMAQ_VM_WORKDIR_CACHE:-mmap}" rdmaq_work "$r$RDMAQ_VM_WORKDIR" ||
		fail "cannot mount the working dir at $RDMAQ_VM_WORKDIR"
fi

mount --move /dev $r/dev || fail "move /dev"
mount --move /proc $r/proc || fail "move /proc"
mount --move /sys $r/sys || fail "move /sys"

exec switch_root $r /bin/bash "$RDMAQ_VM_STAGE2"
fail "switch_root failed"
