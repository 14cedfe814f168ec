#!/usr/bin/env bash
# Module size guard (issue 12; BENCHMARKS.md "Module size"): fails when the wasm module, as
# scripts/build.sh leaves it (release build, then wasm-opt -Oz), is larger than CEILING, so the
# size cannot grow back unnoticed. Lower CEILING when the module gets smaller; raise it only with
# the reason and the measured figures in BENCHMARKS.md.
#   scripts/module-size.sh [MODULE]       (default dist/llm_failover.wasm; test.sh runs it)
set -euo pipefail
cd "$(dirname "$0")/.."

# Bytes after wasm-opt. TARGET is issue 12's: below the 418,489 bytes issue 8 measured (415,324
# with rustup's stable toolchain before the third wave, BENCHMARKS.md "Module size").
# Issue 21 allows the third wave (translation across vendors' APIs, the clouds' envelopes,
# attempt conduct, health windows) at most 480,000 bytes with all of it in: CEILING. The module
# measured about 549,000 when it all landed and about 461,000 since the link runs at opt-level
# "z" (the module/ crate), the translators read JSON with one walker and decimals are read
# without std's f64 parser (BENCHMARKS.md "Module size: the third wave back under 480,000").
# Issue 29 (OpenAI's Responses API as a caller dialect, through the internal model of
# src/translate/model.rs) allows at most 520,000 with everything in: the Responses dialect took
# the module from about 462,000 to 486,020 bytes (493,556 with the residency and explain
# changes that landed beside it), and Chat Completions as its provider dialect to 501,901
# (BENCHMARKS.md "Module size"). Issue 31's per-entry request settings (effort, max_tokens in
# each provider's dialect): 511,944; issue 32's access-log path (the caller's :path put back
# where a chain's attempts may change it): 511,563 after main's responses.rs mends; issue 31's
# first-token timeout without streaming (a stream gathered into one JSON answer,
# translate/assemble.rs): 519,806, 194 bytes under the wave's limit. Issue 29's Gemini native
# API as a provider dialect (translate/gemini.rs, api: gemini_native): 533,138, 13,138 over it.
# Issue 30's OpenTelemetry record (`log_models`: the request's and the answer's model in filter
# state, only when the render sends records to a collector): 509,311 -> 509,810 bytes.
# Issue 30's token budgets per provider: 509,810 -> 512,539 (BENCHMARKS.md "Token budgets").
# Issue 29's Gemini native API as a caller dialect (google-genai apps): 512,539 -> 535,115.
# Issue 30's token usage counted (usage.rs wired, roles/counting.rs, tokens.rs, the status
# endpoint's tokens): 535,115 -> 547,508. The OpenTelemetry tokens, the budget spend, the stream
# usage fix and the upstream role's passage: 548,005. This is 28 KB over issue 29's 520,000 with
# Gemini, usage, budgets and OpenTelemetry in (the size work cut 22 KB of it): the next wave's
# first job is bytes (BENCHMARKS.md "Module size": the /v1/models list and the status page at
# "z" through the loader's hook, ~8 KB). Issue 29's Anthropic Messages caller on Gemini
# (translate/messages/caller.rs: its request reader and stream encoder on the model, beside the
# pair module messages_to_chat that they are to replace): 548,005 -> 560,109. Issue 30's
# budget check on reroutes (plan::admit for every provider planning picks): 560,109 -> 560,332.
# Size cuts (BENCHMARKS.md "Module size: the fourth wave's cuts"): the models list and the
# status page compiled at "z" through the module crate's hook (roles::LocalAnswers), and no
# serde serialiser in the module (status page, models objects, error bodies written with
# translate/json.rs's Out): 560,332 -> 551,083. CEILING sits just above that on purpose, so
# that every byte added from here shows: a change that needs more raises it in its own commit,
# with its measured size (the dialect work still landing, a Responses provider, is expected to
# add 10-25 KB; issue 29's limit stays 520,000).
# Gemini-native per-entry settings (entry_settings::gemini): +2,025, 553,108. Issue 29's OpenAI
# Responses as a provider dialect (api: openai_responses, translate/responses/provider.rs; the
# SSE reader's callback made dyn so every decoder shares one reader, -3.3 KB): +10,888 measured
# on 97bc852 (560,109 -> 570,997), 553,108 -> 563,847 on c5647df (+10,739). Issue 30's stream
# usage search and Gemini's usageMetadata (usage.rs: find_byte, find_key, member_at,
# Dialect::Gemini): 563,847 -> 565,545 (+1,698). A Messages caller's Chat requests and streams
# through the model (the pair module messages_to_chat down to its whole-answer writer): -12,919,
# 552,626 on main at 3632b32, and CEILING back just above it.
# The Messages caller's Chat requests and streams on the model, the pair's request and stream
# code gone: 563,847 -> 550,907 measured before the stream usage search (553,108 -> 539,745
# before the Responses provider); the ceiling is left for the lead to lower.
# A Gemini caller's images, context cache and Files API uploads seen by the request scan, and
# google-genai's snake-case media members read (rewrite/scanner.rs, gemini/caller.rs): +939,
# 553,565.
# Google's stream errors typed by their code (translate/common.rs ProviderError::of) and top_k
# carried between Messages and Gemini (model.rs Request::top_k): 553,565 -> 554,151 (+586,
# both together, on main at bc4d755).
# Issue 30's stream usage asked for a caller that did not (ask_stream_usage: the ask in the one
# body edit, usage::Unasked taking the usage chunk and the "usage":null members out of the
# caller's stream): 554,151 -> 559,020 (+4,869) on main at 3a7f2fb; for the lead to decide.
# The last pair modules gone (chat_to_messages, messages_to_chat: a Chat caller's Messages
# streams, requests and answers and a Messages caller's Chat answers through the model, the
# sse::Pair translator with them): 552,626 -> 543,183 on 179c9bf's source (-9,443), 544,698 on
# main at 3a7f2fb, 549,566 on main at d480e61 (ask_stream_usage), and CEILING just above it.
# Size cuts, fifth round (BENCHMARKS.md "Module size: the fourth wave's cuts"): binaryen 132's
# wasm-opt from npm (scripts/binaryen.sh) instead of Debian's 108: -5,142 on 179c9bf (552,626 ->
# 547,484); json::pick one walk for every N: -1,213 (546,271 on 179c9bf). Both on main at
# 3a7f2fb: 554,151 -> 547,795; on main at e84b29b (the pair modules gone): 549,566 -> 543,183.
# A Gemini caller's path names the entry's model on a provider without `api`
# (translate::gemini::with_model, attempt::provider_path) and a Gemini stream's finishReason
# ends it complete (dialects::stream_complete): +1,309 (554,151 -> 555,460 on bc4d755), 543,183
# -> 544,501 (+1,318) on main at 3836d8a.
# ask_stream_usage in fewer bytes (the ask merged by entry_settings' object helper, Unasked's
# lines read in one loop): -1,257 on main at 3836d8a (543,183 -> 541,926), 544,501 -> 543,234 on
# main at 357bc27, CEILING just above.
# Gemini's thoughtSignature carried in a call's id and sent back on it (translate/gemini.rs
# SIGNATURE): +554 (544,501 -> 545,055 on 357bc27).
# The success path's usage reading made cheaper (issue 30 figures: "usage":null keys passed over
# without finding their line, a JSON answer's usage key found from the end by its g, a plain
# answer's body callbacks past the passage): 543,183 -> 543,319 (+136) on main at 3836d8a.
# dialects::data_is_error on the translators' walker (no second serde_json reader): 543,183 ->
# 537,145 (-6,038) on main at 346aeea; 537,878 on main at fd66bda.
# A Gemini topK written 40.0 (google-genai) sent to Messages as the integer 40 (json::integral):
# +127, 538,005.
# One sampling-members writer (common::Sampling) and one stream-decoder body (sse::Decode) for
# the provider dialects: 538,058 -> 536,840 (-1,218).
# Gemini 3's placeholder thoughtSignature on a step's first call another vendor made, and call
# ids sent to other vendors without the signature they carry: +387, 537,227 on f14e4d6.
# Anthropic's thinking blocks kept for a Responses caller (reasoning items and their stream
# events, read back into signed thinking blocks; a tool loop begun without thinking continues
# without it): +5,627, 542,854 on 427bc4d.
# Retry-After's HTTP-dates read by retry_after.rs, httpdate only the test oracle: 538,058 ->
# 532,225 (-5,833) on main at 84aa4ea; 542,854 -> 537,021 on main at c3be209.
# A Gemini caller's errors from one status table (every status Google's body carries, JSON and
# stream), and Google's error chunk ending a Gemini caller's stream cut short: +353 (543,207 on
# c3be209), 537,374 on 618469a.
# RawConfig's Deserialize written once over a table of the sections (config/raw/read.rs) instead
# of serde's derived visitors: 538,058 -> 517,630 (-20,428) on 2966fd4; with its second step
# 536,840 -> 514,761 (-22,079) on f14e4d6, 537,374 -> 515,289 (-22,085) on main at 9629835.
# The gathered thinking as a call's piece, thinking's text and signature borrowed: -232 on
# 427bc4d (542,854 -> 542,622); 537,021 -> 536,789 on main at 618469a; 515,202 -> 514,974 on main at e2123d7.
# The success path's byte searches eight bytes at a time and ask_stream_usage's ask written as
# one member first (issue 30 figures): 514,974 -> 516,015 (+1,041) on main at 083076a.
# A request not streamed gathered under first_token for Responses and Gemini callers too (the
# Gemini path asking a stream, streamable's Gemini and Responses members): +707 (514,974 ->
# 515,681 on main at 083076a), 516,015 -> 516,750 on main at 222bdbf.
# Needles found by their first two bytes (usage::find_pair) and a usage object's numbers read
# without a checked multiplication (issue 30 figures): 516,750 -> 517,176 (+426) on 67a6bf7.
# Signed tool call ids cut from a same-API attempt's body in a chain with a gemini_native entry
# (translate::gemini::unsign_ids, Chain::signs_calls): +885 (516,750 -> 517,635 on main at
# 67a6bf7).
# Gemini's placeholder signature only on the current turn's steps of a model that checks
# (translate::gemini::checks_signatures, Conversation's unsigned calls): +372 (518,061 ->
# 518,433 on 344cc2c); 510,214 with it on main at d19f74d.
# A Responses provider's reasoning items to Messages callers as thinking blocks and back (JSON,
# stream, gathered; `include` asked when the caller asks for thinking): +2,779 (510,214 ->
# 512,993 on main at fad7780).
# The translators joined through one reader/writer per dialect (translate::request, ::response,
# translate/stream.rs; no pair functions): 514,974 -> 512,808 on 083076a, 515,469 -> 509,746 on
# main at 344cc2c with the request side. The plan record written without write! (-673).
# Wrapped reasoning taken out of a same-API attempt's body (one mend with the signed ids):
# +1,894 (512,185 -> 514,079 on d3efa01). CEILING just above main at c9fc7bb.
TARGET=418489
CEILING=514200
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
echo "module-size: $module: $size bytes (target below $TARGET, ceiling $CEILING)"
if [ "$size" -ge "$TARGET" ]; then
  echo "module-size: WARNING: not below issue 12's target of $TARGET bytes"
fi
if [ "$size" -gt "$CEILING" ]; then
  echo "module-size: FAIL: $((size - CEILING)) bytes over the ceiling; BENCHMARKS.md \"Module size\" shows where the bytes go and how to measure them"
  case "$wasm_opt" in
    */tools/binaryen/*) ;;
    *) echo "module-size: (optimized by $wasm_opt, not binaryen 132 from npm, which the ceiling is measured with: ./scripts/setup.sh installs it)" ;;
  esac
  exit 1
fi
