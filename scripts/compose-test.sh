#!/usr/bin/env bash
# Runs the integration scenarios through the compose harness (integration/docker-compose.yml):
# renders the gateway config, makes sure the images exist (scripts/docker-images.sh builds local
# ones), starts Envoy + three mocks in containers, runs the `tests` container, always tears
# everything down (`down -v`), and prints the result.
#
# Exit: pytest's result (0 = all scenarios passed); 0 with "SKIPPED: no Docker engine" when no
# Docker engine can be started on this machine; non-zero on any other problem.
# Needs: dist/llm_failover.wasm (scripts/build.sh) and the CLI (target/release/llm-failover).
# Env:
#   FAILOVER_CONFIG        failover YAML to render and run (default envoy/demo.failover.yaml)
#   ENVOY_IMAGE, PYTHON_IMAGE  use these images (e.g. the official ones) instead of building local ones
#   COMPOSE_TEST_TIMEOUT   bound on the whole compose run in seconds (default 600)
#   PYTEST_ARGS            extra pytest arguments for the runner (e.g. "-k failover -x")
#   *_PORT, *_CONTROL_PORT fixed ports; by default free ones are picked at run time
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
T0=$(date +%s)
log() { echo "compose-test: $*"; }

FAILOVER_CONFIG=${FAILOVER_CONFIG:-envoy/demo.failover.yaml}
CLI=${LLM_FAILOVER_CLI:-target/release/llm-failover}
WASM=dist/llm_failover.wasm
for f in "$CLI" "$WASM" "$FAILOVER_CONFIG"; do
  [ -e "$f" ] || { log "FAILED: $f is missing (build first: scripts/build.sh)"; exit 1; }
done

# --- engine and images -------------------------------------------------------------------
if [ -n "${ENVOY_IMAGE:-}" ] && [ -n "${PYTHON_IMAGE:-}" ]; then
  log "using given images ENVOY_IMAGE=$ENVOY_IMAGE PYTHON_IMAGE=$PYTHON_IMAGE"
  if ! timeout 10 docker info >/dev/null 2>&1; then
    echo "SKIPPED: no Docker engine answers (compose harness not run)"; exit 0
  fi
else
  exports=$(scripts/docker-images.sh)
  rc=$?
  if [ $rc = 3 ]; then
    echo "SKIPPED: no Docker engine (compose harness not run; see the message above)"
    exit 0
  elif [ $rc != 0 ]; then
    log "FAILED: scripts/docker-images.sh exited with $rc"; exit $rc
  fi
  eval "$exports"
fi
export ENVOY_IMAGE PYTHON_IMAGE

if docker compose version >/dev/null 2>&1; then
  DC=(docker compose)
elif command -v docker-compose >/dev/null; then
  DC=(docker-compose)
else
  log "FAILED: neither 'docker compose' nor docker-compose is installed"; exit 1
fi

# --- ports and config --------------------------------------------------------------------
# Free ports picked now (host networking: fixed defaults could collide with other runs), by the
# suite's own picker: below the kernel's ephemeral range, which outgoing connections use.
read -r -a free < <(python3 - <<'EOF'
import sys
sys.path.insert(0, "tests/integration")
from harness import free_port
ports = []
while len(ports) < 8:
    p = free_port()
    if p not in ports:
        ports.append(p)
print(" ".join(map(str, ports)))
EOF
)
[ ${#free[@]} = 8 ] || { log "FAILED: could not pick free ports"; exit 1; }
i=0
for v in PRIMARY_PORT SECONDARY_PORT TERTIARY_PORT PRIMARY_CONTROL_PORT SECONDARY_CONTROL_PORT \
         TERTIARY_CONTROL_PORT LISTEN_PORT ADMIN_PORT; do
  [ -n "${!v:-}" ] || export "$v=${free[$i]}"
  i=$((i + 1))
done

PROJECT=llmfo-test-$$
RUN_DIR=.work/compose/$PROJECT
mkdir -p "$RUN_DIR/gw"
export ENVOY_CONFIG=$RUN_DIR/envoy.yaml GATEWAY_DIR=$ROOT/$RUN_DIR/gw FAILOVER_CONFIG
if ! "$CLI" render "$FAILOVER_CONFIG" --out "$ENVOY_CONFIG" >"$RUN_DIR/render.log" 2>&1; then
  cat "$RUN_DIR/render.log"; log "FAILED: llm-failover render $FAILOVER_CONFIG"; exit 1
fi
log "rendered $FAILOVER_CONFIG -> $ENVOY_CONFIG (listen $LISTEN_PORT, admin $ADMIN_PORT," \
  "mocks $PRIMARY_PORT/$SECONDARY_PORT/$TERTIARY_PORT)"

# --- run ---------------------------------------------------------------------------------
dc() { "${DC[@]}" -f integration/docker-compose.yml -p "$PROJECT" "$@"; }
cleanup() {
  dc down -v --remove-orphans -t 5 >/dev/null 2>&1 || log "warning: compose down failed"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "images: $ENVOY_IMAGE, $PYTHON_IMAGE; compose: ${DC[*]}"
bound=${COMPOSE_TEST_TIMEOUT:-600}
# Envoy and the mocks detached, then the runner in the foreground: only its output is shown
# (the same as `up --exit-code-from tests`, with readable output).
if ! timeout 120 "${DC[@]}" -f integration/docker-compose.yml -p "$PROJECT" up -d --no-color \
    primary secondary tertiary envoy >"$RUN_DIR/up.log" 2>&1; then
  cat "$RUN_DIR/up.log"; log "FAILED: could not start the services"; exit 1
fi
timeout -k 10 "$bound" "${DC[@]}" -f integration/docker-compose.yml -p "$PROJECT" \
  run --rm -T tests
rc=$?
[ $rc = 124 ] && log "the run exceeded COMPOSE_TEST_TIMEOUT=${bound}s"
if [ $rc != 0 ]; then
  log "service states:"; dc ps 2>&1 | sed 's/^/  /'
  elog=$RUN_DIR/gw/envoy.log
  log "Envoy log ($elog): warnings and errors, then the last lines:"
  grep -E '\]\[(warning|error|critical)\]' "$elog" 2>/dev/null | tail -n 20 | sed 's/^/  /'
  echo "  ..."
  grep -v 'server.cc:4[0-9][0-9]\]   ' "$elog" 2>/dev/null | tail -n 15 | sed 's/^/  /'
  for s in envoy primary secondary tertiary; do
    log "last output of $s:"; dc logs --no-color --tail 15 "$s" 2>&1 | sed 's/^/  /'
  done
fi
cleanup
trap - EXIT
if [ $rc = 0 ]; then
  rm -rf "$RUN_DIR" 2>/dev/null || true # kept on failure, for its logs
  log "PASSED in $(($(date +%s) - T0)) s"
else
  log "FAILED (exit $rc) after $(($(date +%s) - T0)) s"
fi
exit $rc
