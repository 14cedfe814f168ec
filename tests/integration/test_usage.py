"""What each answer cost, on real Envoy (docs/behaviour.md section 15): after a
failover, ``llm_failover_tokens_total`` shows the serving provider's tokens exactly as its mock
reported them and none for the failed one, for JSON answers and streams cut anywhere, same-API
and translated; the access log's attempt record and the status endpoint (tokens per provider
over the last 15 minutes) carry them too.

One Envoy for the whole module: counters add up from one scenario to the next, so each step
checks the totals so far. Each worker adds what it counted to the counters once a second (its
tick), so each check waits for the totals (at most about a second)."""
import json
import re

import pytest

import harness
from harness import prometheus_samples, wait_until

pytestmark = pytest.mark.skipif(
    harness.external_mode(), reason="needs a fresh gateway (counters start at zero)")

CONFIG = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
status_path: /llm-failover/status
status_listen: api   # read through the API listener
providers:
  - {name: primary, endpoint: "127.0.0.1:${PRIMARY_PORT}", api: openai}
  - {name: backup, endpoint: "127.0.0.1:${BACKUP_PORT}", api: openai}
  - {name: claude, endpoint: "127.0.0.1:${CLAUDE_PORT}", api: anthropic, max_tokens: 300}
chains:
  - name: same
    models: ["gpt-4o"]
    providers: [primary, {provider: backup, model: gpt-4o-mini}]
  - name: crossed
    models: ["gpt-x"]
    providers: [primary, {provider: claude, model: claude-sonnet-4-5}]
"""

OPENAI_USAGE = {"prompt_tokens": 1200, "completion_tokens": 34, "total_tokens": 1234,
                "prompt_tokens_details": {"cached_tokens": 1024}}
CLAUDE_USAGE = {"input_tokens": 11, "cache_read_input_tokens": 1920,
                "cache_creation_input_tokens": 5, "output_tokens": 42}


def tokens(gw):
    """{(provider, model, kind): value} of llm_failover_tokens_total."""
    return {(s["provider"], s["model"], s["kind"]): int(v)
            for s, v in prometheus_samples(gw.prometheus(), "llm_failover_tokens_total")}


def wait_tokens(gw, expected):
    """Waits for llm_failover_tokens_total to be exactly `expected` (the workers' ticks)."""
    try:
        wait_until(lambda: tokens(gw) == expected, 5, "the tokens expected", interval=0.2)
    except harness.HarnessError:
        assert tokens(gw) == expected


def read_stream(r):
    text = r.body.decode()
    assert text.rstrip().endswith("data: [DONE]"), text
    return text


def test_the_serving_providers_tokens_are_counted_exactly_and_the_failed_ones_not(gateway):
    primary, backup, claude = gateway.mocks("primary", "backup", "claude")
    # The failing primary reports usage in its error body too: it must not count.
    primary.set_default(status=503, body=json.dumps(
        {"error": {"message": "busy"}, "usage": {"prompt_tokens": 999, "completion_tokens": 9}}))
    backup.set_default(usage=OPENAI_USAGE, chunks=3, chunk_bytes=9)
    claude.set_default(strict=True, usage=CLAUDE_USAGE, usage_events="both", chunks=2,
                       chunk_bytes=7)
    # Access log lines are flushed every 100 ms (Envoy's default is 10 s).
    gw = gateway.start(CONFIG, extra_args=["--file-flush-interval-msec", "100"])

    # JSON, same API: the fallback's usage as its mock wrote it.
    r = gw.chat("gpt-4o", headers={"x-request-id": "usage-json"})
    assert r.status == 200 and r.header("x-llm-provider") == "backup", r.body
    expected = {("backup", "gpt-4o-mini", "input"): 1200, ("backup", "gpt-4o-mini", "output"): 34,
                ("backup", "gpt-4o-mini", "cached_input"): 1024}
    wait_tokens(gw, expected)

    # A stream cut every 9 bytes, the caller asking for usage: its last chunk counts.
    r = gw.chat("gpt-4o", stream=True, stream_options={"include_usage": True})
    assert r.status == 200, r.body
    assert '"prompt_tokens":1200' in read_stream(r).replace(" ", "")
    expected = {k: 2 * v for k, v in expected.items()}
    wait_tokens(gw, expected)

    # Translated: an OpenAI caller served by Anthropic, JSON then a stream cut every 7 bytes.
    # Input is every prompt token Anthropic read (11 + 1920 cached + 5 written to the cache).
    r = gw.chat("gpt-x", headers={"x-request-id": "usage-translated"})
    assert r.status == 200 and r.header("x-llm-provider") == "claude", r.body
    crossed = {("claude", "claude-sonnet-4-5", "input"): 1936,
               ("claude", "claude-sonnet-4-5", "output"): 42,
               ("claude", "claude-sonnet-4-5", "cached_input"): 1920}
    wait_tokens(gw, {**expected, **crossed})
    # The caller asked for no usage: it gets none, and the tokens still count.
    r = gw.chat("gpt-x", stream=True)
    assert r.status == 200, r.body
    assert '"usage"' not in read_stream(r)
    crossed = {k: 2 * v for k, v in crossed.items()}
    wait_tokens(gw, {**expected, **crossed})
    assert not [k for k in tokens(gw) if k[0] == "primary"]

    # The access log's attempt record: the serving attempt's entry carries its usage.
    def line(request_id):
        return next((l for l in gw.log().splitlines() if f"request_id={request_id}" in l), None)
    json_line = wait_until(lambda: line("usage-json"), 5, "access log line")
    assert re.search(r"llm_failover=primary:overloaded:\d+ms,backup:ok:\d+ms:"
                     r"in=1200/out=34/cached=1024 ", json_line), json_line
    crossed_line = wait_until(lambda: line("usage-translated"), 5, "access log line")
    assert ":in=1936/out=42/cached=1920 " in crossed_line, crossed_line

    # The status endpoint: each provider's tokens over the last 15 minutes, the workers'
    # shared records added up (the failed primary's: none).
    def status_tokens():
        status = gw.request("GET", "/llm-failover/status").json()
        return {p["name"]: p["tokens"] for p in status["providers"]}
    want = {"primary": {"window_ms": 900000, "input": 0, "output": 0, "cached_input": 0},
            "backup": {"window_ms": 900000, "input": 2400, "output": 68, "cached_input": 2048},
            "claude": {"window_ms": 900000, "input": 3872, "output": 84, "cached_input": 3840}}
    try:
        wait_until(lambda: status_tokens() == want, 5, "the status endpoint's tokens",
                   interval=0.2)
    except harness.HarnessError:
        assert status_tokens() == want
