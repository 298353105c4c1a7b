#!/usr/bin/env bash
# Make sure a Docker daemon answers, and that `docker run --privileged` works
# (kind starts its node containers privileged).
#   - no docker at all: install Debian's docker.io (apt) and start dockerd here;
#   - where the machine's capability bounding set lacks a capability that
#     --privileged asks for (measured: CAP_SYS_RESOURCE), dockerd gets the
#     runc-capdrop wrapper as its default runtime. Never where --privileged works.
# Usage: dockerd.sh BIN_DIR (go-bins.sh output, for runc-capdrop). Exit 3 when no
# daemon can start (callers treat that as "e2e not possible here").
set -euo pipefail
BIN="$1"
STATE="${TETHER_CACHE:-$HOME/.cache/tether}/e2e/dockerd"
mkdir -p "$STATE"
log() { echo "[dockerd] $*" >&2; }

if ! command -v dockerd >/dev/null && ! docker info >/dev/null 2>&1; then
  log "installing docker.io (apt)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >&2; } ||
    { log "cannot install docker.io"; exit 3; }
fi

bounding_set_complete() {  # every capability up to CAP_LAST_CAP in our bounding set?
  local last bnd
  last="$(cat /proc/sys/kernel/cap_last_cap)"
  bnd="$(awk '/^CapBnd:/{print $2}' /proc/self/status)"
  (( (0x$bnd & ((1 << (last + 1)) - 1)) == ((1 << (last + 1)) - 1) ))
}

start_dockerd() {
  local args=(--data-root "$STATE/data" --exec-root "$STATE/exec" -p "$STATE/dockerd.pid")
  if ! bounding_set_complete; then
    log "capability bounding set incomplete ($(awk '/^CapBnd:/{print $2}' /proc/self/status)): default runtime runc-capdrop"
    args+=(--add-runtime "capdrop=$BIN/runc-capdrop" --default-runtime capdrop)
  fi
  log "starting dockerd (log: $STATE/dockerd.log)"
  # The daemon outlives this script: it must not inherit its descriptors beyond 0-2. A
  # caller's `flock LOCK cmd` (tests/e2e/README.md) passes its lock's descriptor down, and a
  # daemon holding it keeps the shared cluster's lock taken after the sequence ended (seen).
  (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      (( fd > 2 )) && eval "exec $fd>&-" 2>/dev/null
    done
    exec setsid dockerd "${args[@]}" >"$STATE/dockerd.log" 2>&1 < /dev/null
  ) &
  local deadline=$((SECONDS + 60))
  until docker info >/dev/null 2>&1; do
    (( SECONDS < deadline )) || { log "dockerd did not answer in 60s:"; tail -20 "$STATE/dockerd.log" >&2; exit 3; }
    sleep 0.5
  done
}

docker info >/dev/null 2>&1 || start_dockerd
log "docker $(docker version --format '{{.Server.Version}}'), runtime $(docker info --format '{{.DefaultRuntime}}')"
