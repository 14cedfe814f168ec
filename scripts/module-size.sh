#!/usr/bin/env bash
# Module size guard: fails when the wasm module as scripts/build.sh leaves it (release build, then
# binaryen 132's wasm-opt -Oz) is larger than CEILING, so the size cannot grow unnoticed.
#   scripts/module-size.sh [MODULE]       (default dist/llm_failover.wasm; test.sh runs it)
# A change that needs more raises CEILING in its own commit, with one line below: what it added,
# its measured size, on which commit. Lower CEILING when the module gets smaller. Where the bytes
# go and every earlier raise: BENCHMARKS.md "Module size" and BENCHMARKS-journal.md.
set -euo pipefail
cd "$(dirname "$0")/.."

# 514,555 bytes on main at 98636df with rustc 1.95.0 (514,079 with the toolchain of its CI run;
# the compiler's version moves it by a few hundred bytes): CEILING leaves 1 KB for that.
# The Bedrock Converse provider dialect (translate/converse.rs, Envelope::BedrockConverse,
# Converse events in the event stream, usage::Dialect::Converse): +12,630 (514,555 -> 527,185 on
# 98636df), as Gemini's provider dialect took +13,366; 526,956 on main at bf65909. CEILING leaves
# 1 KB for the compiler's version, as above.
# Rate limits announced in advance added 4.3 KB (514,555 -> 518,876 on
# 98636df; 3.4 KB the upstream role's header read and its skip write, measured by taking the
# call out; the rest the status member, the config fields, the planner's reason); 531,724 on
# main at 949b15b with it. CEILING leaves 1 KB for the compiler's version, as above.
# A first entry that cannot carry the request refused when planning (0 attempts) and credential
# errors under a 400 or 403 (Google's API_KEY_INVALID, AWS's signature and token types) as
# setup_fault: +1,468 (531,354 on main at aaebad6 -> 532,822). CEILING leaves 1 KB, as above.
# The fleet's store (budgets and breaker counts across replicas through Envoy's rate-limit
# service: fleet.rs, its protobuf wire, the sync's glue and gRPC callbacks, the fleet
# config section, the status member) added 26.8 KB (532,822 -> 559,670 on fd621e0); the
# hand-back of a sync whose worker goes +629 (559,670 -> 560,299 on 4a00325).
# CEILING leaves 1 KB for the compiler's version, as above.
# Token budgets per caller (the `callers` section and its validation, the caller refusal, the
# caller in the plan record, the token metric's `caller` label, the status endpoint's
# `callers`): +4,990 (531,354 -> 536,344 on aaebad6); 564,988 on main at 185296b with it.
# CEILING leaves 1 KB for the compiler's version, as above.
# Groups of equal entries (config reading and checks, the planner's walk through a group,
# pick.rs's draw, the least_busy counts and the status endpoint's `groups`) added 9.6 KB
# (532,822 -> 542,450 on main at 8f3f995); 575,137 on main at b6bf389 with it. CEILING leaves
# 1 KB as above.
# Hedged first tokens (`hedge_after`: its validation and grouping-mode refusal, the race's
# outcomes and their shared counts, `llm_failover_hedges_total`, the status endpoint's `hedges`,
# the winner's attempt number for the answer's headers) +6,242 (576,040 -> 582,282 on 3961aa2).
# CEILING leaves 1 KB as above.
CEILING=583300
module=${1:-dist/llm_failover.wasm}
if [ ! -f "$module" ]; then
  echo "module-size: $module missing: run scripts/build.sh"
  exit 1
fi
if ! wasm_opt=$(./scripts/binaryen.sh --no-install); then
  echo "module-size: skipped: wasm-opt (binaryen) is not installed, so $module is not optimized"
  exit 0
fi
size=$(wc -c <"$module")
echo "module-size: $module: $size bytes (ceiling $CEILING)"
if [ "$size" -gt "$CEILING" ]; then
  echo "module-size: FAIL: $((size - CEILING)) bytes over the ceiling; BENCHMARKS.md \"Module size\" shows where the bytes go and how to measure them"
  case "$wasm_opt" in
    */tools/binaryen/*) ;;
    *) echo "module-size: (optimized by $wasm_opt, not binaryen 132 from npm, which the ceiling is measured with: ./scripts/setup.sh installs it)" ;;
  esac
  exit 1
fi
