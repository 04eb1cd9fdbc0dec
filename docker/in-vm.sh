#!/bin/bash
# Inside the SoftRoCE VM (tests/rxe/vm-run): start a throw-away dockerd on
# tmpfs, load the test image saved by docker/ci.sh, and run it against the
# guest's real rxe devices: 1. the suite through docker/compose.yml (the
# README's one command); 2. the README's plain `docker run` flags with a
# short command (without docker-compose, the suite runs this way); 3. with
# the rxe devices deleted, a privileged container that creates its own.
#
#   tests/rxe/vm-run --mem 4G -e RDMAQ_DOCKER_IMAGE_TAR=/path/img.tar -- docker/in-vm.sh [CMD...]
#
# Exit status: the container's (the entrypoint's: the test suite's), or 90 if
# dockerd or `docker load` failed.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tar=${RDMAQ_DOCKER_IMAGE_TAR:?set RDMAQ_DOCKER_IMAGE_TAR to the image saved by docker/ci.sh}
image=${RDMAQ_DOCKER_IMAGE:-rdmaq-rxe-test}
results=${RDMAQ_DOCKER_RESULTS:-$PWD/results/docker}

now() { echo "${EPOCHREALTIME/./}"; }
secs() { local d=$(($(now) - $1)); printf '%d.%01d' $((d / 1000000)) $((d % 1000000 / 100000)); }
say() { printf 'docker-in-vm: %s\n' "$*" >&2; }

# The guest has no cgroup mount of its own; runc needs one (v2 here).
mountpoint -q /sys/fs/cgroup || mount -t cgroup2 cgroup2 /sys/fs/cgroup || { say "cannot mount cgroup2"; exit 90; }

# Its own tmpfs: overlay2 cannot stack on the guest's /tmp (itself an overlay),
# and everything vanishes with the VM.
d=/tmp/dockerd
mkdir -p "$d" && mount -t tmpfs -o mode=0711 tmpfs "$d" || { say "cannot mount a tmpfs on $d"; exit 90; }
export DOCKER_HOST=unix://$d/docker.sock
docker=/usr/bin/docker # Debian's client, same version as its dockerd

t=$(now)
# No bridge, no iptables: the test container uses the host network.
dockerd --data-root "$d/data" --exec-root "$d/exec" --pidfile "$d/dockerd.pid" \
	-H "$DOCKER_HOST" --bridge=none --iptables=false --ip6tables=false \
	--storage-driver=overlay2 >"$d/dockerd.log" 2>&1 &
dpid=$!
until "$docker" version >/dev/null 2>&1; do
	if ! kill -0 "$dpid" 2>/dev/null || [ "$(secs "$t" | cut -d. -f1)" -ge 120 ]; then
		say "dockerd did not start"
		tail -n 30 "$d/dockerd.log" >&2
		exit 90
	fi
	sleep 0.5
done
say "dockerd up in $(secs "$t") s"

t=$(now)
"$docker" load -q -i "$tar" >&2 || { say "docker load failed"; tail -n 30 "$d/dockerd.log" >&2; exit 90; }
say "docker load in $(secs "$t") s"

mkdir -p "$results"
# The README's plain `docker run` flags.
docker_run() {
	"$docker" run --rm --network host \
		--device /dev/infiniband:/dev/infiniband \
		--cap-add IPC_LOCK --ulimit memlock=-1:-1 --shm-size 1g \
		-v "$results:/results" -e RDMAQ_RESULTS_DIR=/results \
		-e RDMAQ_DEVICE="${RDMAQ_DEVICE:-}" -e PYTEST_ADDOPTS="${PYTEST_ADDOPTS:-}" "$@"
}

# 1. and 2.
t=$(now)
if command -v docker-compose >/dev/null; then
	# The README's one command, with the Compose v1 Debian ships (its `run`
	# has no --build; the image is loaded already).
	docker-compose -f "$here/compose.yml" run --rm -T rdmaq-rxe-test "$@"
	rc=$?
	say "docker-compose run: exit $rc in $(secs "$t") s"
	t=$(now)
	docker_run -e RDMAQ_SKIP_PERFTEST=1 "$image" \
		python -m pytest -q -rs -p no:cacheprovider --transport verbs tests/core/test_objects.py
	rc_run=$?
	say "docker run (README flags, short check): exit $rc_run in $(secs "$t") s"
	[ $rc = 0 ] && rc=$rc_run
else
	say "no docker-compose here: the suite runs through docker run"
	docker_run "$image" "$@"
	rc=$?
	say "docker run: exit $rc in $(secs "$t") s"
fi

# 3. The entrypoint's own set-up: no rxe device yet, a privileged container
#    with the host's modules creates one (RDMAQ_DOCKER_CREATE_CHECK=0 skips).
if [ "${RDMAQ_DOCKER_CREATE_CHECK:-1}" = 1 ]; then
	t=$(now)
	for dev in rxe0 rxe1; do rdma link delete "$dev" || say "cannot delete $dev"; done
	"$docker" run --rm --privileged --network host -v /lib/modules:/lib/modules:ro \
		--shm-size 1g -e RDMAQ_RXE_NETDEV=veth0 -e RDMAQ_SKIP_PERFTEST=1 "$image" \
		python -m pytest -q -rs -p no:cacheprovider --transport verbs tests/core/test_objects.py
	rc_create=$?
	say "privileged docker run creating rxe0: exit $rc_create in $(secs "$t") s"
	rdma link
	[ $rc = 0 ] && rc=$rc_create
fi

kill "$dpid" 2>/dev/null
wait "$dpid" 2>/dev/null
exit $rc
