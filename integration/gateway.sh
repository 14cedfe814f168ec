#!/bin/sh
# Entry point of the compose harness's `envoy` service (POSIX sh: runs in the official Envoy
# image and in ours). Runs Envoy on CONFIG and restarts it on another config on request, so
# every scenario gets a fresh gateway (fresh breaker state, its own knobs), as natively.
#
#   gateway.sh CONFIG        (cwd = repo root: module paths in configs are relative to it)
#
# Control directory $GATEWAY_DIR (default /gw, shared with the tests container):
#   restart   written (atomically, by rename) by a client: the path of the next config.
#             The old Envoy is stopped (SIGTERM, waited for), then a new one starts.
#   started   "<seq> <pid> <config>" of the Envoy now running (seq counts restarts)
#   exited    "<seq> <exit code>" when the Envoy of restart <seq> exited by itself
#   envoy.log stdout+stderr of the Envoy now running (truncated at each start)
set -u
dir=${GATEWAY_DIR:-/gw}
seq=0
pid=

start() {
  envoy -c "$1" --concurrency "${ENVOY_CONCURRENCY:-2}" -l "${ENVOY_LOG_LEVEL:-info}" \
    --file-flush-interval-msec 100 >"$dir/envoy.log" 2>&1 &
  pid=$!
  echo "$seq $pid $1" >"$dir/started.tmp" && mv -f "$dir/started.tmp" "$dir/started"
}
stop() {
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    pid=
  fi
}
trap 'stop; exit 0' TERM INT

rm -f "$dir/restart" "$dir/started" "$dir/exited"
start "$1"
while :; do
  if [ -f "$dir/restart" ]; then
    next=$(cat "$dir/restart")
    rm -f "$dir/restart"
    stop
    seq=$((seq + 1))
    start "$next"
  elif [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid"
    echo "$seq $?" >"$dir/exited"
    pid=
  fi
  sleep 0.05
done
