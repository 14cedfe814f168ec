#!/usr/bin/env bash
# Prints the path of Envoy's rate-limit service (envoyproxy/ratelimit, the store behind `fleet:`,
# docs/configuration.md), installing it first when it is missing or another version:
#   tools/ratelimit/service_cmd   built with `go install` from the Go module proxy at the pinned
#                                 commit below (a pseudo-version: the project tags no releases).
# The fleet's integration tests start it (tests/integration/fleet_store.py), and so may you:
# README "Scale-out" has the command. Needs Go >= the module's go line (1.25.6 at this pin).
#   scripts/ratelimit.sh [--no-install]
# Exit 1 (and a hint on stderr) when it is not installed and cannot be.
set -euo pipefail
cd "$(dirname "$0")/.."

# `go list -m github.com/envoyproxy/ratelimit@latest` on 2026-12-06: main at 3fb7025 (2026-01-22).
RATELIMIT_VERSION=v1.4.1-0.20260122083618-3fb702589d36
dir=tools/ratelimit
bin=$dir/service_cmd

installed() { [ -x "$bin" ] && [ "$(cat "$dir/.setup-stamp" 2>/dev/null)" = "$RATELIMIT_VERSION" ]; }
if ! installed && [ "${1:-}" != --no-install ]; then
  if ! command -v go >/dev/null; then
    echo "ratelimit: no Go toolchain; install Go (https://go.dev/dl) and run scripts/ratelimit.sh," >&2
    echo "  or run the service's container image (README \"Scale-out\")" >&2
  else
    echo "ratelimit: installing envoyproxy/ratelimit $RATELIMIT_VERSION (go install, at most 900 s)" >&2
    mkdir -p "$dir"
    # GOTOOLCHAIN=local: never fetch another Go by itself; GOFLAGS=-mod=mod: the module's own
    # go.sum decides, whatever the caller's GOFLAGS say (-mod=vendor would refuse it).
    if GOBIN="$PWD/$dir" GOFLAGS=-mod=mod GOTOOLCHAIN=local timeout 900 \
      go install "github.com/envoyproxy/ratelimit/src/service_cmd@$RATELIMIT_VERSION" >&2; then
      echo "$RATELIMIT_VERSION" >"$dir/.setup-stamp"
    else
      echo "ratelimit: go install failed" >&2
    fi
  fi
fi
if installed; then
  echo "$PWD/$bin"
else
  exit 1
fi
