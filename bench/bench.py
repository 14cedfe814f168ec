#!/usr/bin/env python3
"""Benchmark: Envoy plain route vs Envoy + llm-failover (success and failover paths), plus
config-only experiments and an optional LiteLLM peer. Started by scripts/bench.sh, which
installs nginx/wrk, builds the module and picks a Python with PyYAML; see BENCHMARKS.md.

Everything listens on 127.0.0.1 (ports from $BENCH_PORT_BASE, default 19400). Every load run is
bounded in time (wrk -d, plus a hard timeout) and in count ($BENCH_MAX_REQUESTS per run).
Processes started here are stopped by their own pid (or own process group) on exit.
"""

import argparse
import atexit
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".work" / "bench"
RUN = WORK / "run"
LUA = ROOT / "bench" / "post.lua"
MODULE = ROOT / "dist" / "llm_failover.wasm"
# The native build (docs/native.md): the same filter as an Envoy dynamic module.
NATIVE_MODULE = ROOT / "dist" / "libllm_failover.so"
CLI = ROOT / "target" / "release" / "llm-failover"
DEMO = ROOT / "envoy" / "demo.failover.yaml"
CALIB_SRC = ROOT / "bench" / "calib" / "calib.rs"
CALIB = WORK / "calib.wasm"

PORT_BASE = int(os.environ.get("BENCH_PORT_BASE", "19400"))
NGINX_OK = PORT_BASE + 1
NGINX_FAIL = PORT_BASE + 2
LITELLM_PORT = PORT_BASE + 3
NGINX_OK_H2 = PORT_BASE + 4    # the same answers over HTTP/2 (h2c, prior knowledge)
NGINX_FAIL_H2 = PORT_BASE + 5
NGINX_SSE = PORT_BASE + 6      # a healthy SSE answer (first event, more events, [DONE])
NGINX_MSG = PORT_BASE + 7      # an Anthropic Messages provider: a message (JSON)
NGINX_MSG_SSE = PORT_BASE + 8  # ... and a Messages event stream
NGINX_GEM = PORT_BASE + 9      # a Gemini native provider: generateContent JSON, and its stream
# An OpenAI Responses provider: JSON and its event stream (one path, so two ports; below the
# base because the targets take the ports from PORT_BASE + 10 up).
NGINX_RESP = PORT_BASE - 2
NGINX_RESP_SSE = PORT_BASE - 1
NGINX_CONV = PORT_BASE - 3     # a Bedrock Converse provider: JSON on /converse, its AWS event
                               # stream on /converse-stream
                               # on :streamGenerateContent (the path says which)
MAX_REQUESTS = int(os.environ.get("BENCH_MAX_REQUESTS", "2000000"))
CONCURRENCY = 2  # Envoy --concurrency
CLK_TCK = os.sysconf("SC_CLK_TCK")
PATH = "/v1/chat/completions"
# Breaker: 1000 failures (the config's maximum) inside 2 ms can never happen at these rates, so
# the breaker never opens and every failover-path request really tries the primary first. The
# short window also keeps the shared health record small (old failure timestamps are pruned),
# as it is in production where the record never holds more than `failures` timestamps.
BREAKER_ENV = {"BREAKER_FAILURES": "1000", "BREAKER_WINDOW": "2ms"}

CHAT_COMPLETION = (
    '{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,'
    '"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant",'
    '"content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,'
    '"completion_tokens":1,"total_tokens":11}}'
)
OVERLOADED = '{"error":{"message":"overloaded (benchmark)","type":"server_error"}}'
# A healthy chat.completion stream as a provider sends it (nginx config string: \n is a newline).
SSE_EVENT = ('data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,'
             '"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant",'
             '"content":"ok"},"finish_reason":null}]}')
SSE_STREAM = SSE_EVENT + "\\n\\n" + SSE_EVENT + "\\n\\ndata: [DONE]\\n\\n"
# The same answers from an Anthropic Messages provider (the cross-vendor rows translate them).
MESSAGE = ('{"id":"msg_bench","type":"message","role":"assistant","model":"claude-bench",'
           '"content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn",'
           '"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}')
MSG_SSE_STREAM = "\\n\\n".join([
    'event: message_start\\ndata: {"type":"message_start","message":{"id":"msg_bench",'
    '"type":"message","role":"assistant","model":"claude-bench","content":[],'
    '"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":0}}}',
    'event: content_block_start\\ndata: {"type":"content_block_start","index":0,'
    '"content_block":{"type":"text","text":""}}',
    'event: content_block_delta\\ndata: {"type":"content_block_delta","index":0,'
    '"delta":{"type":"text_delta","text":"ok"}}',
    'event: content_block_delta\\ndata: {"type":"content_block_delta","index":0,'
    '"delta":{"type":"text_delta","text":"ok"}}',
    'event: content_block_stop\\ndata: {"type":"content_block_stop","index":0}',
    'event: message_delta\\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn",'
    '"stop_sequence":null},"usage":{"output_tokens":2}}',
    'event: message_stop\\ndata: {"type":"message_stop"}']) + "\\n\\n"

# The same answers from a Gemini native provider (generateContent, and its stream of
# GenerateContentResponse chunks: no end marker, the last chunk carries finishReason and usage).
GEMINI_ANSWER = ('{"candidates":[{"content":{"parts":[{"text":"ok"}],"role":"model"},'
                 '"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":10,'
                 '"candidatesTokenCount":1,"totalTokenCount":11},"modelVersion":"gemini-bench"}')
GEMINI_SSE_STREAM = (
    'data: {"candidates":[{"content":{"parts":[{"text":"ok"}],"role":"model"},"index":0}],'
    '"modelVersion":"gemini-bench"}\\n\\n'
    'data: {"candidates":[{"content":{"parts":[{"text":"ok"}],"role":"model"},'
    '"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":10,'
    '"candidatesTokenCount":2,"totalTokenCount":12},"modelVersion":"gemini-bench"}\\n\\n')

# The same answers from a Bedrock Converse provider (JSON, and its stream of AWS event-stream
# messages: messageStart, two text deltas, contentBlockStop, messageStop, metadata).
CONVERSE_ANSWER = ('{"output":{"message":{"role":"assistant","content":[{"text":"ok"}]}},'
                   '"stopReason":"end_turn","usage":{"inputTokens":10,"outputTokens":1,'
                   '"totalTokens":11},"metrics":{"latencyMs":1}}')


def _aws_frame(event, payload):
    """One event-stream message whose bytes nginx's quoted `return` text carries as they are:
    its padding member ("p", as AWS pads) is chosen so that no length or CRC byte is one nginx
    reads in a quoted string (quote, backslash, dollar; NUL bytes pass)."""
    import struct
    import zlib
    headers = b"".join(bytes([len(k)]) + k + b"\x07" + struct.pack(">H", len(v)) + v
                       for k, v in ((b":event-type", event.encode()),
                                    (b":content-type", b"application/json"),
                                    (b":message-type", b"event")))
    for pad in range(1, 200):
        body = payload[:-1] + b',"p":"' + b"x" * pad + b'"}'
        prelude = struct.pack(">II", 16 + len(headers) + len(body), len(headers))
        prelude += struct.pack(">I", zlib.crc32(prelude))
        msg = prelude + headers + body
        msg += struct.pack(">I", zlib.crc32(msg))
        if not set(msg) & set(b"'\\$"):
            return msg
    raise SystemExit("bench: no padding frames this event for nginx")


CONVERSE_STREAM = b"".join(_aws_frame(e, p.encode()) for e, p in [
    ("messageStart", '{"role":"assistant"}'),
    ("contentBlockDelta", '{"contentBlockIndex":0,"delta":{"text":"ok"}}'),
    ("contentBlockDelta", '{"contentBlockIndex":0,"delta":{"text":"ok"}}'),
    ("contentBlockStop", '{"contentBlockIndex":0}'),
    ("messageStop", '{"stopReason":"end_turn"}'),
    ("metadata", '{"usage":{"inputTokens":10,"outputTokens":2,"totalTokens":12},'
                 '"metrics":{"latencyMs":1}}')]).decode("latin-1")

# The same answers from an OpenAI Responses provider (a response object, and its typed events
# up to response.completed, which carries the usage).
_RESP_HEAD = ('"id":"resp_bench","object":"response","created_at":1700000000,'
              '"model":"gpt-bench"')
_RESP_ITEM = ('{"id":"msg_bench","type":"message","status":"completed","role":"assistant",'
              '"content":[{"type":"output_text","text":"okok","annotations":[]}]}')
RESPONSE = ('{' + _RESP_HEAD + ',"status":"completed","output":[' + _RESP_ITEM + '],'
            '"usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":0},'
            '"output_tokens":2,"total_tokens":12}}')
RESP_SSE_STREAM = "\\n\\n".join([
    'event: response.created\\ndata: {"type":"response.created","sequence_number":0,'
    '"response":{' + _RESP_HEAD + ',"status":"in_progress","output":[],"usage":null}}',
    'event: response.output_item.added\\ndata: {"type":"response.output_item.added",'
    '"sequence_number":1,"output_index":0,"item":{"id":"msg_bench","type":"message",'
    '"status":"in_progress","role":"assistant","content":[]}}',
    'event: response.output_text.delta\\ndata: {"type":"response.output_text.delta",'
    '"sequence_number":2,"item_id":"msg_bench","output_index":0,"content_index":0,"delta":"ok"}',
    'event: response.output_text.delta\\ndata: {"type":"response.output_text.delta",'
    '"sequence_number":3,"item_id":"msg_bench","output_index":0,"content_index":0,"delta":"ok"}',
    'event: response.output_item.done\\ndata: {"type":"response.output_item.done",'
    '"sequence_number":4,"output_index":0,"item":' + _RESP_ITEM + '}',
    'event: response.completed\\ndata: {"type":"response.completed","sequence_number":5,'
    '"response":' + RESPONSE + '}']) + "\\n\\n"

PROCS = []  # (name, Popen, own_process_group)


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------
# Processes


def start(name, argv, own_group=False, env=None, cpus=None):
    if cpus and shutil.which("taskset"):
        argv = ["taskset", "-c", cpus] + argv
    out = open(RUN / f"{name}.log", "wb")
    p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                         start_new_session=own_group, cwd=ROOT)
    PROCS.append((name, p, own_group))
    return p


def stop_all():
    for name, p, group in reversed(PROCS):
        # Politely first, then for good.
        for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            if p.poll() is not None:
                break
            try:
                if group:
                    os.killpg(p.pid, sig)
                else:
                    p.send_signal(sig)
                p.wait(timeout=grace)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
    PROCS.clear()


def tree_pids(pid):
    """pid and all its descendants (LiteLLM's uvicorn workers)."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pids):
    """utime + stime (all threads) of the processes, in seconds, from /proc/<pid>/stat."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # fields 14 and 15 of stat(5)
        except (OSError, ValueError, IndexError):
            pass
    return total / CLK_TCK


def rss_kib(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def http(method, url, body=None, headers=None, timeout=5):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict((k.lower(), v) for k, v in r.headers.items()), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict((k.lower(), v) for k, v in e.headers.items()), e.read()


def wait_for(what, check, timeout):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as e:  # noqa: BLE001 - still starting
            last = e
        time.sleep(0.1)
    raise SystemExit(f"bench: {what} did not come up in {timeout} s ({last})")


# ------------------------------------------------------------------------------------------
# Upstream: nginx with a fixed chat completion (200) and a failing primary (503)


def check_ports_free(ports):
    busy = []
    for port in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is fine
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                busy.append(port)
    if busy:
        raise SystemExit(f"bench: ports {busy} on 127.0.0.1 are in use (another benchmark?); "
                         "set BENCH_PORT_BASE to move the whole range")


def start_nginx(cpus):
    tmp = RUN / "nginx"
    tmp.mkdir(parents=True, exist_ok=True)
    conf = tmp / "nginx.conf"
    conf.write_text(f"""# generated by bench/bench.py
daemon off;
master_process off;   # one process, no user switch: the benchmark's upstream only
worker_processes 1;
error_log {tmp}/error.log warn;
pid {tmp}/nginx.pid;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  keepalive_requests 100000000;
  keepalive_timeout 600s;
  client_max_body_size 64m;
  default_type application/json;
  # `return` answers any method (POST included) with a fixed body; the request body is
  # read and discarded. No static files, so no 405 for POST.
  server {{
    listen 127.0.0.1:{NGINX_OK} backlog=4096;
    location / {{ return 200 '{CHAT_COMPLETION}'; }}
  }}
  server {{
    listen 127.0.0.1:{NGINX_FAIL} backlog=4096;
    # Counts the failing primary's attempts (lines), buffered so it costs next to nothing.
    access_log {tmp}/fail.log combined buffer=256k flush=200ms;
    location / {{ return 503 '{OVERLOADED}'; }}
  }}
  server {{
    listen 127.0.0.1:{NGINX_SSE} backlog=4096;
    location / {{ default_type text/event-stream; return 200 '{SSE_STREAM}'; }}
  }}
  server {{
    listen 127.0.0.1:{NGINX_MSG} backlog=4096;
    location / {{ return 200 '{MESSAGE}'; }}
  }}
  server {{
    listen 127.0.0.1:{NGINX_MSG_SSE} backlog=4096;
    location / {{ default_type text/event-stream; return 200 '{MSG_SSE_STREAM}'; }}
  }}
  server {{
    listen 127.0.0.1:{NGINX_GEM} backlog=4096;
    location ~ :streamGenerateContent {{ default_type text/event-stream; return 200 '{GEMINI_SSE_STREAM}'; }}
    location / {{ return 200 '{GEMINI_ANSWER}'; }}
  }}
  server {{
    listen 127.0.0.1:{NGINX_CONV} backlog=4096;
    location ~ /converse-stream$ {{ default_type application/vnd.amazon.eventstream; return 200 '{CONVERSE_STREAM}'; }}
    location / {{ return 200 '{CONVERSE_ANSWER}'; }}
  }}
  server {{
    listen 127.0.0.1:{NGINX_RESP} backlog=4096;
    location / {{ return 200 '{RESPONSE}'; }}
  }}
  server {{
    listen 127.0.0.1:{NGINX_RESP_SSE} backlog=4096;
    location / {{ default_type text/event-stream; return 200 '{RESP_SSE_STREAM}'; }}
  }}
  server {{
    listen 127.0.0.1:{NGINX_OK_H2} http2 backlog=4096;
    location / {{ return 200 '{CHAT_COMPLETION}'; }}
  }}
  server {{
    listen 127.0.0.1:{NGINX_FAIL_H2} http2 backlog=4096;
    access_log {tmp}/fail.log combined buffer=256k flush=200ms;
    location / {{ return 503 '{OVERLOADED}'; }}
  }}
}}
""", encoding="latin-1")
    p = start("nginx", ["nginx", "-c", str(conf), "-p", str(tmp)], cpus=cpus)

    def up():
        if p.poll() is not None:
            raise SystemExit(f"bench: nginx exited; see {tmp}/error.log")
        return http("POST", f"http://127.0.0.1:{NGINX_OK}{PATH}", b"{}")[0] == 200
    wait_for("nginx", up, 10)
    st, _, body = http("POST", f"http://127.0.0.1:{NGINX_FAIL}{PATH}", b"{}")
    assert st == 503 and b"overloaded" in body, (st, body)
    return tmp / "fail.log"


def fail_log_lines(path):
    time.sleep(0.4)  # the buffered log flushes every 200 ms
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


# ------------------------------------------------------------------------------------------
# Envoy configurations, all derived from one rendered llm-failover config


def render(primary, secondary, listen, admin, module=None, api=None, runtime="wasm"):
    """The demo config rendered for these ports; `api` (a provider `api:`, e.g. "anthropic") declares the
    API every provider speaks (behaviour.md 13: a caller of the other API is translated)."""
    env = dict(os.environ, PRIMARY_PORT=str(primary), SECONDARY_PORT=str(secondary),
               TERTIARY_PORT=str(secondary), LISTEN_PORT=str(listen), ADMIN_PORT=str(admin),
               **BREAKER_ENV)
    source = DEMO
    if api:
        # Bedrock's model ids are its own: the providers list the one the requests name.
        # (and a region: the provider without an API key in authorization is signed by Envoy).
        models = "    models: [gpt-4o-mini]\n    region: us-east-1\n" \
            if api == "bedrock_converse" else ""
        text, n = re.subn(r"(?m)^  - name: (\w+)\n", rf"\g<0>    api: {api}\n{models}",
                          DEMO.read_text())
        assert n == 3, "the demo config's three providers"
        source = RUN / f"source-{listen}.failover.yaml"
        source.write_text(text)
    out = RUN / f"rendered-{listen}.yaml"
    native = ("--runtime", "native") if runtime == "native" else ()
    module = module or (NATIVE_MODULE if runtime == "native" else MODULE)
    subprocess.run([str(CLI), "render", str(source), "--out", str(out), "--module", str(module),
                    *native], env=env, check=True, stdout=subprocess.DEVNULL, timeout=60)
    return yaml.safe_load(out.read_text())


def hcm(cfg):
    return cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]


def upstream_opts(cluster):
    return cluster["typed_extension_protocol_options"][
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]


def strip_downstream_wasm(cfg):
    h = hcm(cfg)
    h["http_filters"] = [f for f in h["http_filters"] if "Wasm" not in f["typed_config"]["@type"]]


def strip_upstream_wasm(cfg):
    for c in cfg["static_resources"]["clusters"]:
        upstream_opts(c).pop("http_filters", None)


def plain_route(cfg):
    """No filter, no matcher, no retries: listener -> router -> cluster `primary`."""
    strip_downstream_wasm(cfg)
    strip_upstream_wasm(cfg)
    vh = hcm(cfg)["route_config"]["virtual_hosts"][0]
    vh.pop("include_request_attempt_count", None)
    vh.pop("include_attempt_count_in_response", None)
    route = vh["routes"][0]["route"]
    vh["routes"][0]["route"] = {"cluster": "primary", "timeout": route["timeout"]}


def route_only(cfg):
    """The rendered matcher route + retry policy, no wasm: with no filter state the first
    attempt falls to an added on_no_match that picks `primary` (same matcher work)."""
    strip_downstream_wasm(cfg)
    strip_upstream_wasm(cfg)
    spec = hcm(cfg)["route_config"]["virtual_hosts"][0]["routes"][0]["route"][
        "inline_cluster_specifier_plugin"]["extension"]["typed_config"]
    slot1 = spec["cluster_matcher"]["on_no_match"]["matcher"]
    slot1["on_no_match"] = {"action": {"name": "cluster", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.router.cluster_specifiers.matcher.v3.ClusterAction",
        "cluster": "primary"}}}


def failover_route_only(cfg):
    """Envoy's own failover with no wasm: the rendered matcher route and retry policy, retrying
    on 5xx instead of the filter's marker header; with no filter state, attempt 1 falls to
    `primary` and attempts 2 and 3 to `secondary` (added on_no_match branches)."""
    route_only(cfg)
    route = hcm(cfg)["route_config"]["virtual_hosts"][0]["routes"][0]["route"]
    route["retry_policy"]["retry_on"] = "5xx,connect-failure,reset,refused-stream"
    route["retry_policy"].pop("retriable_headers", None)
    tree = route["inline_cluster_specifier_plugin"]["extension"]["typed_config"][
        "cluster_matcher"]["matcher_tree"]["exact_match_map"]["map"]
    for branch in tree.values():
        branch["matcher"]["on_no_match"] = {"action": {"name": "cluster", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.router.cluster_specifiers.matcher.v3.ClusterAction",
            "cluster": "secondary"}}}


def upstream_h2(cfg):
    """Provider clusters speak HTTP/2 (h2c with prior knowledge to nginx)."""
    for c in cfg["static_resources"]["clusters"]:
        upstream_opts(c)["explicit_http_config"] = {"http2_protocol_options": {}}


# "Do-nothing wasm": the calibration module (below) with an empty script exports the same
# callbacks as an SDK filter and returns "continue" from each without a single hostcall.

def add_noop_downstream(cfg):
    hcm(cfg)["http_filters"].insert(0, calib_filter("noop_downstream", ""))


def add_noop_upstream(cfg):
    for c in cfg["static_resources"]["clusters"]:
        upstream_opts(c)["http_filters"] = [calib_filter("noop_upstream", ""), UPSTREAM_CODEC]


# ------------------------------------------------------------------------------------------
# Calibration (--calibrate): what each kind of hostcall costs, and what llm-failover's calls
# cost with none of its logic (bench/calib/calib.rs runs a script of calls per callback).

UPSTREAM_CODEC = {"name": "envoy.filters.http.upstream_codec", "typed_config": {
    "@type": "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"}}


def calib_filter(name, script):
    return {"name": name, "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
        "config": {"name": name, "root_id": "calib", "vm_config": {
            "vm_id": name, "runtime": "envoy.wasm.runtime.v8",
            "code": {"local": {"filename": str(CALIB)}}},
            "allow_on_headers_stop_iteration": True,
            "configuration": {"@type": "type.googleapis.com/google.protobuf.StringValue",
                              "value": script}}}}


def calib_pair(down, up):
    """The matcher route and retry policy (as `route_only`) with a calibration filter in
    llm-failover's two places: before the router, and on every provider cluster."""
    def transform(cfg):
        route_only(cfg)
        hcm(cfg)["http_filters"].insert(0, calib_filter("calib_down", down))
        for c in cfg["static_resources"]["clusters"]:
            upstream_opts(c)["http_filters"] = [calib_filter("calib_up", up), UPSTREAM_CODEC]
    return transform


# Per-call probes: 32 calls (16 filter-state keys) in the downstream request-headers callback.
CALIB_PROBES = [
    ("time", 32, "proxy_get_current_time_nanoseconds (bare crossing)"),
    ("get_header", 32, "proxy_get_header_map_value, value present (+ proxy_on_memory_allocate)"),
    ("get_absent", 32, "proxy_get_header_map_value, header absent"),
    ("set_header", 32, "proxy_replace_header_map_value"),
    ("remove_header", 32, "proxy_remove_header_map_value"),
    ("set_property", 16, "proxy_set_property, a new filter-state object each"),
    ("shared_get", 32, "proxy_get_shared_data, 120 bytes (+ proxy_on_memory_allocate)"),
]
# The success path's calls, from `scripts/bench.sh --profile` (keep in step with the filter):
# downstream: header pairs, pause for the body, the body, clock, 3 health records, 4 filter-state
# properties (3 slots, the plan), x-envoy-max-retries, clear_route_cache; response: attempt
# count, marker check, x-llm-provider and x-llm-attempts. Upstream: attempt number, the plan,
# clock, 5 removals (other credentials, the caller's, x-envoy-max-retries) and the credential;
# response: :status, marker removal, clock, counter, attempt log.
SKELETON_FILTER = (
    "rh:pairs rh:pause rb:body rb:time rb:shared_get*3 rb:set_property*4 rb:set_header rb:route "
    "sh:get_property sh:get_absent sh:set_header*2",
    "rh:get_header rh:get_property rh:time rh:remove_header*4 rh:set_header "
    "sh:get_header sh:remove_header sh:time sh:metric sh:set_property")
# What any implementation of this design must do per request: read the headers and the body
# (the model decides the chain), read the first provider's health, publish the first slot and
# the plan, re-resolve the route; upstream: learn the attempt number and the plan, drop the
# caller's credential and set the provider's, read the status, count the attempt; downstream
# response: the attempt count and the two public headers.
SKELETON_DESIGN = (
    "rh:pairs rh:pause rb:body rb:shared_get rb:set_property*2 rb:route "
    "sh:get_property sh:set_header*2",
    "rh:get_header rh:get_property rh:remove_header rh:set_header sh:get_header sh:metric")


def build_calib():
    """Builds bench/calib/calib.rs when missing or stale; the compiler's complaint, or None."""
    if CALIB.exists() and CALIB.stat().st_mtime >= CALIB_SRC.stat().st_mtime:
        return None
    r = subprocess.run(["rustc", "--edition", "2021", "--target", "wasm32-wasip1", "--crate-type",
                        "cdylib", "-C", "opt-level=3", "-C", "panic=abort", "-C",
                        "strip=debuginfo", str(CALIB_SRC), "-o", str(CALIB)], timeout=300,
                       capture_output=True, text=True)
    return None if r.returncode == 0 else (r.stderr[-800:] or "rustc failed")


def calibrate(args, body_file, nginx_cpus, wrk_cpus, rounds, duration, warmup):
    problem = build_calib()
    if problem:
        raise SystemExit(f"bench: the calibration module did not build (rustc with the "
                         f"wasm32-wasip1 target is needed)\n{problem}")
    targets = {
        "plain": Target("plain", "Envoy plain route (no filter)", NGINX_OK, plain_route),
        "c_empty": Target("c_empty", "two calibration filters making no call (the wasm floor)",
                          NGINX_OK, calib_pair("", "")),
    }
    for op, n, _ in CALIB_PROBES:
        targets[f"c_{op}"] = Target(f"c_{op}", op, NGINX_OK, calib_pair(f"rh:{op}*{n}", ""))
    targets["s_design"] = Target("s_design", "skeleton: the calls the design needs, no logic",
                                 NGINX_OK, calib_pair(*SKELETON_DESIGN))
    targets["s_filter"] = Target("s_filter", "skeleton: llm-failover's own calls, no logic",
                                 NGINX_OK, calib_pair(*SKELETON_FILTER))
    targets["success"] = Target("success", "llm-failover, success path", NGINX_OK,
                                expect_provider="primary", expect_attempts="1")
    check_ports_free([NGINX_CONV, NGINX_RESP, NGINX_RESP_SSE] + list(range(PORT_BASE + 1, PORT_BASE + 10)) +
                     list(range(PORT_BASE + 10, PORT_BASE + 12 + 2 * len(targets))))
    fail_log = start_nginx(nginx_cpus)
    for i, t in enumerate(targets.values()):
        start_envoy(t, i, args.envoy)
    for t in targets.values():
        ready_envoy(t)
        probe(t, body_file.read_bytes())
    cpu = {k: [] for k in targets}
    for rnd in range(rounds):
        for key, t in targets.items():
            log(f"calibration round {rnd + 1}/{rounds}: {key}")
            res = measure(t, 32, duration, warmup, body_file, wrk_cpus, fail_log)
            if res["non_2xx"] or res["errors"]:
                raise SystemExit(f"bench: {key} answered errors: {res}")
            cpu[key].append(res["cpu_us_per_req"])

    # Best of the rounds: on a shared machine neighbours only ever add CPU time, so the
    # fastest round is the closest to each configuration's own cost.
    best = {k: min(v) for k, v in cpu.items()}

    def delta(key, base="c_empty"):
        return best[key] - best[base]

    print(f"\n## Calibration (best of {rounds} rounds x {duration} s, 1 KB, 32 connections)\n")
    print("Envoy CPU per call, from 32 (16) calls per request over two filters making none:\n")
    print("| call | µs per call |\n|---|---:|")
    for op, n, label in CALIB_PROBES:
        print(f"| {label} | {delta(f'c_{op}') / n:.2f} |")
    print("\nSkeletons against the plain route measured in the same rounds:\n")
    print("| configuration | Envoy CPU µs/req | vs plain | above the wasm floor |")
    print("|---|---:|---:|---:|")
    for key in ("plain", "c_empty", "s_design", "s_filter", "success"):
        ratio = best[key] / best["plain"]
        print(f"| {targets[key].label} | {best[key]:.1f} | {ratio:.2f}x | "
              f"{'-' if key == 'plain' else f'{delta(key):+.1f} µs'} |")
    (WORK / "calibration.json").write_text(json.dumps({"rounds": rounds, "duration": duration,
                                                       "cpu_us_per_req": cpu}, indent=1))
    return 0


class Target:
    """One thing under load: an Envoy configuration (or LiteLLM)."""

    def __init__(self, key, label, primary, transform=None, expect_status=200,
                 expect_provider=None, expect_attempts=None, secondary=NGINX_OK, module=None,
                 api=None, request="chat", expect_body=None, runtime="wasm"):
        self.key, self.label, self.primary, self.secondary = key, label, primary, secondary
        self.runtime = runtime  # "native": the dynamic module in place of the wasm one
        self.module = module  # None: MODULE (--module); set for --compare's "success_b"
        self.api = api  # the API the providers speak (None: not declared, never translated)
        self.request = request  # the caller's request: a key of REQUESTS
        self.expect_body = expect_body  # bytes the probe's answer holds (the caller's API)
        self.transform, self.expect_status = transform, expect_status
        self.expect_provider, self.expect_attempts = expect_provider, expect_attempts
        self.proc, self.pids, self.port, self.admin = None, None, None, None
        self.rss_idle = self.rss_loaded = None

    def wasm_vms(self):
        """Live wasm VMs as Envoy counts them (the main thread's, one per worker, and the
        base VM kept for cloning)."""
        st, _, body = http("GET", f"http://127.0.0.1:{self.admin}/stats?filter="
                           r"^wasm\.envoy\.wasm\.runtime\.v8\.active$")
        m = re.search(rb": (\d+)", body)
        return int(m.group(1)) if m else 0

    def url(self):
        return f"http://127.0.0.1:{self.port}{REQUESTS[self.request][0]}"

    def stats(self):
        if self.admin is None:
            return {}
        st, _, body = http("GET", f"http://127.0.0.1:{self.admin}/stats?filter="
                           r"^cluster\.(primary|secondary)\.upstream_(rq_total|cx_total|"
                           r"rq_retry|rq_retry_overflow)$")
        out = {}
        for line in body.decode().splitlines():
            k, _, v = line.partition(": ")
            if v.strip().isdigit():
                out[k.strip()] = int(v)
        return out


# Main configurations; the HTTP/2 pair runs at 1 KB and 32 connections only (see ONE_KB_ONLY).
ENVOY_KEYS = ["plain", "success", "failover", "plain503", "plain_h2", "failover_h2"]
TARGETS = {
    "plain": lambda: Target("plain", "Envoy plain route (no filter)", NGINX_OK, plain_route),
    "success": lambda: Target("success", "llm-failover, success path", NGINX_OK,
                              expect_provider="primary", expect_attempts="1"),
    "failover": lambda: Target("failover", "llm-failover, failover path (primary 503)",
                               NGINX_FAIL, expect_provider="secondary", expect_attempts="2"),
    "plain503": lambda: Target("plain503", "plain route to the failing primary (the failed attempt alone)",
                               NGINX_FAIL, plain_route, expect_status=503),
    # Experiments (config only), success path:
    "x_route": lambda: Target("x_route", "matcher route + retry policy, no wasm", NGINX_OK, route_only),
    "x_noop1": lambda: Target("x_noop1", "route + do-nothing downstream wasm", NGINX_OK,
                              lambda c: (route_only(c), add_noop_downstream(c))),
    "x_noop2": lambda: Target("x_noop2", "route + do-nothing downstream and upstream wasm", NGINX_OK,
                              lambda c: (route_only(c), add_noop_downstream(c), add_noop_upstream(c))),
    "x_down": lambda: Target("x_down", "route + llm-failover downstream filter only", NGINX_OK,
                             strip_upstream_wasm, expect_provider="primary"),
    # Experiments, failover path:
    "x_fo_route": lambda: Target("x_fo_route", "failover by Envoy alone: matcher route, retry on 5xx, no wasm",
                                 NGINX_FAIL, failover_route_only),
    "x_fo_noop2": lambda: Target("x_fo_noop2", "Envoy-alone failover + do-nothing downstream and upstream wasm",
                                 NGINX_FAIL, lambda c: (failover_route_only(c), add_noop_downstream(c),
                                                        add_noop_upstream(c))),
    # Providers over HTTP/2, as TLS providers negotiate by ALPN (the rendered config offers h2):
    "plain_h2": lambda: Target("plain_h2", "Envoy plain route, HTTP/2 upstream", NGINX_OK_H2,
                                 lambda c: (plain_route(c), upstream_h2(c)), secondary=NGINX_OK_H2),
    "failover_h2": lambda: Target("failover_h2", "llm-failover, failover path, HTTP/2 upstreams", NGINX_FAIL_H2,
                              upstream_h2, expect_provider="secondary", expect_attempts="2",
                              secondary=NGINX_OK_H2),
}
EXPERIMENTS = ["x_route", "x_noop1", "x_noop2", "x_down", "x_fo_route", "x_fo_noop2"]
# The native build's success and failover paths (full runs and --only; not the smoke).
# Also its HTTP/2 failover, a translated request and stream (the wasm build's xv_json and
# xv_sse), and its held stream (the first-byte rows: native_sse and native_xv_sse).
NATIVE_KEYS = ["native", "native_failover", "native_failover_h2", "native_xv_json",
               "native_sse", "native_xv_sse"]
TARGETS["native"] = lambda: Target("native", "llm-failover native module, success path", NGINX_OK,
                                   expect_provider="primary", expect_attempts="1", runtime="native")
TARGETS["native_failover"] = lambda: Target(
    "native_failover", "llm-failover native module, failover path (primary 503)", NGINX_FAIL,
    expect_provider="secondary", expect_attempts="2", runtime="native")
TARGETS["native_failover_h2"] = lambda: Target(
    "native_failover_h2", "llm-failover native module, failover path, HTTP/2 upstreams",
    NGINX_FAIL_H2, upstream_h2, expect_provider="secondary", expect_attempts="2",
    secondary=NGINX_OK_H2, runtime="native")
TARGETS["native_xv_json"] = lambda: Target(
    "native_xv_json", "native module, translated: OpenAI caller, Anthropic provider (JSON)",
    NGINX_MSG, expect_provider="primary", expect_attempts="1", api="anthropic",
    secondary=NGINX_MSG, runtime="native")
TARGETS["native_sse"] = lambda: Target(
    "native_sse", "llm-failover native module, same API, stream", NGINX_SSE,
    expect_provider="primary", expect_attempts="1", request="chat_stream", runtime="native")
TARGETS["native_xv_sse"] = lambda: Target(
    "native_xv_sse", "native module, translated: OpenAI caller, Anthropic provider (stream)",
    NGINX_MSG_SSE, expect_provider="primary", expect_attempts="1", api="anthropic",
    secondary=NGINX_MSG_SSE, request="chat_stream", runtime="native")
# Streaming first byte (behaviour.md 3: a 200 stream is held until its first event): a healthy SSE
# answer through the plain route and through the filter, timed per request on one connection.
STREAM_KEYS = ["plain_sse", "success_sse"]
TARGETS["plain_sse"] = lambda: Target("plain_sse", "Envoy plain route (no filter), SSE answer",
                                      NGINX_SSE, plain_route)
TARGETS["success_sse"] = lambda: Target("success_sse", "llm-failover, SSE answer", NGINX_SSE,
                                        expect_provider="primary", expect_attempts="1")
# Cross-vendor chains (behaviour.md 13): the caller speaks one API, the provider the other,
# each request and answer translated; next to the same-API path with the same answer shape.
# "sse" is the same-API stream under load (success_sse serves the first-byte rows).
XV_KEYS = ["sse", "xv_json", "xv_sse", "xv_json_rev", "xv_sse_rev"]
TARGETS["sse"] = lambda: Target("sse", "llm-failover, same API, stream", NGINX_SSE,
                                expect_provider="primary", expect_attempts="1",
                                request="chat_stream")
TARGETS["xv_json"] = lambda: Target(
    "xv_json", "translated: OpenAI caller, Anthropic provider (JSON)", NGINX_MSG,
    expect_provider="primary", expect_attempts="1", api="anthropic", secondary=NGINX_MSG)
TARGETS["xv_sse"] = lambda: Target(
    "xv_sse", "translated: OpenAI caller, Anthropic provider (stream)", NGINX_MSG_SSE,
    expect_provider="primary", expect_attempts="1", api="anthropic", secondary=NGINX_MSG_SSE,
    request="chat_stream")
TARGETS["xv_json_rev"] = lambda: Target(
    "xv_json_rev", "translated: Anthropic caller, OpenAI provider (JSON)", NGINX_OK,
    expect_provider="primary", expect_attempts="1", api="openai", request="messages")
TARGETS["xv_sse_rev"] = lambda: Target(
    "xv_sse_rev", "translated: Anthropic caller, OpenAI provider (stream)", NGINX_SSE,
    expect_provider="primary", expect_attempts="1", api="openai", secondary=NGINX_SSE,
    request="messages_stream")
# The fourth wave's pairs: a Responses caller on a Messages provider and on a
# Chat-only one (`api: gemini`, Gemini's OpenAI endpoint: providers declaring `api: openai`
# take Responses as it is), a Gemini native caller on a Chat provider, a Chat caller on a
# Gemini native provider; JSON and stream each, next to the Chat-to-Messages rows (xv_json,
# xv_sse). The smoke runs their JSON rows only.
XV4 = [  # key, label, provider's answer (nginx), api, request, what the caller's answer holds
    ("xv_resp_msg_json", "translated: Responses caller, Anthropic provider (JSON)", NGINX_MSG,
     "anthropic", "responses", b'"object":"response"'),
    ("xv_resp_msg_sse", "translated: Responses caller, Anthropic provider (stream)", NGINX_MSG_SSE,
     "anthropic", "responses_stream", b"event: response.completed"),
    ("xv_resp_chat_json", "translated: Responses caller, Chat provider (JSON)", NGINX_OK,
     "gemini", "responses", b'"object":"response"'),
    ("xv_resp_chat_sse", "translated: Responses caller, Chat provider (stream)", NGINX_SSE,
     "gemini", "responses_stream", b"event: response.completed"),
    ("xv_gem_chat_json", "translated: Gemini caller, Chat provider (JSON)", NGINX_OK,
     "openai", "gemini", b'"candidates"'),
    ("xv_gem_chat_sse", "translated: Gemini caller, Chat provider (stream)", NGINX_SSE,
     "openai", "gemini_stream", b'"finishReason"'),
    ("xv_chat_gem_json", "translated: Chat caller, Gemini provider (JSON)", NGINX_GEM,
     "gemini_native", "chat", b'"chat.completion"'),
    ("xv_chat_gem_sse", "translated: Chat caller, Gemini provider (stream)", NGINX_GEM,
     "gemini_native", "chat_stream", b"chat.completion.chunk"),
    ("xv_msg_gem_json", "translated: Anthropic caller, Gemini provider (JSON)", NGINX_GEM,
     "gemini_native", "messages", b'"type":"message"'),
    ("xv_msg_gem_sse", "translated: Anthropic caller, Gemini provider (stream)", NGINX_GEM,
     "gemini_native", "messages_stream", b"event: message_stop"),
    ("xv_chat_conv_json", "translated: Chat caller, Converse provider (JSON)", NGINX_CONV,
     "bedrock_converse", "chat", b'"chat.completion"'),
    ("xv_chat_conv_sse", "translated: Chat caller, Converse provider (stream)", NGINX_CONV,
     "bedrock_converse", "chat_stream", b"chat.completion.chunk"),
    ("xv_msg_conv_json", "translated: Anthropic caller, Converse provider (JSON)", NGINX_CONV,
     "bedrock_converse", "messages", b'"type":"message"'),
    ("xv_msg_conv_sse", "translated: Anthropic caller, Converse provider (stream)", NGINX_CONV,
     "bedrock_converse", "messages_stream", b"event: message_stop"),
    ("xv_resp_conv_json", "translated: Responses caller, Converse provider (JSON)", NGINX_CONV,
     "bedrock_converse", "responses", b'"object":"response"'),
    ("xv_resp_conv_sse", "translated: Responses caller, Converse provider (stream)", NGINX_CONV,
     "bedrock_converse", "responses_stream", b"event: response.completed"),
    ("xv_gem_conv_json", "translated: Gemini caller, Converse provider (JSON)", NGINX_CONV,
     "bedrock_converse", "gemini", b'"candidates"'),
    ("xv_gem_conv_sse", "translated: Gemini caller, Converse provider (stream)", NGINX_CONV,
     "bedrock_converse", "gemini_stream", b'"finishReason"'),
    ("xv_chat_resp_json", "translated: Chat caller, Responses provider (JSON)", NGINX_RESP,
     "openai_responses", "chat", b'"chat.completion"'),
    ("xv_chat_resp_sse", "translated: Chat caller, Responses provider (stream)", NGINX_RESP_SSE,
     "openai_responses", "chat_stream", b"chat.completion.chunk"),
]
for _key, _label, _answer, _api, _request, _holds in XV4:
    TARGETS[_key] = (lambda k=_key, la=_label, a=_answer, api=_api, r=_request, h=_holds: Target(
        k, la, a, expect_provider="primary", expect_attempts="1", api=api, secondary=a,
        request=r, expect_body=h))
XV_KEYS += [x[0] for x in XV4]
XV4_STREAMS = {x[0] for x in XV4 if x[0].endswith("_sse")}
# The callers' requests: (path, body file suffix). The 1 KB bodies of each are made in main().
GEMINI_PATH = "/v1beta/models/gpt-4o-mini:generateContent"
GEMINI_STREAM_PATH = "/v1beta/models/gpt-4o-mini:streamGenerateContent?alt=sse"
REQUESTS = {"chat": ("/v1/chat/completions", ""),
            "chat_stream": ("/v1/chat/completions", "-stream"),
            "messages": ("/v1/messages", "-messages"),
            "messages_stream": ("/v1/messages", "-messages-stream"),
            "responses": ("/v1/responses", "-responses"),
            "responses_stream": ("/v1/responses", "-responses-stream"),
            "gemini": (GEMINI_PATH, "-gemini"),
            "gemini_stream": (GEMINI_STREAM_PATH, "-gemini-stream")}
# nginx over h2 answers `return` before reading a large body and then resets the stream, which
# Envoy reports as 503 UR: the HTTP/2 experiments use the 1 KB body only. The cross-vendor rows
# are 1 KB too.
ONE_KB_ONLY = {"plain_h2", "failover_h2", "native_failover_h2", "native_xv_json", "native_sse",
               "native_xv_sse"} | set(XV_KEYS)


def fourth_wave_requests(model, system, text="PAD"):
    """(body file suffix, request) of a Responses and a Gemini native caller, each also
    streamed: the chat request's system prompt, one user turn `text`, temperature 0.2, at most
    256 tokens."""
    responses = {"model": model, "instructions": system, "input": text, "temperature": 0.2,
                 "max_output_tokens": 256}
    gemini = {"systemInstruction": {"parts": [{"text": system}]},
              "contents": [{"role": "user", "parts": [{"text": text}]}],
              "generationConfig": {"temperature": 0.2, "maxOutputTokens": 256}}
    return [("-responses", responses), ("-responses-stream", {**responses, "stream": True}),
            ("-gemini", gemini), ("-gemini-stream", gemini)]


def first_byte_ms(port, body, n, path=PATH):
    """Milliseconds from sending each request to the first byte of its response body, `n`
    requests one after another on one keep-alive connection (each response read whole)."""
    head = (f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer sk-bench\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    out = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(n):
            buf = b""
            t0 = time.perf_counter()
            s.sendall(head + body)
            while b"\r\n\r\n" not in buf:
                chunk = s.recv(65536)
                if not chunk:
                    raise SystemExit("bench: connection closed during the first-byte run")
                buf += chunk
            header, _, rest = buf.partition(b"\r\n\r\n")
            while not rest:
                rest += s.recv(65536)
            out.append((time.perf_counter() - t0) * 1000)
            if not header.startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"bench: first-byte run answered {header[:40]!r}")
            m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", header)
            if m:
                while len(rest) < int(m.group(1)):
                    rest += s.recv(65536)
            else:  # chunked: read to the last chunk
                while not rest.endswith(b"0\r\n\r\n"):
                    rest += s.recv(65536)
    return out


def first_byte_rows(envoys, n, rounds):
    """Median and p90 time to the first body byte, per configuration: the plain route, the
    filter holding the stream until its first event, and the filter on the same answer for a
    request that did not ask to stream (nothing held: isolates the hold)."""
    stream_req = json.dumps({"model": "gpt-4o-mini", "stream": True,
                             "messages": [{"role": "user", "content": "hi"}]}).encode()
    plain_req = json.dumps({"model": "gpt-4o-mini",
                            "messages": [{"role": "user", "content": "hi"}]}).encode()
    messages_req = json.dumps({"model": "gpt-4o-mini", "stream": True, "max_tokens": 64,
                               "messages": [{"role": "user", "content": "hi"}]}).encode()
    cells = [("plain_sse", stream_req, PATH, "plain route"),
             ("success_sse", plain_req, PATH, "llm-failover, not held (request without stream)"),
             ("success_sse", stream_req, PATH, "llm-failover, held until the first event")]
    if "xv_sse" in envoys:  # a translated stream's first byte, next to the same-API one's
        cells.append(("xv_sse", stream_req, PATH, "llm-failover, translated stream (OpenAI "
                      "caller, Anthropic provider)"))
    if "xv_sse_rev" in envoys:
        cells.append(("xv_sse_rev", messages_req, "/v1/messages", "llm-failover, translated "
                      "stream (Anthropic caller, OpenAI provider)"))
    # The native build's: held, and translated (compared with the native held row).
    if "native_sse" in envoys:
        cells.append(("native_sse", stream_req, PATH, "native module, held until the first event"))
    if "native_xv_sse" in envoys:
        cells.append(("native_xv_sse", stream_req, PATH, "native module, translated stream "
                      "(OpenAI caller, Anthropic provider)"))
    small = dict(fourth_wave_requests("gpt-4o-mini", "You are terse.", "hi"))
    small["-stream"] = json.loads(stream_req)
    small["-messages-stream"] = json.loads(messages_req)
    for key, label, _, _, request, _ in XV4:
        if key in envoys and key in XV4_STREAMS:
            path, suffix = REQUESTS[request]
            cells.append((key, json.dumps(small[suffix]).encode(), path,
                          "llm-failover, " + label.replace(" (stream)", " stream")))
    for key, body, path, _ in cells:
        first_byte_ms(envoys[key].port, body, min(n, 200), path)  # warm-up
    samples = [[] for _ in cells]
    for _ in range(rounds):  # rounds interleave the cells, so drift on a shared machine is shared
        for i, (key, body, path, _) in enumerate(cells):
            samples[i] += first_byte_ms(envoys[key].port, body, n, path)
    rows = []
    for (_, _, _, label), xs in zip(cells, samples):
        xs.sort()
        rows.append((label, statistics.median(xs), xs[int(0.9 * len(xs))]))
    return rows


def start_envoy(t, index, envoy_bin):
    t.port, t.admin = PORT_BASE + 10 + 2 * index, PORT_BASE + 11 + 2 * index
    cfg = render(t.primary, t.secondary, t.port, t.admin, t.module, t.api, t.runtime)
    if t.transform:
        t.transform(cfg)
    path = RUN / f"envoy-{t.key}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    argv = [envoy_bin, "-c", str(path), "--concurrency", str(CONCURRENCY), "-l", "warning",
            "--disable-hot-restart", "--log-path", str(RUN / f"envoy-{t.key}.err")]
    # stdout (the access log) goes to RUN/envoy-<key>.log; truncated before each run
    t.proc = start(f"envoy-{t.key}", argv)
    t.pids = [t.proc.pid]


def ready_envoy(t):
    def up():
        if t.proc.poll() is not None:
            raise SystemExit(f"bench: envoy {t.key} exited; see {RUN}/envoy-{t.key}.err")
        return http("GET", f"http://127.0.0.1:{t.admin}/ready")[0] == 200
    # Every Envoy compiles the module at start (TurboFan, no Liftoff): with a dozen of them
    # starting at once on 2 shared cores that takes more than 30 s.
    wait_for(f"envoy {t.key}", up, 120)


def probe(t, body_files):
    body = body_files["1KB" + REQUESTS[t.request][1]].read_bytes()
    st, hdrs, resp = http("POST", t.url(), body, {"content-type": "application/json",
                                                  "authorization": "Bearer sk-bench"}, timeout=30)
    problems = []
    if st != t.expect_status:
        problems.append(f"status {st} (want {t.expect_status}): {resp[:200]!r}")
    if t.expect_provider and hdrs.get("x-llm-provider") != t.expect_provider:
        problems.append(f"x-llm-provider {hdrs.get('x-llm-provider')!r} (want {t.expect_provider})")
    if t.expect_attempts and hdrs.get("x-llm-attempts") != t.expect_attempts:
        problems.append(f"x-llm-attempts {hdrs.get('x-llm-attempts')!r} (want {t.expect_attempts})")
    if t.expect_body and t.expect_body not in resp:
        problems.append(f"answer without {t.expect_body!r}: {resp[:300]!r}")
    if problems:
        raise SystemExit(f"bench: probe of {t.key} failed: " + "; ".join(problems))
    return hdrs


# ------------------------------------------------------------------------------------------
# LiteLLM peer


def start_litellm(venv):
    exe = venv / "bin" / "litellm"
    cfg = RUN / "litellm.yaml"
    cfg.write_text(yaml.safe_dump({
        "model_list": [
            {"model_name": "gpt-4o-mini", "litellm_params": {
                "model": "openai/gpt-4o-mini", "api_base": f"http://127.0.0.1:{NGINX_FAIL}/v1",
                "api_key": "sk-primary", "max_retries": 0}},
            {"model_name": "fallback", "litellm_params": {
                "model": "openai/gpt-4o-mini", "api_base": f"http://127.0.0.1:{NGINX_OK}/v1",
                "api_key": "sk-secondary", "max_retries": 0}},
        ],
        "router_settings": {"num_retries": 0, "fallbacks": [{"gpt-4o-mini": ["fallback"]}],
                            "disable_cooldowns": True},
        "litellm_settings": {"num_retries": 0, "request_timeout": 30, "telemetry": False,
                             "set_verbose": False},
        "general_settings": {"master_key": "sk-bench"},
    }, sort_keys=False))
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_LOG="ERROR",
               LITELLM_TELEMETRY="False", DISABLE_SCHEMA_UPDATE="True", NO_DOCS="True")
    for k in ("DATABASE_URL", "REDIS_HOST", "REDIS_URL"):
        env.pop(k, None)
    t = Target("litellm", "LiteLLM proxy, failover path (primary 503)", NGINX_FAIL)
    t.port = LITELLM_PORT
    t.proc = start("litellm", [str(exe), "--config", str(cfg), "--host", "127.0.0.1", "--port",
                               str(LITELLM_PORT), "--num_workers", str(CONCURRENCY)],
                   own_group=True, env=env)

    def up():
        if t.proc.poll() is not None:
            raise SystemExit("litellm exited")
        return http("GET", f"http://127.0.0.1:{LITELLM_PORT}/health/liveliness")[0] == 200
    wait_for("litellm", up, 180)
    time.sleep(2)  # let every uvicorn worker finish starting
    t.pids = tree_pids(t.proc.pid)
    return t


# ------------------------------------------------------------------------------------------
# Load


def wrk(url, conns, seconds, body_file, cpus):
    argv = ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--timeout", "10s", "-s", str(LUA), url]
    if cpus and shutil.which("taskset"):
        argv = ["taskset", "-c", cpus] + argv
    env = dict(os.environ, BENCH_BODY_FILE=str(body_file), BENCH_MAX_REQUESTS=str(MAX_REQUESTS))
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=seconds + 30)
    m = re.search(r"^BENCH (.*)$", r.stdout, re.M)
    if not m:
        raise SystemExit(f"bench: wrk failed ({r.returncode}): {r.stdout}{r.stderr}")
    return {k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())}


def measure(t, conns, seconds, warmup, body_file, wrk_cpus, fail_log):
    if warmup > 0:
        wrk(t.url(), conns, warmup, body_file, wrk_cpus)
    # Requests the warm-up left queued (a slow peer keeps working on them after wrk closed its
    # connections) must not land in the measured window: wait until the target is idle.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        c = cpu_seconds(t.pids)
        time.sleep(0.25)
        if cpu_seconds(t.pids) - c <= 0.02:
            break
    # Only the failing nginx logs attempts (each read waits out its 200 ms flush): a target
    # whose primary is another server has none to count.
    attempts = (lambda: fail_log_lines(fail_log)) if t.primary in (NGINX_FAIL, NGINX_FAIL_H2) \
        else (lambda: 0)
    s0, c0, f0 = t.stats(), cpu_seconds(t.pids), attempts()
    w = wrk(t.url(), conns, seconds, body_file, wrk_cpus)
    c1, s1, f1 = cpu_seconds(t.pids), t.stats(), attempts()
    n = w["requests"]
    d = {k: s1.get(k, 0) - s0.get(k, 0) for k in s1}
    errors = int(sum(w[k] for k in w if k.startswith("err_")))
    res = {
        "requests": int(n), "rps": n / (w["duration_us"] / 1e6),
        "p50_ms": w["p50_us"] / 1000, "p99_ms": w["p99_us"] / 1000, "mean_ms": w["mean_us"] / 1000,
        "cpu_us_per_req": (c1 - c0) / n * 1e6 if n else float("nan"),
        "errors": errors, "non_2xx": int(w["err_status"]),
        "primary_attempts_per_req": (f1 - f0) / n if n else 0,
    }
    if d:
        res["primary_cx_per_req"] = d.get("cluster.primary.upstream_cx_total", 0) / n
        res["retry_overflow"] = d.get("cluster.primary.upstream_rq_retry_overflow", 0) + \
            d.get("cluster.secondary.upstream_rq_retry_overflow", 0)
    return res


# ------------------------------------------------------------------------------------------
# Report


def fmt_ratio(x):
    return "-" if x is None else f"{x:.2f}x"


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(results, rounds):
    """results[(key, body, conns)] = [per-round dict]; ratios: median of per-round ratios to
    `plain` in the same cell and round."""
    rows = {}
    for (key, body, conns), runs in results.items():
        base = results.get(("plain", body, conns))
        row = {m: median([r[m] for r in runs]) for m in
               ("rps", "p50_ms", "p99_ms", "cpu_us_per_req", "primary_attempts_per_req")}
        row["primary_cx_per_req"] = median([r.get("primary_cx_per_req") for r in runs])
        row["errors"] = sum(r["errors"] for r in runs)
        row["non_2xx"] = sum(r["non_2xx"] for r in runs)
        row["requests"] = sum(r["requests"] for r in runs)
        for m in ("rps", "p50_ms", "p99_ms", "cpu_us_per_req"):
            if base and len(base) == len(runs):
                row[m + "_ratio"] = median([r[m] / b[m] for r, b in zip(runs, base) if b[m]])
            else:
                row[m + "_ratio"] = None
        rows[(key, body, conns)] = row
    return rows


def table(rows, labels, order, bodies, conns_list):
    out = ["| configuration | body | conns | req/s | p50 ms | p99 ms | Envoy CPU µs/req "
           "| req/s vs plain | p50 vs plain | p99 vs plain | CPU/req vs plain |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for conns in conns_list:
        for body in bodies:
            for key in order:
                r = rows.get((key, body, conns))
                if not r:
                    continue
                out.append(
                    f"| {labels[key]} | {body} | {conns} | {r['rps']:,.0f} | {r['p50_ms']:.3f} | "
                    f"{r['p99_ms']:.3f} | {r['cpu_us_per_req']:.1f} | {fmt_ratio(r['rps_ratio'])} | "
                    f"{fmt_ratio(r['p50_ms_ratio'])} | {fmt_ratio(r['p99_ms_ratio'])} | "
                    f"{fmt_ratio(r['cpu_us_per_req_ratio'])} |")
    return "\n".join(out)


def round_ratio(results, key, base, body, conns):
    """Median of per-round CPU/request ratios of `key` to `base` in one cell."""
    runs, refs = results.get((key, body, conns)), results.get((base, body, conns))
    if not runs or not refs or len(runs) != len(refs):
        return None
    return median([r["cpu_us_per_req"] / b["cpu_us_per_req"] for r, b in zip(runs, refs)
                   if b["cpu_us_per_req"]])


def targets(rows, results):
    lines = []
    s = rows.get(("success", "1KB", 32))
    f = rows.get(("failover", "1KB", 32))
    if s and s["cpu_us_per_req_ratio"]:
        v = s["cpu_us_per_req_ratio"]
        lines.append(("success path CPU/request <= 1.5x plain (32 conns, 1 KB)", f"{v:.2f}x", v <= 1.5))
    if f and f["cpu_us_per_req_ratio"]:
        v = f["cpu_us_per_req_ratio"]
        lines.append(("failover path CPU/request <= 3.0x plain (32 conns, 1 KB)", f"{v:.2f}x", v <= 3.0))
    for key, build in (("failover_h2", ""), ("native_failover_h2", ", native module")):
        v = round_ratio(results, key, "plain_h2", "1KB", 32)
        if v:
            lines.append((f"failover path over HTTP/2 upstreams{build} <= 3.0x the plain route "
                          "over HTTP/2 (32 conns, 1 KB)", f"{v:.2f}x", v <= 3.0))
    v = round_ratio(results, "native", "plain", "1KB", 32)
    if v:
        lines.append(("native module, success path CPU/request <= 1.3x plain (32 conns, 1 KB)",
                      f"{v:.2f}x", v <= 1.3))
    for body in ("1KB", "50KB"):
        fo, fa = rows.get(("failover", body, 1)), rows.get(("plain503", body, 1))
        if fo and fa:
            added = fo["p50_ms"] - fa["p50_ms"]
            lines.append((f"failover adds <= 1 ms p50 over the failed attempt (1 conn, {body})",
                          f"+{added:.3f} ms ({fo['p50_ms']:.3f} vs {fa['p50_ms']:.3f})", added <= 1.0))
    return lines


def wasm_memory_pages(path):
    """Initial linear memory (64 KiB pages) declared or imported by a wasm module."""
    data = Path(path).read_bytes()

    def leb(i):
        result = shift = 0
        while True:
            b = data[i]
            i += 1
            result |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return result, i

    i = 8
    while i < len(data):
        sid = data[i]
        size, i = leb(i + 1)
        if sid == 5:  # memory section
            _, j = leb(i)
            _flags, j = leb(j)
            pages, _ = leb(j)
            return pages
        i += size
    return None


def machine():
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"nproc": os.cpu_count(), "cpu": cpu, "kernel": os.uname().release}


# ------------------------------------------------------------------------------------------


def make_body_files():
    """The request bodies, written into RUN: OpenAI chat requests padded to exactly 1 KiB and
    50 KiB, and the 1 KiB one streamed and in the other callers' APIs; {name: path}."""
    body_files = {}
    for name, size in (("1KB", 1024), ("50KB", 50 * 1024)):
        head = '{"model":"gpt-4o-mini","temperature":0.2,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"'
        tail = '"}]}'
        text = head + "x" * (size - len(head) - len(tail)) + tail
        assert len(text) == size
        json.loads(text)
        p = RUN / f"body-{name}.json"
        p.write_text(text)
        body_files[name] = p
    # The same 1 KiB request streamed, and as Anthropic Messages requests (cross-vendor rows).
    chat = json.loads(body_files["1KB"].read_text())
    system = chat["messages"][0]["content"]
    for suffix, doc in fourth_wave_requests(chat["model"], system):  # Responses, Gemini
        text = json.dumps(doc, separators=(",", ":"))
        text = text.replace("PAD", "x" * (1024 - len(text) + 3))
        assert len(text) == 1024, (suffix, len(text))
        p = RUN / f"body-1KB{suffix}.json"
        p.write_text(text)
        body_files["1KB" + suffix] = p
    for suffix, doc in (
            ("-stream", {**chat, "stream": True}),
            ("-messages", {"model": chat["model"], "max_tokens": 256, "temperature": 0.2,
                           "system": system, "messages": chat["messages"][1:]}),
            ("-messages-stream", {"model": chat["model"], "max_tokens": 256, "temperature": 0.2,
                                  "system": system, "messages": chat["messages"][1:],
                                  "stream": True})):
        text = json.dumps(doc, separators=(",", ":"))
        content = doc["messages"][-1]["content"]
        text = text.replace(content, "x" * (len(content) - (len(text) - 1024)))
        assert len(text) == 1024, (suffix, len(text))
        p = RUN / f"body-1KB{suffix}.json"
        p.write_text(text)
        body_files["1KB" + suffix] = p
    return body_files


def main():
    global MODULE, CLI, EXPERIMENTS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="a few seconds: checks the harness")
    ap.add_argument("--calibrate", action="store_true",
                    help="price each kind of hostcall and measure call skeletons (no logic)")
    ap.add_argument("--with-litellm", action="store_true", help="add the LiteLLM peer column")
    ap.add_argument("--no-experiments", action="store_true")
    ap.add_argument("--duration", type=int, default=None, help="seconds per measured run")
    ap.add_argument("--warmup", type=int, default=None, help="seconds of warm-up before each run")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (median reported)")
    ap.add_argument("--envoy", default=str(ROOT / ".venv" / "bin" / "envoy"))
    ap.add_argument("--module", default=str(ROOT / "dist" / "llm_failover.wasm"),
                    help="the wasm module to measure (copied into the run directory first)")
    ap.add_argument("--cli", default=str(CLI), help="the llm-failover CLI that renders configs")
    ap.add_argument("--litellm-venv", default=str(WORK / "litellm-venv"))
    ap.add_argument("--compare", metavar="MODULE_B", default=None,
                    help="also measure the success path with this second module, in the same run: "
                         "its cells run next to --module's, after them in rounds 1, 3, ... and before "
                         "them in rounds 2, 4, ... (A/B comparison, with a table of B/A ratios)")
    ap.add_argument("--only", metavar="KEYS", default=None,
                    help="comma-separated main configurations to run (e.g. plain,success); "
                         "skips the experiments and the streaming first-byte rows")
    args = ap.parse_args()

    # wrk takes whole seconds.
    duration = max(1, round(args.duration or (1 if args.smoke else 5)))
    warmup = max(0, round(args.warmup if args.warmup is not None else (0 if args.smoke else 1)))
    rounds = args.rounds or (1 if args.smoke else 3)
    bodies = ["1KB"] if args.smoke else ["1KB", "50KB"]
    conns_list = [32] if args.smoke else [32, 1]  # the smoke checks the harness, not a figure
    experiments = not (args.smoke or args.no_experiments or args.only)

    t_start = time.monotonic()
    if RUN.exists():
        shutil.rmtree(RUN)
    RUN.mkdir(parents=True)
    # Snapshot the module: a concurrent scripts/build.sh must not swap it mid-run.
    src_module = Path(args.module).resolve()
    MODULE = RUN / "llm_failover.wasm"
    shutil.copyfile(src_module, MODULE)
    CLI = Path(args.cli).resolve()
    atexit.register(stop_all)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    ncpu = os.cpu_count() or 1
    # Pinning (2 cores): nginx on CPU 0, wrk on the last CPU, Envoy's 2 workers float on all.
    nginx_cpus = "0" if ncpu >= 2 else None
    wrk_cpus = str(ncpu - 1) if ncpu >= 2 else None

    body_files = make_body_files()


    if args.calibrate:
        return calibrate(args, body_files["1KB"], nginx_cpus, wrk_cpus, args.rounds or 5,
                         args.duration or 3, warmup)

    problem = build_calib() if experiments else None
    if problem:
        log("the do-nothing module did not build (rustc with the wasm32-wasip1 target is "
            f"needed): skipping the do-nothing experiments\n{problem}")
        EXPERIMENTS = [k for k in EXPERIMENTS if "noop" not in k]

    # The cross-vendor rows run in every run, the smoke included (a translated answer that
    # stops answering 2xx fails it); --only picks some.
    all_keys = ENVOY_KEYS + NATIVE_KEYS + XV_KEYS
    main_keys = list(ENVOY_KEYS) + NATIVE_KEYS + XV_KEYS
    if args.only:
        wanted = args.only.split(",")
        unknown = [k for k in wanted if k not in all_keys + STREAM_KEYS]
        if unknown:
            raise SystemExit(f"bench: --only: unknown configuration(s) {unknown}; known: "
                             f"{all_keys + STREAM_KEYS}")
        main_keys = [k for k in all_keys if k in wanted]
    elif args.smoke:  # the fourth wave's stream rows run in full runs only (CI time)
        main_keys = [k for k in main_keys if k not in XV4_STREAMS and k not in NATIVE_KEYS]
    if args.compare:
        module_b = RUN / "llm_failover_b.wasm"
        shutil.copyfile(Path(args.compare).resolve(), module_b)
        TARGETS["success_b"] = lambda: Target(
            "success_b", f"llm-failover, success path, module B ({module_b.stat().st_size:,} bytes)",
            NGINX_OK, expect_provider="primary", expect_attempts="1", module=module_b)
        main_keys.insert(main_keys.index("success") + 1 if "success" in main_keys else len(main_keys),
                         "success_b")
    # First-byte rows: always in full runs; with --only when it names plain_sse and success_sse.
    stream_keys = STREAM_KEYS if not args.only or all(k in wanted for k in STREAM_KEYS) else []
    keys = main_keys + stream_keys + (EXPERIMENTS if experiments else [])
    check_ports_free([NGINX_CONV, NGINX_RESP, NGINX_RESP_SSE] + list(range(PORT_BASE + 1, PORT_BASE + 10)) +
                     list(range(PORT_BASE + 10, PORT_BASE + 12 + 2 * len(keys))))
    fail_log = start_nginx(nginx_cpus)
    envoys = {}
    for i, key in enumerate(keys):
        envoys[key] = TARGETS[key]()
        start_envoy(envoys[key], i, args.envoy)
    for t in envoys.values():
        ready_envoy(t)
        probe(t, body_files)
        time.sleep(0.2)
        t.rss_idle = rss_kib(t.pids)

    # Cells: main configs at every (body, conns); the failed attempt alone at 1 conn (the
    # latency target) and 32 conns (scale); experiments at 32 conns.
    plan = []
    for conns in conns_list:
        for body in bodies:
            for key in main_keys:
                if key not in ONE_KB_ONLY or (body == "1KB" and conns == 32):
                    plan.append((key, body, conns))
            if experiments and conns == 32:
                for key in EXPERIMENTS:
                    if body == "1KB" or key not in ONE_KB_ONLY:
                        plan.append((key, body, conns))

    results = {}
    swap = {"success": "success_b", "success_b": "success"}
    for rnd in range(rounds):
        # --compare: A B in rounds 1, 3, ..., B A in 2, 4, ..., so neither module always goes first.
        order_r = plan if rnd % 2 == 0 or "success_b" not in envoys else [
            (swap.get(k, k), b, c) for k, b, c in plan]
        for key, body, conns in order_r:
            t = envoys[key]
            log(f"round {rnd + 1}/{rounds}: {key} {body} {conns} conns")
            r = measure(t, conns, duration, warmup, body_files[body + REQUESTS[t.request][1]],
                        wrk_cpus, fail_log)
            results.setdefault((key, body, conns), []).append(r)
    for t in envoys.values():
        t.rss_loaded = rss_kib(t.pids)
    fb_rows = []
    if stream_keys:
        log("streaming first byte")
        fb_rows = first_byte_rows(envoys, 200 if args.smoke else 2000, rounds)

    peer = None
    if args.with_litellm:
        venv = Path(args.litellm_venv)
        if not (venv / "bin" / "litellm").exists():
            peer = "skipped: LiteLLM is not installed (scripts/bench.sh --with-litellm installs it)"
        else:
            try:
                lt = start_litellm(venv)
                probe_hdrs = http("POST", lt.url(), body_files["1KB"].read_bytes(), {
                    "content-type": "application/json", "authorization": "Bearer sk-bench"},
                    timeout=60)
                if probe_hdrs[0] != 200:
                    raise RuntimeError(f"probe answered {probe_hdrs[0]}: {probe_hdrs[2][:300]!r}")
                fb = probe_hdrs[1].get("x-litellm-attempted-fallbacks")
                log(f"litellm probe: 200, x-litellm-attempted-fallbacks={fb}")
                lt.pids = tree_pids(lt.proc.pid)
                runs = []
                for rnd in range(rounds):
                    log(f"round {rnd + 1}/{rounds}: litellm 1KB 32 conns")
                    # Twice as long: at tens of requests per second the 32 requests in flight
                    # at the end of a run would otherwise weigh on CPU per request.
                    runs.append(measure(lt, 32, 2 * duration, max(warmup, 2), body_files["1KB"],
                                        wrk_cpus, fail_log))
                results[("litellm", "1KB", 32)] = runs
                lt.rss_loaded = rss_kib(lt.pids)
                envoys["litellm"] = lt
                peer = f"ok (LiteLLM, {CONCURRENCY} uvicorn workers, fallback header on probe: {fb})"
            except (Exception, SystemExit) as e:  # noqa: BLE001 - the peer is optional
                peer = f"skipped: LiteLLM failed: {e}"
            log(f"litellm: {peer}")

    rows = summarize(results, rounds)
    labels = {k: t.label for k, t in envoys.items()}
    labels["plain503"] = "plain route, failing primary (503)"
    order = ["plain", "success", "success_b", "native", "failover", "native_failover", "plain503",
             "plain_h2", "failover_h2", "native_failover_h2", "litellm"] + EXPERIMENTS + XV_KEYS + \
        ["native_xv_json", "native_sse", "native_xv_sse"]
    main_order = [k for k in order if not k.startswith("x") and k != "sse"
                  and k not in ("native_xv_json", "native_sse", "native_xv_sse")]
    elapsed = time.monotonic() - t_start

    print(f"\n## llm-failover benchmark ({'smoke' if args.smoke else 'full'}, "
          f"{rounds} round(s) x {duration:g} s, warm-up {warmup:g} s, median of rounds)\n")
    m = machine()
    env_ver = subprocess.run([args.envoy, "--version"], capture_output=True, text=True).stdout
    ver = re.search(r"/(\d+\.\d+\.\d+)/", env_ver)
    print(f"machine: {m['nproc']} CPUs, {m['cpu']}, kernel {m['kernel']}, Envoy "
          f"{ver.group(1) if ver else '?'} --concurrency {CONCURRENCY}; nginx pinned to CPU "
          f"{nginx_cpus}, wrk (1 thread) pinned to CPU {wrk_cpus}, Envoy unpinned\n")
    print(table(rows, labels, main_order, bodies, conns_list))
    if experiments:
        print("\nExperiments (config only, 32 connections), success path:\n")
        print(table(rows, labels, ["plain", "x_route", "x_noop1", "x_noop2", "x_down", "success"],
                    bodies, [32]))
        print("\nExperiments, failover path:\n")
        print(table(rows, labels, ["plain", "plain503", "x_fo_route", "x_fo_noop2", "failover",
                                   "plain_h2", "failover_h2"], bodies, [32]))
    if any(k in envoys for k in XV_KEYS + ["native_xv_json", "native_xv_sse"]):
        print("\nCross-vendor chains (1 KB; the caller's API differs from the provider's, each "
              "request and answer translated), next to the same-API paths:\n")
        xv4 = [x[0] for x in XV4]
        print(table(rows, labels, ["plain", "success", "xv_json", "xv_json_rev"] +
                    [k for k in xv4 if k not in XV4_STREAMS] + ["sse", "xv_sse", "xv_sse_rev"] +
                    [k for k in xv4 if k in XV4_STREAMS] +
                    ["native", "native_xv_json", "native_sse", "native_xv_sse"], ["1KB"], conns_list))
        for conns in conns_list:
            for key, base in (("xv_json", "success"), ("xv_json_rev", "success"),
                              ("xv_sse", "sse"), ("xv_sse_rev", "sse"),
                              ("native_xv_json", "native"), ("native_xv_sse", "native_sse"),
                              ("native_xv_json", "xv_json"), ("native_xv_sse", "xv_sse")):
                v = round_ratio(results, key, base, "1KB", conns)
                if v:
                    what = "the wasm build's" if base.startswith("xv") else "same-API"
                    print(f"- {key} CPU/request vs {what} {base}, {conns} conns: {v:.2f}x")
            # Each fourth-wave row at most 1.3x the Chat-to-Messages row of its shape.
            for key in xv4:
                base = "xv_sse" if key in XV4_STREAMS else "xv_json"
                v = round_ratio(results, key, base, "1KB", conns)
                if v:
                    print(f"- {key} CPU/request vs Chat-to-Messages {base}, {conns} conns: "
                          f"{v:.2f}x ({'PASS' if v <= 1.3 else 'MISS'}: at most 1.3x)")
    if args.compare:
        print("\nA/B (success path, module B vs --module, median of per-round ratios; the two ran "
              "next to each other in every round, A first in rounds 1, 3, ..., B first in 2, 4, ...):\n")
        print("| body | conns | req/s B/A | p50 B/A | p99 B/A | CPU/req B/A |\n|---|---:|---:|---:|---:|---:|")
        for conns in conns_list:
            for body in bodies:
                a, b = results.get(("success", body, conns)), results.get(("success_b", body, conns))
                if not a or not b:
                    continue
                cols = [median([rb[m] / ra[m] for ra, rb in zip(a, b) if ra[m]])
                        for m in ("rps", "p50_ms", "p99_ms", "cpu_us_per_req")]
                print(f"| {body} | {conns} | " + " | ".join(f"{c:.3f}" for c in cols) + " |")
    if fb_rows:
        print("\nStreaming first byte (healthy SSE answer, 1 connection, requests one after another; "
              "time from sending the request to the first body byte):\n")
        print("| configuration | p50 ms | p90 ms | p50 over plain route |")
        print("|---|---|---|---|")
        for label, p50, p90 in fb_rows:
            print(f"| {label} | {p50:.3f} | {p90:.3f} | {p50 - fb_rows[0][1]:+.3f} ms |")
        held = fb_rows[2][1] - fb_rows[0][1]
        native_held = next((p50 for label, p50, _ in fb_rows if label.startswith("native module, held")),
                           None)
        for label, p50, _ in fb_rows[3:]:
            if label.startswith("native module, held"):
                print(f"\nNative module, held stream's first byte over the wasm module's: "
                      f"{p50 - fb_rows[2][1]:+.3f} ms p50")
                continue
            base = native_held if label.startswith("native") and native_held else fb_rows[2][1]
            print(f"\nTranslated stream's first byte over the same-API held stream of its build "
                  f"({label}): {p50 - base:+.3f} ms p50")
        print(f"\nTarget: a healthy stream held until its first event adds <= ~1 ms p50 to "
              f"its first byte over the plain route: {held:+.3f} ms: {'PASS' if held <= 1.0 else 'MISS'}")
    print("\nChecks per configuration (medians): primary attempts per request (nginx 503 log), "
          "new primary connections per request, errors:\n")
    for (key, body, conns), r in sorted(rows.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1], -kv[0][2])):
        cx = r.get("primary_cx_per_req")
        print(f"- {key} {body} {conns} conns: {r['requests']} requests, primary attempts/req "
              f"{r['primary_attempts_per_req']:.3f}, primary new conns/req "
              f"{'-' if cx is None else f'{cx:.3f}'}, non-2xx {r['non_2xx']}, socket errors "
              f"{r['errors'] - r['non_2xx']}")
    size = MODULE.stat().st_size
    pages = wasm_memory_pages(MODULE)
    print(f"\nmodule: {src_module} {size:,} bytes (sha256 {hashlib.sha256(MODULE.read_bytes()).hexdigest()[:12]}); initial linear memory "
          f"{pages} pages ({(pages or 0) * 64} KiB) per VM")
    p_idle, p_load = (envoys["plain"].rss_idle, envoys["plain"].rss_loaded) if "plain" in envoys else (0, 0)
    for key in ("success", "success_b", "failover", "x_noop2"):
        t = envoys.get(key)
        if t is None or "plain" not in envoys:
            continue
        vms = t.wasm_vms() or (CONCURRENCY + 1)
        print(f"memory ({key}): Envoy RSS {t.rss_idle / 1024:.1f} MiB idle / {t.rss_loaded / 1024:.1f} MiB "
              f"after load vs plain {p_idle / 1024:.1f} / {p_load / 1024:.1f} MiB: +"
              f"{(t.rss_loaded - p_load) / 1024:.1f} MiB, i.e. +{(t.rss_loaded - p_load) / 1024 / vms:.1f} MiB "
              f"per wasm VM ({vms} live VMs per wasm.envoy.wasm.runtime.v8.active: one per worker, "
              f"the main thread's and the base VM)")
    for key in ("native", "native_failover"):
        t = envoys.get(key)
        if t is not None and "plain" in envoys:
            print(f"memory ({key}): Envoy RSS {t.rss_idle / 1024:.1f} MiB idle / "
                  f"{t.rss_loaded / 1024:.1f} MiB after load vs plain {p_idle / 1024:.1f} / "
                  f"{p_load / 1024:.1f} MiB: +{(t.rss_loaded - p_load) / 1024:.1f} MiB, i.e. "
                  f"+{(t.rss_loaded - p_load) / 1024 / CONCURRENCY:.1f} MiB per worker (no VM: one "
                  f"shared library, its configuration parsed once per worker)")
    if "litellm" in envoys:
        print(f"memory (litellm): RSS of the process tree after load {envoys['litellm'].rss_loaded / 1024:.1f} MiB")
    if args.with_litellm:
        print(f"\nLiteLLM peer: {peer}")
    print("\nTargets (BENCHMARKS.md):\n")
    for name, value, ok in targets(rows, results):
        print(f"- {name}: {value}: {'PASS' if ok else 'MISS'}")
    print(f"\nbench: finished in {elapsed:.0f} s; configs and logs in {RUN.relative_to(ROOT)}/")

    (WORK / "results.json").write_text(json.dumps({
        "machine": m, "rounds": rounds, "duration": duration, "warmup": warmup,
        "rows": {f"{k[0]}|{k[1]}|{k[2]}": v for k, v in rows.items()},
        "runs": {f"{k[0]}|{k[1]}|{k[2]}": v for k, v in results.items()},
        "module_bytes": size, "peer": peer,
        "first_byte_ms": [{"configuration": label, "p50": p50, "p90": p90}
                          for label, p50, p90 in fb_rows]}, indent=1))

    # The harness is broken if a configuration answered anything but its expected status.
    bad = [k for k, r in rows.items() if (k[0] != "plain503" and r["non_2xx"]) or
           r["errors"] - r["non_2xx"] > 0 or
           (k[0] == "failover" and r["primary_attempts_per_req"] < 0.99)]
    if bad:
        log(f"errors in {bad}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
