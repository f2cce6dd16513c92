#!/usr/bin/env bash
# Makes sure a Docker daemon answers, for the container tier (`warden serve
# --image`, docs/container.md; serve's TestServeImage*):
#
#   scripts/docker-daemon.sh          # exit 0 once `docker info` answers
#
# A daemon that answers is left alone. Otherwise, as root: Debian's docker.io
# (the daemon, containerd, runc; 20.10 on bookworm) is installed when dockerd
# is missing, and dockerd is started in the background, logging to
# $WARDEN_DOCKERD_LOG (default /tmp/warden-dockerd.log); it keeps running
# after this script, as a system daemon would. Exit 1, with the reason on
# stderr, when that cannot be done (not root, no apt-get, a sandbox that
# refuses the daemon): the caller skips the tier and says why.
set -euo pipefail

log=${WARDEN_DOCKERD_LOG:-/tmp/warden-dockerd.log}
fail() { echo "docker-daemon: $*" >&2; exit 1; }

if docker info >/dev/null 2>&1; then
	exit 0
fi
[ "$(id -u)" = 0 ] || fail "no Docker daemon answers and starting one needs root"

if ! command -v dockerd >/dev/null 2>&1; then
	command -v apt-get >/dev/null 2>&1 || fail "no dockerd and no apt-get to install Debian's docker.io"
	echo "docker-daemon: installing Debian's docker.io" >&2
	(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null) \
		|| fail "apt-get install docker.io failed"
fi
command -v docker >/dev/null 2>&1 || fail "dockerd is installed but no docker CLI is on PATH"

echo "docker-daemon: starting dockerd (log: $log)" >&2
nohup dockerd >"$log" 2>&1 &
for _ in $(seq 1 60); do
	if docker info >/dev/null 2>&1; then
		exit 0
	fi
	if ! kill -0 $! 2>/dev/null; then
		fail "dockerd exited at start: $(tail -n 3 "$log" | tr '\n' ' ')"
	fi
	sleep 0.5
done
fail "dockerd did not answer within 30 s: $(tail -n 3 "$log" | tr '\n' ' ')"
