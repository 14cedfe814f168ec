#!/usr/bin/env bash
# The demo: Envoy + the llm-failover filter + three local mock providers, showing a failover.
#   ./scripts/demo.sh            set up, build, run the demo, tear everything down
# The primary provider answers 503; the filter moves the request to the secondary, and the
# response headers say so. A streamed request then shows that a fallback streams too, and
# Envoy's access log shows each request's walk. Ports: 127.0.0.1 only
# (mocks 18101-18103 and controls 19101-19103, gateway 10000, admin 9901; override with
# PRIMARY_PORT, SECONDARY_PORT, TERTIARY_PORT, LISTEN_PORT, ADMIN_PORT).
#   ./scripts/demo.sh --fleet    two replicas sharing one budget through Envoy's rate-limit
#                                service on Redis instead (scripts/demo-fleet.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${1:-}" = --fleet ] && exec ./scripts/demo-fleet.sh

./scripts/setup.sh
./scripts/build.sh

export PRIMARY_PORT=${PRIMARY_PORT:-18101} SECONDARY_PORT=${SECONDARY_PORT:-18102}
export TERTIARY_PORT=${TERTIARY_PORT:-18103} LISTEN_PORT=${LISTEN_PORT:-10000}
export ADMIN_PORT=${ADMIN_PORT:-9901}
work=.work/demo
mkdir -p "$work"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

start_mock() { # name port control_port
  .venv/bin/python tests/integration/mock_provider.py --name "$1" --port "$2" --control-port "$3" \
    > "$work/$1.log" 2>&1 &
  pids+=($!)
}
start_mock primary "$PRIMARY_PORT" 19101
start_mock secondary "$SECONDARY_PORT" 19102
start_mock tertiary "$TERTIARY_PORT" 19103

target/release/llm-failover render envoy/demo.failover.yaml --out "$work/envoy.yaml"
.venv/bin/envoy -c "$work/envoy.yaml" --concurrency 2 --disable-hot-restart -l warning \
  > "$work/envoy.log" 2>&1 &
pids+=($!)

wait_for() { # url what
  for _ in $(seq 1 100); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "demo: $2 did not come up; see $work/" >&2; exit 1
}
for c in 19101 19102 19103; do wait_for "http://127.0.0.1:$c/health" "mock on control port $c"; done
wait_for "http://127.0.0.1:$ADMIN_PORT/ready" "Envoy"

echo
echo "== The primary provider is down: it answers 503 Service Unavailable"
curl -fsS -X POST http://127.0.0.1:19101/behaviour -d '{"status": 503}' > /dev/null
curl -fsS -X POST http://127.0.0.1:19102/behaviour -d '{"chunks": 4, "chunk_interval_ms": 300}' > /dev/null

echo "== POST /v1/chat/completions through the gateway:"
curl -sS -i --max-time 10 "http://127.0.0.1:$LISTEN_PORT/v1/chat/completions" \
  -H 'content-type: application/json' -H 'authorization: Bearer my-gateway-key' \
  -d '{"model": "gpt-4o", "messages": [{"role": "user", "content": "Hello"}]}'
echo
echo
echo "== The same request, streamed (SSE): the fallback's chunks arrive as it sends them"
curl -sS -N --max-time 10 "http://127.0.0.1:$LISTEN_PORT/v1/chat/completions" \
  -H 'content-type: application/json' -D - \
  -d '{"model": "gpt-4o", "stream": true, "messages": [{"role": "user", "content": "Hello"}]}'
echo
echo "== Envoy's access log (one line per request, listing its attempts):"
sleep 0.5
grep 'llm_failover=' "$work/envoy.log" | tail -2 || true
echo
echo "demo: done (logs in $work/)"
