#!/usr/bin/env node
// The module alone: loads a llm-failover wasm module into a scripted proxy-wasm host (this file)
// and drives the success path as Envoy 1.39+ does in router mode, many times, timing the module's
// own code without Envoy, nginx or wrk (whose noise, about ±7 % on 2 shared cores, hides the few
// per cent that separate two builds of the module).
//
//   node bench/module_bench.mjs [A.wasm]              ns per request, 1 KB and 50 KB bodies
//   node bench/module_bench.mjs A.wasm --compare B.wasm   A and B alternately (A B B A ...),
//                                                     per-cell B/A ratios and their spread
//   node bench/module_bench.mjs A.wasm [--compare B.wasm] --instructions [N1,N2]
//                                                     instructions per request under valgrind
//                                                     (deterministic; about 5 min for two modules)
//   options: --requests N (100000 per run) --warmup N (20000) --runs R (5) --chunks C (20
//   interleaved slices per run) --max-seconds S (60, per run) --sizes 1KB,50KB --verbose
//   --budget N (the first provider gets a budget of N tokens a day) --team-budget N (requests
//   come from caller team-a, with a budget of N tokens a day) --no-ask (ask_stream_usage off)
//   --fleet (with --budget: the fleet's store configured, so the budget's record carries the
//   fleet's figure; no sync runs) --rate-limit-headers (every answer carries OpenAI's six
//   rate-limit headers, room left)
//   (sizes 1KB-stream and 50KB-stream: the same bodies asking for a stream with its usage,
//   answered by a three-chunk event stream; the hostcall sequence Envoy 1.40 makes for a held
//   stream, not checked against a trace log; 1KB-unasked and 50KB-unasked: a stream whose
//   caller did not ask for its usage, answered with it only when the module asked for it)
//   --trace ENVOY_TRACE_LOG (check the hostcall sequence against Envoy's wasm trace log from
//   `scripts/bench.sh --profile`, then exit)
//   (scripts/bench.sh --module-only [--compare B.wasm] runs this; default A is dist/llm_failover.wasm)
//
// What the host answers is what Envoy 1.40 answered in its wasm trace log (bench/profile.py,
// `--component-log-level wasm:trace`) for bench.py's success configuration: the same plugin
// configurations (the demo chain rendered by `llm-failover render`), request headers, bodies,
// properties, the nginx answer. Both filter roles run in one VM, as in Envoy (same vm_id): root
// context 1 is the upstream role, 2 the downstream role, and each request is a downstream context
// and an upstream context. `--trace` compares this host's calls, line by line (pointers masked),
// with Envoy's for the first two requests: that is how the sequence below was checked.
// Envoy compiles wasm with TurboFan only (proxy-wasm-cpp-host sets liftoff off); so does this.
// BENCHMARKS.md "The module alone" says how to read the figures.

import { readFileSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { setFlagsFromString } from "node:v8";
import { fileURLToPath } from "node:url";
import path from "node:path";

// Before any module is compiled: TurboFan only, everything compiled up front (no compile work
// lands inside a measured run, and none stretches a request the module times).
// Counting instructions (--just) compiles lazily instead: only the functions the success path
// runs, which saves most of a minute under valgrind and changes nothing once they are compiled.
setFlagsFromString("--no-liftoff");
if (!process.argv.includes("--just")) setFlagsFromString("--no-wasm-lazy-compilation");

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

// --- what Envoy gave the module (bench.py's success configuration) -------------------------

// `llm-failover render envoy/demo.failover.yaml` with bench.py's BREAKER_ENV (failures 1000 in
// 2 ms: the breaker never opens); the two roles differ only in "role". Byte-exact: 690 and 688.
const CONFIG_REST =
  '"providers":[{"name":"primary","credential":{"header":"authorization","prefix":"Bearer ",' +
  '"value":"sk-primary"}},{"name":"secondary","credential":{"header":"authorization",' +
  '"prefix":"Bearer ","value":"sk-secondary"}},{"name":"tertiary","credential":{"header":' +
  '"x-api-key","value":"sk-tertiary"}}],"timeouts":{"attempt":"120s"},"breaker":{"failures":' +
  '1000,"window":"2ms","cooldown":"60s"},"status_path":null,"chains":[{"name":"default",' +
  '"max_attempts":3,"fallback_on":["connection_error","timeout","rate_limited","server_error",' +
  '"overloaded","model_not_found"],"fallbacks_exhausted":false,"providers":["primary",' +
  '"secondary",{"provider":"tertiary","model":"tertiary-model"}]}]}';
// `--budget N`: the first provider gets a token budget of N tokens a day (the cost of a budget
// check per request: one more shared-data read in planning).
const BUDGET_AT = process.argv.indexOf("--budget");
const BUDGET = BUDGET_AT > 0 ? Number(process.argv[BUDGET_AT + 1]) : 0;
const CONFIG_BUDGET = BUDGET > 0
  ? CONFIG_REST.replace('"value":"sk-primary"}}', `"value":"sk-primary"},"budget":{"tokens":${BUDGET},"window":"24h"}}`)
  : CONFIG_REST;
// `--group weighted|least_busy`: primary and secondary are one group at the chain's first
// position (docs/configuration.md "Groups of equal deployments"), the cost of the group pick.
// weighted: weights 4294967295 and 1, so primary is picked (secondary about once in 4e9);
// least_busy: secondary counted as holding 1000 requests (set before the roots load), so
// primary, the least busy, is picked, its count raised and lowered per request.
const GROUP_AT = process.argv.indexOf("--group");
const GROUP = GROUP_AT > 0 ? process.argv[GROUP_AT + 1] : "";
const GROUP_ENTRY = { weighted: '{"group":["primary","secondary"],"weights":[4294967295,1]}',
  least_busy: '{"group":["primary","secondary"],"policy":"least_busy"}' }[GROUP];
if (GROUP && !GROUP_ENTRY) throw new Error(`--group ${GROUP}: weighted or least_busy`);
const CONFIG_GROUP = GROUP_ENTRY
  ? CONFIG_BUDGET.replace('"providers":["primary","secondary",', `"providers":[${GROUP_ENTRY},`)
  : CONFIG_BUDGET;
if (GROUP_ENTRY && CONFIG_GROUP === CONFIG_BUDGET) throw new Error("--group: the chain was not found");
const FLEET = process.argv.includes("--fleet");
const CONFIG_FLEET = FLEET ? '"fleet":{"cluster":"ratelimit"},' + CONFIG_GROUP : CONFIG_GROUP;
// `--team-budget N`: requests come from caller team-a (`x-team`), which has a token budget of
// N tokens a day (the cost of a caller budget: its check in planning, its spend per answer).
const TEAM_AT = process.argv.indexOf("--team-budget");
const TEAM_BUDGET = TEAM_AT > 0 ? Number(process.argv[TEAM_AT + 1]) : 0;
const CONFIG_TEAM = TEAM_BUDGET > 0
  ? `"caller_header":"x-team","callers":[{"name":"team-a","budget":{"tokens":${TEAM_BUDGET},"window":"24h"}}],` + CONFIG_FLEET
  : CONFIG_FLEET;
// `--no-ask`: ask_stream_usage off (a stream whose caller did not ask for its usage is not
// asked for it: the unasked sizes' cost of asking is the module's figure with it less without).
const CONFIG_USED = process.argv.includes("--no-ask")
  ? '"ask_stream_usage":false,' + CONFIG_TEAM
  : CONFIG_TEAM;
const CONFIG = {
  downstream: latin1Bytes('{"role":"downstream",' + CONFIG_USED),
  upstream: latin1Bytes('{"role":"upstream",' + CONFIG_USED),
};
const ROOT_UPSTREAM = 1; // context ids as Envoy numbered them (the clusters' filters load first)
const ROOT_DOWNSTREAM = 2;

// bench.py's request bodies: an OpenAI chat request padded to exactly 1 KiB or 50 KiB.
function chatBody(size, stream, unasked) {
  const head = '{"model":"gpt-4o-mini","temperature":0.2,' +
    (unasked ? '"stream":true,' : stream ? '"stream":true,"stream_options":{"include_usage":true},' : "") +
    '"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"';
  const tail = '"}]}';
  return latin1Bytes(head + "x".repeat(size - head.length - tail.length) + tail);
}
const SIZES = { "1KB": 1024, "50KB": 50 * 1024, "1KB-stream": 1024, "50KB-stream": 50 * 1024,
  "1KB-unasked": 1024, "50KB-unasked": 50 * 1024 };

// The downstream request headers as Envoy handed them over (the profile's urllib client, through
// Envoy's HTTP/1 codec, x-forwarded-proto and x-request-id added): 11 pairs, 380 bytes at 1 KB.
const requestHeaders = (len) => [
  [":authority", "127.0.0.1:23462"], [":path", "/v1/chat/completions"], [":method", "POST"],
  [":scheme", "http"], ["accept-encoding", "identity"], ["user-agent", "Python-urllib/3.11"],
  ["content-type", "application/json"], ["content-length", String(len)],
  ["authorization", "Bearer sk-bench"], ["x-forwarded-proto", "http"],
  ["x-request-id", "6f1c2b1e-8d7a-4c55-9a39-0f6e2d4b7c11"],
  ...(TEAM_BUDGET > 0 ? [["x-team", "team-a"]] : []),
];
// `--rate-limit-headers`: every answer also carries OpenAI's six rate-limit headers, with room
// left (the cost of reading them on every answer: docs/configuration.md "Rate limits announced
// in advance").
const RATE_LIMIT_HEADERS = process.argv.includes("--rate-limit-headers") ? [
  ["x-ratelimit-limit-requests", "10000"], ["x-ratelimit-limit-tokens", "30000000"],
  ["x-ratelimit-remaining-requests", "9999"], ["x-ratelimit-remaining-tokens", "29999980"],
  ["x-ratelimit-reset-requests", "6ms"], ["x-ratelimit-reset-tokens", "0s"],
] : [];
// nginx's answer (bench.py's CHAT_COMPLETION): 6 header pairs, 190 bytes; a 255-byte body.
const RESPONSE_HEADERS = [
  [":status", "200"], ["server", "nginx/1.22.1"], ["date", "Tue, 01 Dec 2026 09:58:55 GMT"],
  ["content-type", "application/json"], ["content-length", "255"], ["connection", "keep-alive"],
  ...RATE_LIMIT_HEADERS,
];
const RESPONSE_BODY = latin1Bytes(
  '{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,' +
  '"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant",' +
  '"content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,' +
  '"completion_tokens":1,"total_tokens":11}}');
// The stream case's answer: an OpenAI event stream in three chunks (the text, its end, the usage
// chunk the request asked for and [DONE]).
const STREAM_HEADERS = [
  [":status", "200"], ["server", "nginx/1.22.1"], ["date", "Tue, 01 Dec 2026 09:58:55 GMT"],
  ["content-type", "text/event-stream"], ["connection", "keep-alive"], ...RATE_LIMIT_HEADERS,
];
const STREAM_ID = '{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,' +
  '"model":"gpt-4o-mini",';
const STREAM_CHUNKS = [
  `data: ${STREAM_ID}"choices":[{"index":0,"delta":{"role":"assistant","content":"ok"},` +
    '"finish_reason":null}],"usage":null}\n\n',
  `data: ${STREAM_ID}"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}\n\n`,
  `data: ${STREAM_ID}"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":1,` +
    '"total_tokens":11}}\n\ndata: [DONE]\n\n',
].map(latin1Bytes);
// The same stream as OpenAI sends it to a request that did not ask for its usage (the
// 1KB-unasked and 50KB-unasked answer when the module did not ask for it either): no
// "usage":null, no usage chunk. A module that asked gets STREAM_CHUNKS and must give the
// caller these bytes.
const UNASKED_CHUNKS = [
  `data: ${STREAM_ID}"choices":[{"index":0,"delta":{"role":"assistant","content":"ok"},` +
    '"finish_reason":null}]}\n\n',
  `data: ${STREAM_ID}"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n`,
  "data: [DONE]\n\n",
].map(latin1Bytes);
const LOG_LEVEL = 3; // warn: bench.py runs Envoy with -l warning

// proxy-wasm 0.2.1 enums
const OK = 0, NOT_FOUND = 1, BAD_ARGUMENT = 2, CAS_MISMATCH = 8;
const REQUEST_HEADERS = 0, RESPONSE_HEADERS_MAP = 2;
const REQUEST_BODY = 0, RESPONSE_BODY_BUF = 1, VM_CONFIGURATION = 6, PLUGIN_CONFIGURATION = 7;
const CONTINUE = 0, STOP = 1;

// Header values and names are kept as byte strings (one char per byte, latin1), so that what the
// module wrote is what it reads back, byte for byte, without UTF-8 work on the hot path.
function latin1Bytes(s) {
  const b = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) b[i] = s.charCodeAt(i);
  return b;
}

// A header map: pairs plus their serialized form (proxy-wasm's pairs encoding), cached until the
// map changes, so a fresh copy of a template costs no re-encoding.
class Headers {
  constructor(pairs, bytes = null) { this.pairs = pairs; this.bytes = bytes; }
  static of(pairs) { const h = new Headers(pairs); h.bytes = h.serialize(); return h; }
  copy() { return new Headers(this.pairs.slice(), this.bytes); }
  serialize() {
    if (this.bytes) return this.bytes;
    let size = 4 + 8 * this.pairs.length;
    for (const [k, v] of this.pairs) size += k.length + v.length + 2;
    const b = new Uint8Array(size), dv = new DataView(b.buffer);
    dv.setUint32(0, this.pairs.length, true);
    let o = 4 + 8 * this.pairs.length;
    this.pairs.forEach(([k, v], i) => {
      dv.setUint32(4 + 8 * i, k.length, true);
      dv.setUint32(8 + 8 * i, v.length, true);
      for (let j = 0; j < k.length; j++) b[o++] = k.charCodeAt(j);
      b[o++] = 0;
      for (let j = 0; j < v.length; j++) b[o++] = v.charCodeAt(j);
      b[o++] = 0;
    });
    return (this.bytes = b);
  }
  get(name) {
    for (const p of this.pairs) if (p[0] === name) return p[1];
    return undefined;
  }
  // Envoy's replace: the first pair takes the value, later ones with the name go.
  replace(name, value) {
    const i = this.pairs.findIndex((p) => p[0] === name);
    this.remove(name);
    if (i < 0) this.pairs.push([name, value]); else this.pairs.splice(i, 0, [name, value]);
    this.bytes = null;
  }
  add(name, value) { this.pairs.push([name, value]); this.bytes = null; }
  remove(name) {
    const before = this.pairs.length;
    this.pairs = this.pairs.filter((p) => p[0] !== name);
    if (this.pairs.length !== before) this.bytes = null;
  }
}

// --- the host -----------------------------------------------------------------------------

class Host {
  // trace: an array that collects Envoy-style trace lines (--trace), or null.
  constructor(file, { trace = null, fixedClock = null } = {}) {
    this.file = file;
    this.fixedClock = fixedClock; // ms, or null: the wall clock
    this.shared = new Map(); // key -> [bytes, cas]: Envoy's shared data (per vm_id)
    this.names = new Map(); // address -> the string last read there (see str)
    this.casSeq = 0;
    this.metrics = new Map(); // name -> id
    this.metricValues = new Map(); // id -> value
    this.metricCount = [0, 0, 0];
    this.nextContext = 3;
    this.served = 0; // requests driven to the end
    this.ctx = null; // the context of the callback in progress
    const env = this.hostcalls();
    const wasi = this.wasi();
    if (trace) wrapForTrace(env, trace, "vm->host", "vm<-host", "env.");
    const module = new WebAssembly.Module(readFileSync(file));
    const missing = WebAssembly.Module.imports(module).filter(
      (i) => !(i.module === "env" ? env : i.module === "wasi_snapshot_preview1" ? wasi : {})[i.name]);
    if (missing.length) throw new Error(`${file} imports what this host lacks: ` +
      missing.map((i) => `${i.module}.${i.name}`).join(", "));
    const instance = new WebAssembly.Instance(module, { env, wasi_snapshot_preview1: wasi });
    this.memory = instance.exports.memory;
    this.x = trace ? wrapForTrace({ ...instance.exports }, trace, "host->vm", "host<-vm", "")
      : instance.exports;
    this.x._initialize?.();
    if (GROUP === "least_busy") {
      const busy = new Uint8Array(4);
      new DataView(busy.buffer).setUint32(0, 1000, true);
      this.shared.set("llm_failover.busy.secondary", [busy, ++this.casSeq]);
    }
    this.root(ROOT_UPSTREAM, CONFIG.upstream);
    this.root(ROOT_DOWNSTREAM, CONFIG.downstream);
  }

  root(id, config) {
    this.ctx = { id, config };
    this.x.proxy_on_context_create(id, 0);
    expect(this.x.proxy_on_vm_start(id, 0), 1, "proxy_on_vm_start");
    expect(this.x.proxy_on_configure(id, config.length), 1, "proxy_on_configure");
  }

  // Memory views, replaced when the module's memory grew (growing detaches the old buffer, so a
  // zero length is the cheap sign). Strings go through Buffer's latin1 copy, native and byte-exact.
  u8() {
    if (!this._u8 || this._u8.byteLength === 0) {
      this._u8 = Buffer.from(this.memory.buffer);
      this._raw = new Uint8Array(this.memory.buffer); // its slice() is a plain, cheap copy
      this._dv = new DataView(this.memory.buffer);
    }
    return this._u8;
  }
  dv() { this.u8(); return this._dv; }
  // The module passes the same names (headers, properties, keys) from the same addresses on
  // every request: the last string read at an address is reused while the bytes there still
  // spell it (a compare is much cheaper than a decode: a fifth of the host's time at 1 KB).
  str(ptr, len) {
    const u8 = this.u8(), hit = this.names.get(ptr);
    if (hit !== undefined && hit.length === len) {
      let i = 0;
      while (i < len && u8[ptr + i] === hit.charCodeAt(i)) i++;
      if (i === len) return hit;
    }
    const s = u8.latin1Slice(ptr, ptr + len);
    if (len <= 64) {
      if (this.names.size >= 4096) this.names.clear();
      this.names.set(ptr, s);
    }
    return s;
  }
  bytes(ptr, len) { this.u8(); return this._raw.slice(ptr, ptr + len); }
  // Hands bytes to the module the proxy-wasm way: memory from proxy_on_memory_allocate, its
  // address and size written where the module asked.
  give(bytes, ptrPtr, sizePtr) {
    const p = this.x.proxy_on_memory_allocate(bytes.length);
    this.u8().set(bytes, p);
    this._dv.setUint32(ptrPtr, p, true);
    this._dv.setUint32(sizePtr, bytes.length, true);
    return OK;
  }
  giveStr(s, ptrPtr, sizePtr) {
    const p = this.x.proxy_on_memory_allocate(s.length);
    this.u8().latin1Write(s, p);
    this._dv.setUint32(ptrPtr, p, true);
    this._dv.setUint32(sizePtr, s.length, true);
    return OK;
  }
  headers(type) {
    if (type === REQUEST_HEADERS) return this.ctx.request;
    if (type === RESPONSE_HEADERS_MAP) return this.ctx.req.response;
    throw new Error(`header map type ${type} is not on the success path`);
  }

  hostcalls() {
    const h = this;
    const unimplemented = (name) => () => {
      throw new Error(`hostcall ${name} is not implemented by this host (not on the success path)`);
    };
    const env = {
      proxy_log(level, ptr, len) {
        // None on the success path at warn; shown, since it tells why a run went astray.
        if (level >= LOG_LEVEL) process.stderr.write(`[module log ${level}] ${h.str(ptr, len)}\n`);
        return OK;
      },
      proxy_get_log_level(ret) { h.dv().setUint32(ret, LOG_LEVEL, true); return OK; },
      proxy_get_current_time_nanoseconds(ret) {
        // Wall-clock ns, as Envoy gives; two u32 halves avoid a BigInt per call. A fixed clock
        // when counting instructions: the attempt log's "0ms" must not become "1ms" under valgrind.
        const ns = (h.fixedClock ?? Date.now()) * 1e6, hi = Math.floor(ns / 4294967296);
        const dv = h.dv();
        dv.setUint32(ret, (ns - hi * 4294967296) >>> 0, true);
        dv.setUint32(ret + 4, hi, true);
        return OK;
      },
      proxy_set_tick_period_milliseconds(ms) { h.tickMs = ms; return OK; },
      proxy_get_buffer_bytes(type, start, max, ptrPtr, sizePtr) {
        const buf = type === PLUGIN_CONFIGURATION ? h.ctx.config
          : type === VM_CONFIGURATION ? new Uint8Array(0)
            : type === REQUEST_BODY ? h.ctx.body
              : type === RESPONSE_BODY_BUF ? h.ctx.req.responseBody : null;
        if (!buf) throw new Error(`buffer type ${type} is not on the success path`);
        if (start > buf.length) return BAD_ARGUMENT;
        const end = Math.min(buf.length, start + (max >>> 0)); // i32 arguments arrive signed
        if (end <= start) return NOT_FOUND; // Envoy: nothing to copy
        return h.give(buf.subarray(start, end), ptrPtr, sizePtr);
      },
      proxy_set_buffer_bytes(type, start, len, ptr, size) {
        // Envoy: replace [start, start+len); at or past the end, append.
        if (type === RESPONSE_BODY_BUF) { // a stream chunk rewritten (the unasked usage out)
          const old = h.ctx.req.responseBody, data = h.bytes(ptr, size);
          const s = Math.min(start, old.length), e = Math.min(old.length, start + len);
          const b = new Uint8Array(s + data.length + old.length - e);
          b.set(old.subarray(0, s)); b.set(data, s); b.set(old.subarray(e), s + data.length);
          h.ctx.req.responseBody = b;
          h.ctx.req.chunkWrites++;
          return OK;
        }
        const key = type === REQUEST_BODY ? "body" : null;
        if (!key) throw new Error(`set_buffer_bytes on buffer type ${type}`);
        const old = h.ctx.body, data = h.bytes(ptr, size);
        const s = Math.min(start, old.length), e = Math.min(old.length, start + len);
        const b = new Uint8Array(s + data.length + old.length - e);
        b.set(old.subarray(0, s)); b.set(data, s); b.set(old.subarray(e), s + data.length);
        h.ctx.body = b;
        h.ctx.req.bodyWrites++;
        return OK;
      },
      proxy_get_header_map_pairs(type, ptrPtr, sizePtr) {
        return h.give(h.headers(type).serialize(), ptrPtr, sizePtr);
      },
      proxy_set_header_map_pairs: unimplemented("proxy_set_header_map_pairs"),
      proxy_get_header_map_value(type, kp, kl, ptrPtr, sizePtr) {
        const v = h.headers(type).get(h.str(kp, kl));
        return v === undefined ? NOT_FOUND : h.giveStr(v, ptrPtr, sizePtr);
      },
      proxy_replace_header_map_value(type, kp, kl, vp, vl) {
        h.headers(type).replace(h.str(kp, kl), h.str(vp, vl));
        return OK;
      },
      proxy_add_header_map_value(type, kp, kl, vp, vl) {
        h.headers(type).add(h.str(kp, kl), h.str(vp, vl));
        return OK;
      },
      proxy_remove_header_map_value(type, kp, kl) {
        h.headers(type).remove(h.str(kp, kl));
        return OK;
      },
      proxy_get_property(pp, pl, ptrPtr, sizePtr) {
        const name = h.str(pp, pl);
        const req = h.ctx.req;
        // Attributes Envoy computes; anything else is filter state the filters set ("wasm.").
        if (name === "xds\0cluster_name" && h.ctx.role === "upstream") {
          return h.giveStr(req.cluster, ptrPtr, sizePtr);
        }
        if (name === "upstream\0request_attempt_count") {
          const b = new Uint8Array(8);
          new DataView(b.buffer).setUint32(0, req.attempts, true);
          return h.give(b, ptrPtr, sizePtr);
        }
        const v = req.properties.get(name);
        return v === undefined ? NOT_FOUND : h.give(v, ptrPtr, sizePtr);
      },
      proxy_set_property(pp, pl, vp, vl) {
        h.ctx.req.properties.set(h.str(pp, pl), h.bytes(vp, vl));
        return OK;
      },
      proxy_get_shared_data(kp, kl, ptrPtr, sizePtr, casPtr) {
        const e = h.shared.get(h.str(kp, kl));
        if (!e) return NOT_FOUND;
        h.give(e[0], ptrPtr, sizePtr);
        h.dv().setUint32(casPtr, e[1], true);
        return OK;
      },
      proxy_set_shared_data(kp, kl, vp, vl, cas) {
        // Envoy's semantics: cas 0 writes unconditionally; else it must be the current token.
        const key = h.str(kp, kl), e = h.shared.get(key);
        if (e && cas !== 0 && cas !== e[1]) return CAS_MISMATCH;
        h.shared.set(key, [h.bytes(vp, vl), ++h.casSeq]);
        return OK;
      },
      proxy_define_metric(type, np, nl, ret) {
        if (type > 2) return BAD_ARGUMENT;
        const name = h.str(np, nl);
        let id = h.metrics.get(name);
        if (id === undefined) {
          id = (++h.metricCount[type] << 2) | type; // Envoy's ids: index per type, type in 2 bits
          h.metrics.set(name, id);
          h.metricValues.set(id, 0);
        }
        h.dv().setUint32(ret, id, true);
        return OK;
      },
      proxy_increment_metric(id, delta) {
        const v = h.metricValues.get(id);
        if (v === undefined) return NOT_FOUND;
        h.metricValues.set(id, v + Number(delta));
        return OK;
      },
      proxy_record_metric(id, value) {
        if (!h.metricValues.has(id)) return NOT_FOUND;
        h.metricValues.set(id, Number(value));
        return OK;
      },
      proxy_call_foreign_function(np, nl, ap, al, ptrPtr, sizePtr) {
        const name = h.str(np, nl);
        if (name !== "clear_route_cache") throw new Error(`foreign function ${name}`);
        h.ctx.req.routeCleared++;
        return OK; // no result: Envoy writes nothing back
      },
      proxy_send_local_response(status, dp, dl, bp, bl, hp, hl, grpc) {
        h.ctx.req.localReply = `${status} ${h.str(bp, Math.min(bl, 200))}`;
        return OK;
      },
      proxy_continue_stream(type) { h.ctx.req.resumes++; return OK; },
    };
    for (const name of [
      "proxy_close_stream", "proxy_get_status", "proxy_grpc_cancel", "proxy_grpc_stream",
      "proxy_grpc_close", "proxy_grpc_call", "proxy_grpc_send", "proxy_http_call",
      "proxy_dequeue_shared_queue", "proxy_enqueue_shared_queue", "proxy_resolve_shared_queue",
      "proxy_register_shared_queue", "proxy_set_effective_context", "proxy_done",
    ]) env[name] = unimplemented(name);
    return env;
  }

  wasi() {
    const h = this;
    return {
      environ_sizes_get(countPtr, sizePtr) {
        h.dv().setUint32(countPtr, 0, true); h._dv.setUint32(sizePtr, 0, true); return 0;
      },
      environ_get() { return 0; },
      fd_write(fd, iovs, n, retPtr) {
        // A panic message or the like: show it (this is never on the success path).
        const dv = h.dv();
        let text = "", total = 0;
        for (let i = 0; i < n; i++) {
          const p = dv.getUint32(iovs + 8 * i, true), l = dv.getUint32(iovs + 8 * i + 4, true);
          text += h.str(p, l); total += l;
        }
        process.stderr.write(`[module fd ${fd}] ${text}`);
        dv.setUint32(retPtr, total, true);
        return 0;
      },
      proc_exit(code) { throw new Error(`module called proc_exit(${code})`); },
    };
  }

  // One request down the success path, callback by callback as Envoy's trace shows them, with
  // the return values Envoy saw. Throws on any deviation.
  request(body) {
    const x = this.x;
    const req = {
      properties: new Map(), cluster: null, attempts: 0, response: null, responseBody: null,
      localReply: null, routeCleared: 0, resumes: 0, bodyWrites: 0, upstreamRequest: null,
      chunkWrites: 0, upstreamBody: null, delivered: [],
    };
    const down = { id: this.nextContext++, role: "downstream", req, body: null,
      request: body.headers.copy() };
    // Downstream filter: headers (it pauses), the body in one piece, then its end.
    this.ctx = down;
    x.proxy_on_context_create(down.id, ROOT_DOWNSTREAM);
    expect(x.proxy_on_request_headers(down.id, down.request.pairs.length, 0), STOP, "downstream request headers");
    down.body = body.bytes;
    expect(x.proxy_on_request_body(down.id, body.bytes.length, 0), STOP, "downstream request body");
    expect(x.proxy_on_request_body(down.id, down.body.length, 1), CONTINUE, "downstream request body end");
    // The router: the route (re-resolved after clear_route_cache) maps slot 1 to a cluster; the
    // upstream request is the downstream one as the filter left it, less x-envoy-max-retries
    // (consumed by the router), plus x-envoy-attempt-count (include_request_attempt_count).
    const slot = req.properties.get("llm_failover.try1");
    if (!slot) throw new Error("no llm_failover.try1 property: the router has no cluster");
    req.cluster = String.fromCharCode(...slot);
    req.attempts = 1;
    const upHeaders = new Headers(down.request.pairs.filter((p) => p[0] !== "x-envoy-max-retries"));
    upHeaders.add("x-envoy-attempt-count", "1");
    const up = { id: this.nextContext++, role: "upstream", req, body: down.body, request: upHeaders };
    this.ctx = up;
    x.proxy_on_context_create(up.id, ROOT_UPSTREAM);
    // (A module that asks a stream's usage for its caller edits the body: it waits for it.)
    const upHead = x.proxy_on_request_headers(up.id, upHeaders.pairs.length, 0);
    if (!(body.unasked && upHead === STOP)) expect(upHead, CONTINUE, "upstream request headers");
    expect(x.proxy_on_request_body(up.id, up.body.length, 1), CONTINUE, "upstream request body");
    req.upstreamRequest = up.request;
    req.upstreamBody = up.body;
    if (body.stream) return this.streamAnswer(req, up, down, body);
    // The answer: headers through the upstream filter, then the downstream one (one map).
    req.response = RESPONSE.copy();
    req.responseBody = RESPONSE_BODY;
    expect(x.proxy_on_response_headers(up.id, req.response.pairs.length, 0), CONTINUE, "upstream response headers");
    this.ctx = down;
    expect(x.proxy_on_response_headers(down.id, req.response.pairs.length, 0), CONTINUE, "downstream response headers");
    this.ctx = up;
    expect(x.proxy_on_response_body(up.id, RESPONSE_BODY.length, 0), CONTINUE, "upstream response body");
    this.ctx = down;
    expect(x.proxy_on_response_body(down.id, RESPONSE_BODY.length, 0), CONTINUE, "downstream response body");
    this.ctx = up;
    expect(x.proxy_on_response_body(up.id, 0, 1), CONTINUE, "upstream response end");
    expect(x.proxy_on_done(up.id), 1, "upstream done");
    x.proxy_on_delete(up.id);
    this.ctx = down;
    expect(x.proxy_on_response_body(down.id, 0, 1), CONTINUE, "downstream response end");
    x.proxy_on_log(down.id);
    expect(x.proxy_on_done(down.id), 1, "downstream done");
    x.proxy_on_delete(down.id);
    this.ctx = null;
    this.served++;
    return req;
  }
}

// The stream case's answer: the upstream role holds the headers until the first event is read
// (its first body chunk), then every chunk passes both roles.
Host.prototype.streamAnswer = function (req, up, down, body) {
  const x = this.x;
  req.response = STREAM_RESPONSE.copy();
  expect(x.proxy_on_response_headers(up.id, req.response.pairs.length, 0), STOP, "upstream response headers (held)");
  // The provider streams the usage when the request it got asks for it (as OpenAI does).
  const chunks = !body.unasked || asksUsage(req.upstreamBody) ? STREAM_CHUNKS : UNASKED_CHUNKS;
  chunks.forEach((chunk, i) => {
    req.responseBody = chunk;
    this.ctx = up;
    expect(x.proxy_on_response_body(up.id, chunk.length, 0), CONTINUE, `upstream response body ${i}`);
    this.ctx = down;
    if (i === 0) expect(x.proxy_on_response_headers(down.id, req.response.pairs.length, 0), CONTINUE, "downstream response headers");
    // What the upstream filter left of the chunk goes on (Envoy's filter chain).
    expect(x.proxy_on_response_body(down.id, req.responseBody.length, 0), CONTINUE, `downstream response body ${i}`);
    if (body.unasked) req.delivered.push(req.responseBody);
  });
  req.responseBody = new Uint8Array(0);
  this.ctx = up;
  expect(x.proxy_on_response_body(up.id, 0, 1), CONTINUE, "upstream response end");
  expect(x.proxy_on_done(up.id), 1, "upstream done");
  x.proxy_on_delete(up.id);
  this.ctx = down;
  expect(x.proxy_on_response_body(down.id, 0, 1), CONTINUE, "downstream response end");
  x.proxy_on_log(down.id);
  expect(x.proxy_on_done(down.id), 1, "downstream done");
  x.proxy_on_delete(down.id);
  this.ctx = null;
  this.served++;
  return req;
};

const RESPONSE = Headers.of(RESPONSE_HEADERS);
const ASK = latin1Bytes('"include_usage":true');
// The whole body is searched, wherever the ask is (at its start, its end or nowhere), so that
// this host's own work is the same for every module: B-A stays the module's figure.
function asksUsage(body) {
  let found = false;
  outer: for (let i = 0; i + ASK.length <= body.length; i++) {
    for (let j = 0; j < ASK.length; j++) if (body[i + j] !== ASK[j]) continue outer;
    found = true;
  }
  return found;
}
const UNASKED_TEXT = UNASKED_CHUNKS.map((c) => String.fromCharCode(...c)).join("");
const STREAM_RESPONSE = Headers.of(STREAM_HEADERS);

function expect(got, want, what) {
  if (got !== want) throw new Error(`${what}: the module returned ${got}, Envoy saw ${want}`);
}

// Did the module take the success path, doing what Envoy saw it do? (Cheap: run per request.)
function checkSuccess(req, body) {
  const problems = [];
  const resp = req.response;
  if (req.localReply) problems.push(`a local reply was sent: ${req.localReply}`);
  if (req.cluster !== "primary") problems.push(`slot 1 is ${req.cluster}, not primary`);
  if (req.routeCleared !== 1) problems.push(`clear_route_cache called ${req.routeCleared} times`);
  // (A stream whose caller did not ask for its usage may be asked for it: one body edit, its
  // chunks rewritten, and the caller must get exactly the stream it would have got.)
  if (req.resumes || (req.bodyWrites && !body.unasked)) problems.push("a resume or a body rewrite (not in the trace)");
  if (body.unasked) {
    const got = req.delivered.map((c) => String.fromCharCode(...c)).join("");
    if (got !== UNASKED_TEXT) problems.push(`the caller got ${JSON.stringify(got)}`);
  }
  if (req.upstreamRequest.get("authorization") !== "Bearer sk-primary") {
    problems.push(`upstream authorization ${req.upstreamRequest.get("authorization")}`);
  }
  if (req.upstreamRequest.get("x-envoy-max-retries") !== undefined) problems.push("x-envoy-max-retries sent upstream");
  if (resp.get("x-llm-provider") !== "primary") problems.push(`x-llm-provider ${resp.get("x-llm-provider")}`);
  if (resp.get("x-llm-attempts") !== "1") problems.push(`x-llm-attempts ${resp.get("x-llm-attempts")}`);
  if (!req.properties.has("llm_failover.attempts")) problems.push("no attempt log property");
  if (problems.length) {
    throw new Error(`not the success path (${body.name}): ${problems.join("; ")}`);
  }
}

// Every request the module saw must be counted once, as primary's successful attempt.
function checkCounters(host) {
  const ok = host.metrics.get("llm_failover_attempts_total.provider=primary.outcome=ok");
  const counted = host.metricValues.get(ok);
  if (counted !== host.served) {
    throw new Error(`${host.file}: ${counted} successful attempts counted for ${host.served} requests`);
  }
}

// Trace mode: every call across the boundary logged as Envoy's wasm trace logs it.
function wrapForTrace(obj, out, call, ret, prefix) {
  for (const [name, f] of Object.entries(obj)) {
    if (typeof f !== "function" || name === "_initialize") continue;
    obj[name] = (...args) => {
      out.push(`[${call}] ${prefix}${name}(${args.map((a) => (typeof a === "number" ? a >>> 0 : a)).join(", ")})`);
      const r = f(...args);
      out.push(`[${ret}] ${prefix}${name} return: ${r === undefined ? "void" : r}`);
      return r;
    };
  }
  return obj;
}

// Addresses differ between any two hosts; sizes, ids, statuses and the order must not.
const normalize = (line) => line.replace(/\b\d{5,}\b/g, (n) => (Number(n) >= 65536 ? "*" : n));

function traceCheck(file, envoyLog) {
  const lines = readFileSync(envoyLog, "utf8").split("\n")
    .map((l) => l.match(/\[(?:host|vm)[-<>]+(?:vm|host)\] .*$/)?.[0]).filter(Boolean);
  // Envoy's first two requests: from stream context 3's creation to context 5's deletion.
  const start = lines.findIndex((l) => /proxy_on_context_create\(3, /.test(l));
  const endAt = lines.indexOf("[host->vm] proxy_on_delete(5)");
  if (start < 0 || endAt < 0) throw new Error(`${envoyLog}: no two requests found`);
  const want = lines.slice(start, endAt + 2).map(normalize);
  // The body Envoy's trace was taken with (BENCH_PROFILE_BODY): its size is in the trace.
  const size = Number(want.join("\n").match(/proxy_on_request_body\(3, (\d+), 0\)/)?.[1]);
  const body = makeBody(Object.keys(SIZES).find((k) => SIZES[k] === size) ?? "1KB");
  const out = [];
  try {
    const host = new Host(file, { trace: out });
    out.length = 0;
    for (let i = 0; i < 2; i++) checkSuccess(host.request(body), body);
  } catch (e) {
    console.error(`trace: this host's last calls before it failed:\n  ${out.slice(-30).join("\n  ")}`);
    throw e;
  }
  const got = out.map(normalize);
  const n = Math.max(want.length, got.length);
  for (let i = 0; i < n; i++) {
    if (want[i] !== got[i]) {
      console.error(`trace: line ${i + 1} differs\n  envoy: ${want[i]}\n  here:  ${got[i]}`);
      console.error("context (here):\n  " + got.slice(Math.max(0, i - 6), i + 3).join("\n  "));
      return false;
    }
  }
  console.log(`trace: ${got.length} lines (two requests, ${body.name}) match Envoy's ${envoyLog}`);
  return true;
}

// --- measuring ----------------------------------------------------------------------------

function parseArgs(argv) {
  const o = { a: path.join(ROOT, "dist", "llm_failover.wasm"), b: null, requests: 100000,
    warmup: 20000, runs: 5, chunks: 20, maxSeconds: 60, sizes: ["1KB", "50KB"], trace: null, verbose: false };
  const rest = [...argv];
  while (rest.length) {
    const a = rest.shift();
    const val = () => { if (!rest.length) throw new Error(`${a} needs a value`); return rest.shift(); };
    if (a === "--compare") o.b = val();
    else if (a === "--requests") o.requests = Number(val());
    else if (a === "--warmup") o.warmup = Number(val());
    else if (a === "--runs") o.runs = Number(val());
    else if (a === "--chunks") o.chunks = Number(val());
    else if (a === "--max-seconds") o.maxSeconds = Number(val());
    else if (a === "--sizes") o.sizes = val().split(",");
    else if (a === "--trace") o.trace = val();
    else if (a === "--verbose") o.verbose = true;
    else if (a === "--just") o.just = Number(val());
    else if (a === "--budget") o.budget = val(); // read at load (BUDGET)
    else if (a === "--team-budget") o.teamBudget = val(); // read at load (TEAM_BUDGET)
    else if (a === "--no-ask") o.noAsk = true; // read at load (CONFIG_USED)
    else if (a === "--fleet") o.fleet = true; // read at load (CONFIG_FLEET)
    else if (a === "--rate-limit-headers") o.rateLimitHeaders = true; // read at load
    else if (a === "--group") o.group = val(); // read at load (GROUP)
    else if (a === "--instructions") { // optionally followed by N1,N2
      o.instructions = /^\d+,\d+$/.test(rest[0] ?? "") ? rest.shift().split(",").map(Number) : [];
    }
    else if (a === "-h" || a === "--help") {
      console.log(readFileSync(fileURLToPath(import.meta.url), "utf8").split("\n").slice(1, 23)
        .map((l) => l.replace(/^\/\/ ?/, "")).join("\n"));
      process.exit(0);
    } else if (a.startsWith("--")) throw new Error(`unknown option ${a}`);
    else o.a = a;
  }
  for (const s of o.sizes) if (!SIZES[s]) throw new Error(`unknown size ${s} (${Object.keys(SIZES).join(", ")})`);
  return o;
}

function makeBody(name) {
  const unasked = name.endsWith("-unasked"), stream = unasked || name.endsWith("-stream");
  const bytes = chatBody(SIZES[name], stream, unasked);
  return { name, stream, unasked, bytes, headers: Headers.of(requestHeaders(bytes.length)) };
}

// Instructions per request, from valgrind (deterministic to about 0.03 %, whatever else the
// machine runs): the whole process counted twice, after n1 and after n2 requests (warm-up, JIT
// and lazy compilation included in both), so the difference is n2 - n1 steady requests. V8's
// --predictable keeps its threads and seeds from varying between the two.
function instructions(file, size, n1, n2) {
  const count = (n) => {
    const r = spawnSync("valgrind", ["--tool=cachegrind", "--cache-sim=no",
      "--cachegrind-out-file=/dev/null", process.execPath, "--predictable",
      fileURLToPath(import.meta.url), file, "--sizes", size, "--just", String(n),
      ...(BUDGET > 0 ? ["--budget", String(BUDGET)] : []),
      ...(TEAM_BUDGET > 0 ? ["--team-budget", String(TEAM_BUDGET)] : []),
      ...(process.argv.includes("--no-ask") ? ["--no-ask"] : []),
      ...(FLEET ? ["--fleet"] : []),
      ...(RATE_LIMIT_HEADERS.length ? ["--rate-limit-headers"] : []),
      ...(GROUP ? ["--group", GROUP] : [])],
    { encoding: "utf8", maxBuffer: 1 << 26 });
    const m = r.stderr?.match(/I\s+refs:\s+([\d,]+)/);
    if (r.status !== 0 || !m) throw new Error(`valgrind (${file}, ${n}): ${r.error || r.stderr?.slice(-2000)}`);
    return Number(m[1].replaceAll(",", ""));
  };
  return (count(n2) - count(n1)) / (n2 - n1);
}

function countAll(o, files) {
  const [n1, n2] = o.instructions.length === 2 ? o.instructions : [2000, 6000];
  console.log(`module_bench: instructions per request (valgrind, requests ${n1} to ${n2}; ` +
    "host and module together)");
  files.forEach((f, i) => console.log(`  ${"AB"[i]}: ${f}`));
  console.log(`\n| body | ${files.map((_, i) => `${"AB"[i]} instructions/request`).join(" | ")} |` +
    (files.length > 1 ? " B-A | B/A |" : "") + `\n|---|${files.map(() => "---:|").join("")}` +
    (files.length > 1 ? "---:|---:|" : ""));
  for (const size of o.sizes) {
    const ir = files.map((f) => instructions(f, size, n1, n2));
    console.log(`| ${size} | ${ir.map((v) => Math.round(v).toLocaleString("en")).join(" | ")} |` +
      (ir.length > 1 ? ` ${Math.round(ir[1] - ir[0]).toLocaleString("en")} | ${(ir[1] / ir[0]).toFixed(4)} |` : ""));
  }
}

// n requests (or fewer when maxMs of wall time runs out): CPU ns per request (this process's
// user + system time: time the machine's other loads take from us is not counted, which wall
// time would). Each request is checked.
function measure(host, body, n, maxMs) {
  const t0 = process.hrtime.bigint(), limit = t0 + BigInt(Math.round(maxMs * 1e6));
  const c0 = process.cpuUsage();
  let done = 0;
  while (done < n) {
    checkSuccess(host.request(body), body);
    if ((++done & 1023) === 0 && process.hrtime.bigint() > limit) break;
  }
  const c = process.cpuUsage(c0);
  return { ns: (c.user + c.system) * 1000 / done, done };
}

const median = (xs) => { const s = [...xs].sort((p, q) => p - q), m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const pct = (x) => `${x >= 0 ? "+" : ""}${(100 * x).toFixed(2)} %`;

function main() {
  const o = parseArgs(process.argv.slice(2));
  if (o.trace) process.exit(traceCheck(o.a, o.trace) ? 0 : 1);
  if (o.just !== undefined) { // instruction counting (under valgrind): requests, no timing
    const host = new Host(o.a, { fixedClock: 1764583135000 }), body = makeBody(o.sizes[0]);
    for (let i = 0; i < o.just; i++) checkSuccess(host.request(body), body);
    return checkCounters(host);
  }
  const files = o.b ? [o.a, o.b] : [o.a];
  if (o.instructions) return countAll(o, files);
  const hosts = files.map((f) => new Host(f));
  const started = Date.now();
  console.log(`module_bench: node ${process.version}, TurboFan only; ${o.runs} runs x ` +
    `${o.requests} requests per cell after ${o.warmup} warm-up requests`);
  files.forEach((f, i) => console.log(`  ${"AB"[i]}: ${f}`));
  const rows = [];
  for (const size of o.sizes) {
    const body = makeBody(size);
    for (const h of hosts) measure(h, body, o.warmup, o.maxSeconds * 1000);
    const ns = hosts.map(() => []), ratios = [];
    let short = 0;
    for (let r = 0; r < o.runs; r++) {
      // A run is `chunks` slices per module, interleaved A B B A A B ..., so drift in the
      // machine's speed weighs on both alike; a module's figure for the run is its fastest
      // slice: the machine's other loads (2 shared cores) only ever add time.
      const per = Math.max(1, Math.floor(o.requests / o.chunks)), best = hosts.map(() => Infinity);
      const deadline = Date.now() + o.maxSeconds * 1000;
      let done = 0;
      for (let c = 0; c < o.chunks && Date.now() < deadline; c++) {
        const order = c % 2 === 0 ? hosts.map((_, i) => i) : hosts.map((_, i) => i).reverse();
        for (const i of order) best[i] = Math.min(best[i], measure(hosts[i], body, per, o.maxSeconds * 1000).ns);
        done += per;
      }
      short = Math.max(short, o.requests - done);
      best.forEach((v, i) => ns[i].push(v));
      if (o.b) ratios.push(best[1] / best[0]);
      if (o.verbose) console.log(`  ${size} run ${r + 1}: ` + best.map((v, i) => `${"AB"[i]} ${v.toFixed(0)} ns`).join(", "));
    }
    if (short) console.log(`  (${size}: some runs stopped at ${o.maxSeconds} s, ${short} requests short)`);
    rows.push({ size, ns, ratios });
  }
  // Every host's counters must show every request counted as a success attempt.
  console.log("\n| module | body | ns/request (median) | min | max | spread (max-min)/median |\n|---|---|---:|---:|---:|---:|");
  for (const { size, ns } of rows) {
    ns.forEach((xs, i) => {
      const m = median(xs), lo = Math.min(...xs), hi = Math.max(...xs);
      console.log(`| ${"AB"[i]} | ${size} | ${m.toFixed(0)} | ${lo.toFixed(0)} | ${hi.toFixed(0)} | ${((hi - lo) / m * 100).toFixed(2)} % |`);
    });
  }
  if (o.b) {
    console.log("\n| body | B/A (median of runs) | min | max | per run |\n|---|---:|---:|---:|---|");
    for (const { size, ratios } of rows) {
      console.log(`| ${size} | ${median(ratios).toFixed(4)} (${pct(median(ratios) - 1)}) | ` +
        `${Math.min(...ratios).toFixed(4)} | ${Math.max(...ratios).toFixed(4)} | ` +
        `${ratios.map((r) => r.toFixed(4)).join(" ")} |`);
    }
  }
  hosts.forEach(checkCounters);
  if (o.verbose) hosts.forEach((h) => console.log(`${h.file}: memory ${h.memory.buffer.byteLength} bytes`));
  console.log(`\n(${((Date.now() - started) / 1000).toFixed(1)} s)`);
}

try {
  main();
} catch (e) {
  console.error(`module_bench: ${e.stack || e}`);
  process.exit(1);
}
