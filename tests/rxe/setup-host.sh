#!/bin/bash
# Prepare this host to boot the SoftRoCE test VM (see docs/softroce-vm.md).
#
# - apt-installs the host tools the guest runs (the guest executes the host's
#   userland over 9p): QEMU, rdma-core, perftest, pyverbs, iproute2, kmod, ...
# - downloads (does not install) Debian's stock kernel, which ships rdma_rxe.ko,
#   and busybox-static into a cache dir, extracts an ELF vmlinux for PVH boot and
#   builds a small initramfs whose /init is tests/rxe/guest-init.sh.
#
# Idempotent: with a warm cache it only checks stamps and returns in well under
# a second. Environment:
#   RDMAQ_VM_CACHE      cache dir (default ~/.cache/rdmaq-vm)
#   RDMAQ_VM_REFRESH=1  re-resolve the kernel package and rebuild the cache
#   RDMAQ_VM_NO_APT=1   skip apt (packages must already be installed)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${RDMAQ_VM_CACHE:-$HOME/.cache/rdmaq-vm}

# Host packages. The guest runs these same binaries, so they are needed on the
# host even though the host kernel has no RDMA.
host_pkgs=(
	qemu-system-x86 qemu-utils
	rdma-core ibverbs-providers ibverbs-utils libibverbs-dev librdmacm-dev
	rdmacm-utils perftest python3-pyverbs
	iproute2 kmod cpio xz-utils procps util-linux
)
# Initramfs modules (plus their dependencies, resolved with modprobe -D).
initrd_mods=(virtio_pci virtio_console 9pnet_virtio 9p overlay)
# Bump when the cache layout or the initramfs recipe changes.
recipe_version=3

log() { printf 'setup-host: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (apt-get, depmod)"

apt_updated=0
apt_update_once() {
	if [ "$apt_updated" = 0 ]; then
		log "apt-get update"
		apt-get update -qq >&2
		apt_updated=1
	fi
}

install_host_pkgs() {
	local missing=() p
	for p in "${host_pkgs[@]}"; do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
			missing+=("$p")
	done
	[ ${#missing[@]} = 0 ] && return 0
	[ "${RDMAQ_VM_NO_APT:-0}" = 1 ] && die "missing packages: ${missing[*]}"
	apt_update_once
	log "apt-get install ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		"${missing[@]}" >&2
}

# Name of the versioned kernel package linux-image-amd64 depends on.
resolve_kernel_pkg() {
	local dep
	dep=$(apt-cache depends linux-image-amd64 2>/dev/null |
		sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n1)
	if [ -z "$dep" ]; then
		apt_update_once
		dep=$(apt-cache depends linux-image-amd64 |
			sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n1)
	fi
	[ -n "$dep" ] || die "cannot resolve the package linux-image-amd64 depends on"
	echo "$dep"
}

download_deb() { # pkg destdir -> path of the .deb
	local pkg=$1 dir=$2 deb
	deb=$(ls "$dir/${pkg}"_*.deb 2>/dev/null | head -n1 || true)
	if [ -z "$deb" ]; then
		log "apt-get download $pkg"
		(cd "$dir" && apt-get download -qq -o APT::Sandbox::User=root "$pkg" >&2) ||
			{ apt_update_once; (cd "$dir" && apt-get download -qq -o APT::Sandbox::User=root "$pkg" >&2); }
		deb=$(ls "$dir/${pkg}"_*.deb | head -n1)
	fi
	echo "$deb"
}

# bzImage -> ELF vmlinux: QEMU boots the ELF through PVH, which skips the xz
# decompressor that costs seconds under TCG emulation.
extract_vmlinux() { # bzImage out
	local img=$1 out=$2 off
	off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$img" | head -n1 | cut -d: -f1)
	[ -n "$off" ] || die "no xz payload in $img"
	# xz complains about the trailing bytes after the stream; the check below
	# decides whether the extraction worked.
	tail -c +$((off + 1)) "$img" | xz -dc --single-stream >"$out.tmp" 2>/dev/null || true
	[ "$(head -c 4 "$out.tmp" | od -An -c | tr -d ' ')" = '177ELF' ] ||
		die "extracted kernel from $img is not an ELF file"
	mv "$out.tmp" "$out"
}

build_initramfs() { # kroot kver busybox out
	local kroot=$1 kver=$2 bb=$3 out=$4 dir line ko
	dir=$(mktemp -d "$cache/initramfs.XXXXXX")
	mkdir -p "$dir"/{bin,dev,proc,sys,mnt,newroot,ctl,mod}
	cp "$bb" "$dir/bin/busybox"
	cp "$here/guest-init.sh" "$dir/init"
	chmod 755 "$dir/init" "$dir/bin/busybox"
	: >"$dir/mod/order"
	# modprobe -D prints "insmod /path/x.ko" in load order, dependencies first;
	# "builtin x" lines need nothing.
	for m in "${initrd_mods[@]}"; do
		modprobe -d "$kroot" -S "$kver" -D "$m" | while read -r line; do
			case $line in
			insmod\ *)
				ko=${line#insmod }
				ko=${ko%% *}
				grep -qxF "$(basename "$ko")" "$dir/mod/order" && continue
				cp "$ko" "$dir/mod/"
				basename "$ko" >>"$dir/mod/order"
				;;
			esac
		done
	done
	(cd "$dir" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet) >"$out.tmp"
	mv "$out.tmp" "$out"
	rm -rf "$dir"
}

main() {
	install_host_pkgs
	mkdir -p "$cache/debs"

	local stamp="$cache/ready" kpkg kver kroot deb bbdeb
	local init_sum
	init_sum=$(cksum <"$here/guest-init.sh" | cut -d' ' -f1)
	if [ "${RDMAQ_VM_REFRESH:-0}" != 1 ] && [ -f "$stamp" ] &&
		grep -qxF "recipe=$recipe_version init=$init_sum" "$stamp"; then
		log "cache ready: $cache ($(cat "$cache/kver"))"
		return 0
	fi

	kpkg=$(resolve_kernel_pkg)
	kver=${kpkg#linux-image-}
	kroot="$cache/kernel-$kver"
	if [ ! -f "$kroot/.unpacked" ]; then
		deb=$(download_deb "$kpkg" "$cache/debs")
		log "unpacking $(basename "$deb")"
		rm -rf "$kroot"
		mkdir -p "$kroot"
		dpkg-deb -x "$deb" "$kroot"
		# The .deb ships no modules.dep; the guest's modprobe needs it.
		depmod -b "$kroot" "$kver"
		touch "$kroot/.unpacked"
	fi
	# rdma_rxe: the devices; sch_netem: the network-fault tests (tc netem).
	for m in rdma_rxe sch_netem; do
		[ -f "$(find "$kroot/lib/modules/$kver" -name "$m.ko*" | head -n1)" ] ||
			die "$kpkg ships no $m module"
	done
	if [ ! -f "$cache/vmlinux-$kver" ]; then
		log "extracting vmlinux"
		extract_vmlinux "$kroot/boot/vmlinuz-$kver" "$cache/vmlinux-$kver"
	fi

	bbdeb=$(download_deb busybox-static "$cache/debs")
	rm -rf "$cache/busybox"
	dpkg-deb -x "$bbdeb" "$cache/busybox"

	log "building initramfs"
	build_initramfs "$kroot" "$kver" "$cache/busybox/bin/busybox" "$cache/initramfs-$kver.cpio"

	echo "$kver" >"$cache/kver.tmp"
	mv "$cache/kver.tmp" "$cache/kver"
	echo "recipe=$recipe_version init=$init_sum" >"$stamp"
	log "cache ready: $cache ($kver)"
}

main "$@"
