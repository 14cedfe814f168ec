#!/usr/bin/env bash
# Soak with faults (RELIABILITY.md): real Envoy (--concurrency 2) running the built filter, three mock
# providers misbehaving at random (5xx, 429 with Retry-After, resets before headers, hangs past
# the attempt timeout, one provider going down and up, streams reset mid-way, slow streams),
# 200 concurrent callers, streaming and not. Checks every request and the run (see
# tests/integration/soak.py), prints a table, exits 1 on any violation.
#
#   scripts/soak.sh                  # 60 s
#   scripts/soak.sh --fleet          # with the fleet's store (Redis, Envoy's rate-limit service):
#                                    # what CI runs; the store counts every token spent
#   scripts/soak.sh --seconds 30 --fleet --runtime native
#                                    # the native build (docs/native.md): CI runs it too
#   scripts/soak.sh --minutes 30     # on demand
#   scripts/soak.sh --seconds 20 --callers 250 --table-out soak.md
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ] || [ ! -f dist/llm_failover.wasm ] || [ ! -f dist/libllm_failover.so ] ||
  [ ! -x target/release/llm-failover ]; then
  ./scripts/setup.sh
  ./scripts/build.sh
fi
PATH="$PWD/.venv/bin:$PATH" exec .venv/bin/python tests/integration/soak.py "$@"
