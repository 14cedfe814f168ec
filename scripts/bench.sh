#!/usr/bin/env bash
# Benchmark: Envoy plain route vs Envoy + llm-failover (success and failover paths), 1 KB and
# 50 KB bodies, 32 and 1 connections, against a local nginx; results as a markdown table with
# ratios to the plain route (see BENCHMARKS.md).
#
#   scripts/bench.sh                  full run (3 rounds x (1 s warm-up + 5 s) per cell, experiments; ~7 min)
#   (every run ends with the streaming first-byte row: a healthy SSE answer through the plain
#   route and through the filter, which holds it until its first event)
#   scripts/bench.sh --smoke          CI smoke: 1 KB and 32 connections only, 1 s per cell, no
#                                     experiments, the translated rows' JSON shapes (streams only
#                                     the Chat<->Messages pair's); checks that the harness works
#                                     and prints the table (~35 s)
#   scripts/bench.sh --with-litellm   also the LiteLLM proxy peer (installed from PyPI into
#                                     .work/bench/litellm-venv; skipped with a note on failure)
#   scripts/bench.sh --profile        wasm callbacks and hostcalls per request, success and
#                                     failover paths, from Envoy's wasm trace log (~10 s)
#   scripts/bench.sh --envoy-instructions [--only plain,native,success] [--annotate]
#                                     instructions per request of the whole Envoy process under
#                                     valgrind's callgrind, same requests for each configuration
#                                     (bench/native_profile.py; ~1 min per configuration)
#   scripts/bench.sh --calibrate      Envoy CPU per kind of hostcall, and the success path's
#                                     calls replayed with no logic (bench/calib; ~5 min)
#   scripts/bench.sh --module-only [--module A.wasm] [--compare B.wasm] [--instructions]
#                                     the module alone in Node's V8 with a scripted host, no
#                                     Envoy/nginx/wrk (bench/module_bench.mjs; its other flags
#                                     pass through; ~2 min, --instructions ~5 min with valgrind)
#   other flags go to bench/bench.py: --duration S, --warmup S, --rounds N, --no-experiments,
#   --only plain,success (those configurations only), --compare OTHER.wasm (the success path
#   with a second module too, A B and B A in alternate rounds, with a B/A ratio table),
#   --no-build (use the existing dist/ and target/release builds)
# Needs: nginx and wrk (apt-get installs them when run as root), Envoy from scripts/setup.sh
# (.venv/bin/envoy), the wasm module and CLI from scripts/build.sh (run here unless --no-build),
# rustc with the wasm32-wasip1 target for the do-nothing and calibration modules.
# Everything listens on 127.0.0.1, ports from $BENCH_PORT_BASE (default 19400) upwards.
set -euo pipefail
cd "$(dirname "$0")/.."

build=1
litellm=0
profile=0
module_only=0
envoy_instructions=0
smoke=0
args=()
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    --module-only) module_only=1 ;;
    --envoy-instructions) envoy_instructions=1 ;;
    --smoke) smoke=1; args+=("$a") ;;
    --profile) profile=1; args+=("$a") ;;
    --with-litellm) litellm=1; args+=("$a") ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    *) args+=("$a") ;;
  esac
done

# --- the module alone (bench/module_bench.mjs): Node only ----------------------------------
if [ $module_only = 1 ]; then
  command -v node >/dev/null || { echo "bench: --module-only needs node (20 or later)"; exit 1; }
  if [ $build = 1 ]; then
    mkdir -p .work/bench
    ./scripts/build.sh >.work/bench/build.log 2>&1 || { cat .work/bench/build.log; exit 1; }
  fi
  margs=()
  set -- "${args[@]}"
  while [ $# -gt 0 ]; do
    case "$1" in
      --module) margs+=("$2"); shift 2 ;;  # module A, as bench.py names it
      *) margs+=("$1"); shift ;;
    esac
  done
  exec node bench/module_bench.mjs "${margs[@]}"
fi

# --- system tools --------------------------------------------------------------------------
missing=()
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx)
command -v wrk >/dev/null || missing+=(wrk)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    pkgs=()
    for m in "${missing[@]}"; do
      if [ "$m" = nginx ]; then
        # nginx-light (Debian <= 12) is the smallest build; later releases only have nginx.
        if apt-cache show nginx-light >/dev/null 2>&1; then pkgs+=(nginx-light); else pkgs+=(nginx); fi
      else
        pkgs+=("$m")
      fi
    done
    echo "bench: installing ${pkgs[*]}"
    apt-get update -qq
    # policy-rc.d: do not start a system nginx on port 80 as a side effect of installing it.
    prc=/usr/sbin/policy-rc.d
    created=0
    if [ ! -e "$prc" ]; then printf '#!/bin/sh\nexit 101\n' >"$prc"; chmod +x "$prc"; created=1; fi
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq "${pkgs[@]}" >/dev/null || {
      [ $created = 1 ] && rm -f "$prc"; exit 1; }
    [ $created = 1 ] && rm -f "$prc"
  else
    echo "bench: missing ${missing[*]}. On Debian/Ubuntu: sudo apt-get install -y nginx-light wrk" \
      "(or nginx wrk)"
    exit 1
  fi
fi
export PATH="$PATH:/usr/sbin"

[ -x .venv/bin/envoy ] || { echo "bench: .venv/bin/envoy is missing: run scripts/setup.sh"; exit 1; }

# --- the module and the CLI ----------------------------------------------------------------
mkdir -p .work/bench
if [ $build = 1 ]; then
  ./scripts/build.sh >.work/bench/build.log 2>&1 || { cat .work/bench/build.log; exit 1; }
  grep '^build: dist' .work/bench/build.log || true
fi
[ -f dist/llm_failover.wasm ] && [ -x target/release/llm-failover ] ||
  { echo "bench: dist/llm_failover.wasm or target/release/llm-failover missing: run scripts/build.sh"; exit 1; }

# --- Python with PyYAML (configs are derived from the rendered YAML) -----------------------
py=python3
if ! "$py" -c 'import yaml' 2>/dev/null; then
  py=.work/bench/venv/bin/python
  if ! "$py" -c 'import yaml' 2>/dev/null; then
    python3 -m venv .work/bench/venv
    .work/bench/venv/bin/pip install -q --disable-pip-version-check 'PyYAML==6.0.2'
  fi
fi

# --- optional peer: LiteLLM proxy from PyPI, in its own venv -------------------------------
if [ $litellm = 1 ] && [ ! -x .work/bench/litellm-venv/bin/litellm ]; then
  echo "bench: installing litellm[proxy] into .work/bench/litellm-venv (at most 10 min)"
  if ! { python3 -m venv .work/bench/litellm-venv &&
         timeout 600 .work/bench/litellm-venv/bin/pip install -q --disable-pip-version-check \
           'litellm[proxy]'; } >.work/bench/litellm-install.log 2>&1; then
    echo "bench: LiteLLM did not install (see .work/bench/litellm-install.log); the peer will be skipped"
  fi
fi

# The smoke also drives the module alone a few thousand times (its checks of the success path
# included): a few seconds, so the harness cannot rot either.
if [ $smoke = 1 ] && command -v node >/dev/null; then
  node bench/module_bench.mjs --requests 2000 --warmup 1000 --runs 1 --chunks 2 || exit 1
fi

if [ $envoy_instructions = 1 ]; then
  command -v valgrind >/dev/null || { echo "bench: --envoy-instructions needs valgrind (apt-get install valgrind)"; exit 1; }
  exec "$py" bench/native_profile.py "${args[@]}"
fi

if [ $profile = 1 ]; then
  exec "$py" bench/profile.py "${args[@]}"
fi
exec "$py" bench/bench.py "${args[@]}"
