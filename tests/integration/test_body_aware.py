"""Failover on what the answer says (behaviour.md 3), through a real Envoy running the built filter:
the upstream role holds a failing answer (or a 200 stream) until it has read the start of its
body, refines the class from the providers' own error bodies (mock presets), and either marks
it for retry, moves the walk to a chain's alternative list, or releases it untouched."""
import json

import pytest
import harness
from harness import prometheus_samples

# Two chains over the same providers: `gpt-*` requests walk primary -> secondary and name
# alternative lists; every other model walks the same providers without lists.
CONFIG = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
providers:
  - {name: primary, endpoint: "127.0.0.1:${PRIMARY_PORT}",
     credential: {header: authorization, prefix: "Bearer ", value: sk-primary}}
  - {name: secondary, endpoint: "127.0.0.1:${SECONDARY_PORT}",
     credential: {header: authorization, prefix: "Bearer ", value: sk-secondary}}
  - {name: big, endpoint: "127.0.0.1:${BIG_PORT}",
     credential: {header: x-api-key, value: sk-big}}
  - {name: safe, endpoint: "127.0.0.1:${SAFE_PORT}",
     credential: {header: x-api-key, value: sk-safe}}
status_path: /llm-failover/status
status_listen: api   # this test reads it through the API listener
chains:
  - name: lists
    models: ["gpt-*"]
    providers: [primary, secondary]
    context_window: [{provider: big, model: big-context-model}]
    content_policy: [safe]
  - name: solo
    models: ["solo-*"]
    providers: [primary]
    context_window: [big]
  - name: plain
    providers: [primary, secondary]
"""


# Envoy 1.36-1.38 (grouping mode) fix a request's providers when it is routed: the renderer
# refuses alternative lists there, so the `lists` chain goes without them (docs/older-envoys.md).
LISTS = ("    context_window: [{provider: big, model: big-context-model}]\n"
         "    content_policy: [safe]\n")
SOLO_LIST = "    context_window: [big]\n"
needs_hold = pytest.mark.skipif(
    not harness.holds_answers(),
    reason="Envoy 1.36 classifies on status and headers only (1.36.4 crashes retrying an "
           "attempt whose answer was held to read its body)")
needs_lists = pytest.mark.skipif(
    harness.grouping_mode(),
    reason="alternative lists need Envoy 1.39+ (refused at render for Envoy 1.36-1.38)")


@pytest.fixture
def body_gw(gateway):
    mocks = gateway.mocks("primary", "secondary", "big", "safe")
    assert LISTS in CONFIG and SOLO_LIST in CONFIG
    config = CONFIG
    if harness.grouping_mode():
        config = config.replace(LISTS, "").replace(SOLO_LIST, "")
    return (gateway.start(config), *mocks)


def model_of(record):
    return json.loads(record["body"])["model"]


@needs_lists
def test_context_window_moves_to_the_larger_context_list_with_only_the_model_changed(body_gw):
    gw, primary, secondary, big, safe = body_gw
    primary.set_default(preset="openai_context_length")
    body = ('{"model": "gpt-4o", "messages": [{"role": "user", "content": "'
            + "long " * 2000 + '"}], "temperature": 0.25}').encode()
    r = gw.post("/v1/chat/completions", body=body,
                headers={"content-type": "application/json"})
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "big"
    assert r.header("x-llm-attempts") == "2"
    assert r.header("x-llm-fallback-reason") == "context_window_exceeded"
    assert secondary.request_count() == 0, "the list replaces the next chain entry"
    sent = big.last_request()
    assert sent["body"].encode() == body.replace(b'"gpt-4o"', b'"big-context-model"')
    assert [v for k, v in sent["headers"] if k.lower() == "x-api-key"] == ["sk-big"]
    assert not [v for k, v in sent["headers"] if k.lower() == "authorization"]


@needs_lists
def test_context_window_moves_to_a_one_provider_chains_list(body_gw):
    # A one-provider chain with a list: Envoy was given room for it.
    gw, primary, secondary, big, _ = body_gw
    primary.set_default(preset="openai_context_length")
    r = gw.chat("solo-1")
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "big"
    assert r.header("x-llm-fallback-reason") == "context_window_exceeded"
    assert secondary.request_count() + big.request_count() == 1


@needs_hold
def test_context_window_goes_back_to_the_caller_without_a_list(body_gw):
    """behaviour.md 3: without a context_window list (and no fallback_on naming the class)
    the prompt is the request's problem: the provider's 400 goes back, no fallback is tried."""
    gw, primary, secondary, big, _ = body_gw
    primary.set_default(preset="anthropic_prompt_too_long")
    r = gw.chat("llama-3")
    assert r.status == 400, r.text
    assert "prompt is too long" in r.text, "the body is the provider's own"
    assert r.header("x-llm-provider") == "primary"
    assert secondary.request_count() == 0 and big.request_count() == 0


@needs_hold
def test_content_filter_goes_back_to_the_caller_without_a_list(body_gw):
    gw, primary, secondary, _, safe = body_gw
    primary.set_default(preset="azure_content_filter")
    r = gw.chat("llama-3")
    assert r.status == 400
    assert r.json()["error"]["code"] == "content_filter"
    assert "OpenAI\u2019s content management policy" in r.text, "the body is the provider's own"
    assert r.header("x-llm-provider") == "primary"
    assert r.header("x-llm-failover-retry") is None
    assert secondary.request_count() == 0 and safe.request_count() == 0

    def outcome():
        return {tuple(sorted(k.items())): v for k, v in
                prometheus_samples(gw.prometheus(), "llm_failover_attempts_total")}
    key = (("outcome", "content_filtered"), ("provider", "primary"))
    assert outcome().get(key) == 1


@needs_lists
def test_content_filter_goes_to_the_content_policy_list(body_gw):
    gw, primary, secondary, _, safe = body_gw
    primary.set_default(preset="azure_content_filter")
    r = gw.chat("gpt-4o")
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "safe"
    assert r.header("x-llm-fallback-reason") == "content_filtered"
    assert secondary.request_count() == 0
    assert model_of(safe.last_request()) == "gpt-4o"


def test_a_plain_400_still_goes_back_unread_into_a_class(body_gw):
    gw, primary, secondary, _, _ = body_gw
    primary.set_default(status=400, error={"message": "temperature must be at most 2",
                                           "code": "invalid_value"})
    r = gw.chat("gpt-4o")
    assert r.status == 400
    assert r.json()["error"]["message"] == "temperature must be at most 2"
    assert secondary.request_count() == 0


@needs_hold
def test_spent_quota_moves_on_and_the_next_request_skips_the_provider(body_gw):
    gw, primary, secondary, _, _ = body_gw
    primary.set_default(preset="openai_insufficient_quota")
    r = gw.chat("llama-3")
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-fallback-reason") == "quota_exhausted"
    r = gw.chat("llama-3")
    assert r.status == 200
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-fallback-reason") == "breaker_open"
    assert primary.request_count() == 1, "a provider out of quota is not called again"
    status = gw.request("GET", "/llm-failover/status").json()
    p = next(p for p in status["providers"] if p["name"] == "primary")
    assert p["last_failure"]["class"] == "quota_exhausted"
    assert p["dead_until_ms"] is not None
    assert p["state"] == "closed", "a spent quota does not count toward the breaker"


@needs_hold
@pytest.mark.parametrize("preset", ["anthropic_overloaded_stream", "openai_error_stream"])
def test_an_error_as_first_stream_event_is_served_by_the_next_provider(body_gw, preset):
    gw, primary, secondary, _, _ = body_gw
    primary.set_default(preset=preset)
    r = gw.chat("llama-3", stream=True)
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-fallback-reason") == "overloaded"
    assert b"error" not in r.body and b"primary" not in r.body, r.body
    assert r.sse_content().startswith("secondary:0 ")
    assert r.sse_events()[-1][1] == "[DONE]"


@needs_hold
def test_an_error_event_split_across_chunks_is_still_read_whole(body_gw):
    gw, primary, secondary, _, _ = body_gw
    primary.set_default(stream=True, chunk_interval_ms=150, events=[
        "event: error\ndata: {\"type\": \"error\", \"error\": ",
        "{\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n"])
    r = gw.chat("llama-3", stream=True)
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-fallback-reason") == "overloaded"
    assert b"overloaded_error" not in r.body


def test_a_healthy_first_event_passes_byte_identical_and_the_stream_is_not_buffered(body_gw):
    gw, primary, secondary, _, _ = body_gw
    events = [
        'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,'
        '"delta":{"role":"assistant","content":"caf\u00e9 \\"error\\""}}]}\n\n',
        ': keep-alive comment\n\n',
        'event: message_delta\ndata: {"type":"message_delta","usage":{"error":0}}\n\n',
        'data: [DONE]\n\n',
    ]
    primary.set_default(stream=True, events=events, chunk_interval_ms=250)
    r = gw.chat("llama-3", stream=True)
    assert r.status == 200
    assert r.header("x-llm-provider") == "primary"
    assert r.body == "".join(events).encode()
    assert secondary.request_count() == 0
    # Released at the first event, not held: the chunks arrive as the provider sends them.
    times = [t for t, _ in r.chunks]
    assert times[-1] - times[0] > 0.6, times


def test_a_stream_that_is_not_sse_or_a_request_that_did_not_ask_is_not_held(body_gw):
    gw, primary, _, _, _ = body_gw
    # Not a streamed request: a JSON 200 goes through as always.
    r = gw.chat("llama-3")
    assert r.status == 200 and r.header("x-llm-provider") == "primary"
    # A streamed request answered with an SSE error as plain JSON is a 200 like any other.
    primary.set_default(stream=False, content="fine")
    r = gw.chat("llama-3", stream=True)
    assert r.status == 200 and r.json()["choices"][0]["message"]["content"] == "fine"


@needs_lists
def test_no_response_at_the_end_of_a_walk_with_lists_reaches_no_provider(body_gw):
    """Envoy was given room for the list; the walk ended without it, and Envoy retries a
    refused connection by itself into a slot no plan filled: no provider is called."""
    gw, primary, secondary, big, safe = body_gw
    primary.down()
    r = gw.chat("solo-1")
    assert r.status == 503, r.text
    assert r.json()["error"]["code"] == "fallbacks_exhausted"
    assert r.header("x-llm-provider") == "primary"
    assert r.header("x-llm-attempts") == "1"
    assert big.request_count() == 0 and secondary.request_count() == 0
    assert safe.request_count() == 0
