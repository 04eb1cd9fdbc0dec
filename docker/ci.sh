#!/bin/bash
# CI for the containerized SoftRoCE tests (docker/).
#
#   docker/ci.sh [--no-docker] [CMD ARGS...]
#
# Default: structural check of Dockerfile/compose.yml; build the image on this
# host with a private dockerd (no bridge, no iptables, data root in a temp dir
# removed afterwards) from a Debian bookworm base made with debootstrap
# (registries are unreachable); `docker save` it to the cache; then, inside
# the SoftRoCE VM (tests/rxe/vm-run), start dockerd on tmpfs, `docker load`
# and `docker run` the image against the guest's real rxe devices.
# Image and base tarballs are cached (RDMAQ_DOCKER_CACHE, default
# ~/.cache/rdmaq-docker); an unchanged build context reuses the saved image.
#
# --no-docker: structural check, then docker/entrypoint.sh runs directly in
# the VM (host Python and rdmaq), without building or running an image.
#
# CMD is passed to the entrypoint (default: pytest --transport verbs tests/core tests/verbs tests/doctor). Prints the
# time of each phase. Exit status: the tests' (entrypoint codes: 3 no device,
# 4 perftest failed; in-vm.sh: 90 dockerd/load failed; vm-run: 125/241-243),
# or 1 if the check or the image build failed.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd -P)
cache=${RDMAQ_DOCKER_CACHE:-$HOME/.cache/rdmaq-docker}
image=rdmaq-rxe-test
base_tag=debian:bookworm
vm_mem=${RDMAQ_DOCKER_VM_MEM:-4G}
mode=docker
[ "${1:-}" = --no-docker ] && { mode=plain; shift; }

now() { echo "${EPOCHREALTIME/./}"; }
secs() { local d=$(($(now) - $1)); printf '%d.%01d' $((d / 1000000)) $((d % 1000000 / 100000)); }
phase() { printf '\n##### docker-ci: %s\n' "$*" >&2; }
say() { printf 'docker-ci: %s\n' "$*" >&2; }
t_all=$(now)

# --- host dockerd, private and without network side effects ------------------
dtmp=
dpid=
cpid=
stop_dockerd() {
	[ -n "$dpid" ] || return 0
	cpid=$(pgrep -P "$dpid" -x containerd || true)
	kill "$dpid" 2>/dev/null
	for _ in $(seq 60); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.5; done
	kill -9 "$dpid" 2>/dev/null
	wait "$dpid" 2>/dev/null
	# dockerd stops the containerd it started; make sure.
	[ -n "$cpid" ] && kill "$cpid" 2>/dev/null
	dpid=
	if [ -n "$dtmp" ]; then
		# Layer mounts are gone after a clean shutdown; catch leftovers.
		findmnt -rn -o TARGET | grep "^$dtmp/" | sort -r | while read -r m; do umount -l "$m"; done
		rm -rf "$dtmp"
	fi
	dtmp=
}
ctx=
trap 'stop_dockerd; [ -n "$ctx" ] && rm -f "$ctx"' EXIT
trap 'exit 130' INT TERM

start_dockerd() {
	dtmp=$(mktemp -d /var/tmp/rdmaq-dockerd.XXXXXX) || return 1
	export DOCKER_HOST=unix://$dtmp/docker.sock
	dockerd --data-root "$dtmp/data" --exec-root "$dtmp/exec" --pidfile "$dtmp/dockerd.pid" \
		-H "$DOCKER_HOST" --bridge=none --iptables=false --ip6tables=false \
		>"$dtmp/dockerd.log" 2>&1 &
	dpid=$!
	local i
	for ((i = 0; i < 120; i++)); do
		/usr/bin/docker version >/dev/null 2>&1 && return 0
		kill -0 "$dpid" 2>/dev/null || break
		sleep 0.5
	done
	say "dockerd did not start:"
	tail -n 20 "$dtmp/dockerd.log" >&2
	return 1
}
docker() { DOCKER_BUILDKIT=0 /usr/bin/docker "$@"; } # Debian's client, same version as dockerd; classic builder

apt_mirror() {
	local m
	m=$(sed -n 's/^URIs: *\([^ ]*debian\)\/\{0,1\}$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
	[ -n "$m" ] || m=$(sed -n 's/^deb \(http[^ ]*\) bookworm .*/\1/p' /etc/apt/sources.list 2>/dev/null | head -n1)
	echo "${m:-http://deb.debian.org/debian}"
}

# Debian bookworm minbase made with debootstrap, with the host's apt sources
# (same mirror, suites and snapshot as the host), cached as a tarball.
base_tarball() {
	local tar=$cache/debian-bookworm-minbase-slim.tar root
	if [ ! -s "$tar" ]; then
		root=$cache/rootfs.tmp
		rm -rf "$root"
		say "debootstrap bookworm from $(apt_mirror)"
		debootstrap --variant=minbase bookworm "$root" "$(apt_mirror)" >"$cache/debootstrap.log" 2>&1 ||
			{ tail -n 20 "$cache/debootstrap.log" >&2; return 1; }
		if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then
			cp /etc/apt/sources.list.d/*.sources "$root/etc/apt/sources.list.d/"
			: >"$root/etc/apt/sources.list"
		fi
		# Slim, like Debian's -slim images: no docs, man pages or translations,
		# now or from later apt installs. Fewer bytes and files make
		# `docker load` in the emulated VM faster.
		cat >"$root/etc/dpkg/dpkg.cfg.d/rdmaq-slim" <<-'EOF'
			path-exclude /usr/share/doc/*
			path-include /usr/share/doc/*/copyright
			path-exclude /usr/share/man/*
			path-exclude /usr/share/info/*
			path-exclude /usr/share/locale/*
		EOF
		find "$root/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
		rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
		rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/*
		tar -C "$root" --numeric-owner -cf "$tar.tmp" . && mv "$tar.tmp" "$tar" || return 1
		rm -rf "$root"
	fi
	echo "$tar"
}

# The repo's files as git sees them (tracked + untracked, not ignored), plus
# docker/ca-bundle.crt: the CA bundle pip on this host trusts (PIP_CERT,
# RDMAQ_DOCKER_CA_BUNDLE), for networks that intercept TLS.
context_tar() { # out
	local ca=${RDMAQ_DOCKER_CA_BUNDLE:-${PIP_CERT:-}}
	(cd "$repo" && git ls-files -co --exclude-standard -z |
		while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
		tar --null -T - --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$1") || return 1
	if [ -n "$ca" ] && [ -f "$ca" ]; then
		tar --transform "s|.*|docker/ca-bundle.crt|" --mtime=@0 --owner=0 --group=0 \
			-rhf "$1" -C / "${ca#/}" 2>/dev/null || return 1
	fi
}

# Services enabled at boot: the unit links under /etc/systemd/system/*.wants/.
units_dir=/etc/systemd/system
enabled_units() {
	find "$units_dir" -path '*.wants/*' -type l 2>/dev/null | sort
}

# Installing docker.io/containerd enables docker.service, docker.socket and
# containerd.service at boot; this CI runs a private dockerd instead. Remove
# the links the install added, so the host's services stay as they were.
restore_units() { # units_before
	local link
	comm -13 <(printf '%s\n' "$1") <(enabled_units) | while read -r link; do
		[ -n "$link" ] || continue
		say "disabling what the install enabled: ${link#"$units_dir"/}"
		rm -f "$link"
	done
	if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
		systemctl daemon-reload || true
	fi
}

# What a dockerd could leave on the host: links (docker0, veths), firewall
# rules, daemons, mounts, services enabled at boot. Compared before and after;
# a difference fails CI.
host_state() {
	ip -o link show | awk -F': ' '{print "link " $2}' | sort
	if command -v iptables-save >/dev/null; then
		iptables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//'
	fi
	pgrep -x dockerd | sed 's/^/dockerd /'
	pgrep -x containerd | sed 's/^/containerd /'
	findmnt -rn -o TARGET | grep -E '/docker|rdmaq-dockerd' | sed 's/^/mount /'
	enabled_units | sed 's/^/enabled-at-boot /'
}

# --- 0. checks and host packages ---------------------------------------------
phase "structural check"
python3 "$here/check-dockerfile.py" "$repo" || exit 1
bash -n "$here/entrypoint.sh" "$here/in-vm.sh" || exit 1

t=$(now)
phase "host setup"
if [ "$mode" = docker ]; then
	missing=()
	for p in docker.io docker-compose debootstrap; do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		# policy-rc.d: the package must not start the system dockerd, which
		# would add docker0 and iptables rules; we run a private one.
		policy=
		[ -e /usr/sbin/policy-rc.d ] || { policy=/usr/sbin/policy-rc.d; printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; }
		units_before=$(enabled_units)
		say "apt-get install ${missing[*]} (docker.io, containerd, runc: ~65 MB download, ~260 MB installed)"
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends "${missing[@]}" >&2
		rc=$?
		[ -n "$policy" ] && rm -f "$policy"
		restore_units "$units_before"
		[ $rc = 0 ] || exit 1
	fi
fi
"$repo/tests/rxe/setup-host.sh" || exit 1
say "host setup: $(secs "$t") s"
state_before=$(host_state)

# --- 1. image ----------------------------------------------------------------
if [ "$mode" = docker ]; then
	mkdir -p "$cache"
	t=$(now)
	phase "base image"
	base=$(base_tarball) || { say "cannot make the base image"; exit 1; }
	say "base tarball: $base ($(secs "$t") s)"

	ctx=$(mktemp "$cache/context.XXXXXX.tar")
	context_tar "$ctx" || exit 1
	key=$( (sha256sum <"$ctx"; stat -c '%s %Y' "$base") | sha256sum | cut -c1-16)
	img_tar=$cache/$image-$key.tar
	if [ -s "$img_tar" ]; then
		say "image unchanged, reusing $img_tar"
		rm -f "$ctx"
	else
		t=$(now)
		phase "docker build (host)"
		start_dockerd || exit 1
		docker import "$base" "$base_tag" >/dev/null || exit 1
		say "base imported as $base_tag ($(secs "$t") s)"
		docker build --network host --build-arg "BASE_IMAGE=$base_tag" \
			-f docker/Dockerfile -t "$image" - <"$ctx" >&2 || { say "docker build failed"; exit 1; }
		rm -f "$ctx"
		say "docker build: $(secs "$t") s"
		docker images "$image" --format '{{.Repository}} {{.Size}}' >&2
		t=$(now)
		docker save -o "$img_tar.tmp" "$image" && mv "$img_tar.tmp" "$img_tar" || exit 1
		find "$cache" -maxdepth 1 -name "$image-*.tar" ! -name "${img_tar##*/}" -delete
		say "docker save: $(secs "$t") s, $(du -h "$img_tar" | cut -f1)"
		stop_dockerd
	fi
fi

# --- 2. run in the SoftRoCE VM -----------------------------------------------
t=$(now)
cd "$repo" || exit 1
if [ "$mode" = docker ]; then
	phase "VM: dockerd, docker load, docker run"
	"$repo/tests/rxe/vm-run" -v --mem "$vm_mem" --timeout "${RDMAQ_CI_TIMEOUT:-2400}" \
		-e "RDMAQ_DOCKER_IMAGE_TAR=$img_tar" -- "$here/in-vm.sh" "$@"
else
	phase "VM: entrypoint.sh without Docker"
	"$repo/tests/rxe/vm-run" -v --timeout "${RDMAQ_CI_TIMEOUT:-2400}" -- "$here/entrypoint.sh" "$@"
fi
rc=$?
say "VM run: exit $rc in $(secs "$t") s; total $(secs "$t_all") s"
stop_dockerd
# Only what is new counts: what vanished meanwhile was someone else's.
left=$(comm -13 <(echo "$state_before" | sort) <(host_state | sort))
if [ -n "$left" ]; then
	say "FAIL: left on the host (links, iptables rules, daemons, mounts or services enabled at boot):"
	echo "$left" >&2
	[ $rc = 0 ] && rc=1
else
	say "host unchanged: no new links, iptables rules, docker daemons, mounts or services enabled at boot"
fi
exit $rc
