#!/usr/bin/env bash
# The fleet demo (`scripts/demo.sh --fleet`): two gateway replicas share one provider budget
# through Envoy's rate-limit service on Redis (docs/operations.md "The fleet's store").
# envoy/fleet-demo.failover.yaml gives the primary 60 tokens an hour for the whole fleet; each
# answer costs 12. Requests alternate between the replicas: once the fleet has spent the budget,
# both replicas send the next requests to the secondary (x-llm-fallback-reason:
# budget_exhausted), though neither spent 60 tokens alone. Ports, 127.0.0.1 only: mocks
# 18101-18102 (controls 19101-19102), replicas 10000/10001 (admin 9901/9911, status 9902/9912),
# the service 18081 (gRPC; HTTP 18082, debug 18083), Redis 16379.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
./scripts/build.sh
command -v redis-server >/dev/null && [ -x tools/ratelimit/service_cmd ] || {
  echo "demo: needs redis-server and the rate-limit service (scripts/setup.sh installs both as root;" \
    "scripts/ratelimit.sh the service)" >&2
  exit 1
}

export PRIMARY_PORT=18101 SECONDARY_PORT=18102 RATELIMIT_PORT=${RATELIMIT_PORT:-18081}
REDIS_PORT=${REDIS_PORT:-16379}
work=.work/demo-fleet
rm -rf "$work" && mkdir -p "$work/rl/ratelimit/config"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# The store: Redis, and the service with a one-line config naming the domain.
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
  > "$work/redis.log" 2>&1 &
pids+=($!)
# The service refuses to start without its Redis: wait until Redis takes connections.
for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT") 2>/dev/null && break; sleep 0.1; done
echo 'domain: llm-failover' > "$work/rl/ratelimit/config/llm-failover.yaml"
USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$REDIS_PORT" \
  RUNTIME_ROOT="$PWD/$work/rl" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
  HOST=127.0.0.1 PORT=18082 GRPC_HOST=127.0.0.1 GRPC_PORT="$RATELIMIT_PORT" \
  DEBUG_HOST=127.0.0.1 DEBUG_PORT=18083 tools/ratelimit/service_cmd > "$work/ratelimit.log" 2>&1 &
pids+=($!)

for m in primary:18101:19101 secondary:18102:19102; do
  IFS=: read -r name port control <<<"$m"
  .venv/bin/python tests/integration/mock_provider.py --name "$name" --port "$port" \
    --control-port "$control" > "$work/$name.log" 2>&1 &
  pids+=($!)
done

# Two replicas of the same file, each on its own ports.
for r in 1 2; do
  LISTEN_PORT=$((9999 + r)) ADMIN_PORT=$((9891 + 10 * r)) STATUS_PORT=$((9892 + 10 * r)) \
    target/release/llm-failover render envoy/fleet-demo.failover.yaml --out "$work/envoy$r.yaml"
  .venv/bin/envoy -c "$work/envoy$r.yaml" --concurrency 2 --disable-hot-restart -l warning \
    --base-id "$((40 + r))" > "$work/envoy$r.log" 2>&1 &
  pids+=($!)
done

wait_for() { # url what
  for _ in $(seq 1 150); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "demo: $2 did not come up; see $work/" >&2; exit 1
}
wait_for http://127.0.0.1:18082/healthcheck "the rate-limit service"
for c in 19101 19102; do wait_for "http://127.0.0.1:$c/health" "mock on control port $c"; done
for a in 9901 9911; do wait_for "http://127.0.0.1:$a/ready" "Envoy (admin $a)"; done
for c in 19101 19102; do
  curl -fsS -X POST "http://127.0.0.1:$c/behaviour" \
    -d '{"usage": {"prompt_tokens": 8, "completion_tokens": 4, "total_tokens": 12}}' > /dev/null
done

echo
echo "== The primary's budget is 60 tokens an hour for the fleet; each answer costs 12."
echo "== Ten requests, alternating between the two replicas:"
for i in $(seq 1 10); do
  port=$((10000 + (i + 1) % 2))
  headers=$(curl -sS -o /dev/null -D - --max-time 10 "http://127.0.0.1:$port/v1/chat/completions" \
    -H 'content-type: application/json' \
    -d '{"model": "gpt-4o", "messages": [{"role": "user", "content": "Hello"}]}' | tr -d '\r')
  provider=$(sed -n 's/^x-llm-provider: //p' <<<"$headers")
  reason=$(sed -n 's/^x-llm-fallback-reason: //p' <<<"$headers")
  printf '  request %2d via replica %d (:%d): answered by %-9s %s\n' "$i" "$(((i + 1) % 2 + 1))" \
    "$port" "$provider" "${reason:+(skipped the primary: $reason)}"
  sleep 0.7 # about a sync apart, so each replica has heard of the other's spend
done

echo
echo "== What each replica's status endpoint says of the fleet (GET :9902 and :9912/llm-failover/status):"
for s in 9902 9912; do
  curl -fsS "http://127.0.0.1:$s/llm-failover/status" |
    .venv/bin/python -c 'import json,sys; print("  ", json.dumps(json.load(sys.stdin).get("fleet")))'
done
echo
echo "demo: done (logs in $work/)"
