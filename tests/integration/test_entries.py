"""What a chain entry decides for itself (docs/behaviour.md sections 2.4 and 7), end to end on one
real Envoy: `same_residency` keeps a request's walk in its first entry's residency (skips with
reason `residency` in metrics and the access log); an entry's `effort` and `max_tokens` reach
its provider in that provider's dialect, and an entry without them gets the caller's bytes; with
`timeouts.first_token`, a request that did not ask for a stream is streamed from each provider,
cut as `timeout` when no output comes in time, and answered with one JSON answer in the
caller's API (Chat, Messages, an `openai` SDK Response, a `google-genai` GenerateContentResponse).

One gateway for the module (counters are compared as differences), mocks in this process."""
import json
import time

import pytest

import harness

if harness.external_mode():
    pytest.skip("needs its own gateway and mocks", allow_module_level=True)

MOCKS = ("us1", "eu1", "us2", "eu2", "chat", "claude", "plain")
CONFIG = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
breaker: {failures: 1000}
providers:
  - {name: us1, endpoint: "127.0.0.1:${US1_PORT}", residency: us, models: ["gpt-*"]}
  - {name: eu1, endpoint: "127.0.0.1:${EU1_PORT}", residency: eu}
  - {name: us2, endpoint: "127.0.0.1:${US2_PORT}", residency: us}
  - {name: eu2, endpoint: "127.0.0.1:${EU2_PORT}", residency: eu}
  - {name: chat, endpoint: "127.0.0.1:${CHAT_PORT}"}
  - {name: claude, endpoint: "127.0.0.1:${CLAUDE_PORT}", api: anthropic,
     credential: {header: x-api-key, value: sk-claude}}
  - {name: plain, endpoint: "127.0.0.1:${PLAIN_PORT}"}
chains:
  - name: settings
    models: ["set-*"]
    max_attempts: 3
    providers:
      - {provider: chat, effort: low, max_tokens: 100}
      - {provider: claude, model: claude-sonnet-4-5, effort: medium}
      - plain
  - name: resident                # the first entry serves gpt-* only: decided per request
    models: ["*"]
    same_residency: true
    max_attempts: 4
    providers: [us1, eu1, us2, eu2]
"""


class Module(harness.MockedGateway):
    def __init__(self, tmp, config=CONFIG, mocks=MOCKS):
        super().__init__(config, tmp, mocks, extra_args=["--file-flush-interval-msec", "50"])


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    m = Module(tmp_path_factory.mktemp("entries"))
    yield m
    m.stop()


@pytest.fixture
def entries(mod):
    mod.reset()
    return mod


def test_same_residency_skips_entries_outside_the_first_entrys_residency(entries):
    m = entries
    for name in ("us1", "eu1"):
        m.mocks[name].set_default(status=503)
    before = m.skipped()
    # gpt-4o: us1 is the request's first entry; eu1 and eu2 are in another residency.
    r = m.gw.chat("gpt-4o", headers={"x-request-id": "res-us"})
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "us2"
    assert r.header("x-llm-attempts") == "2"
    assert m.walk("res-us") == "eu1:skipped:residency,eu2:skipped:residency," \
                              "us1:overloaded:Nms,us2:ok:Nms:in=5/out=7/cached=0"
    # mistral: us1 does not serve it, so eu1 is the request's first entry: the walk stays in eu.
    r = m.gw.chat("mistral", headers={"x-request-id": "res-eu"})
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "eu2"
    assert m.walk("res-eu") == ("us1:skipped:model,us2:skipped:residency,eu1:overloaded:Nms,"
                                "eu2:ok:Nms:in=5/out=7/cached=0")
    assert m.mocks["us2"].request_count() == 1 and m.mocks["eu2"].request_count() == 1
    after = m.skipped()
    grown = {k: v - before.get(k, 0) for k, v in after.items()
             if v != before.get(k, 0) and k[1] == "residency"}
    assert grown == {("eu1", "residency"): 1, ("eu2", "residency"): 1,
                     ("us2", "residency"): 1}, after


def test_each_entry_is_sent_its_effort_and_max_tokens_in_its_providers_dialect(entries):
    m = entries
    m.mocks["chat"].set_default(status=503)
    m.mocks["claude"].set_default(status=503, strict=True)
    caller = ('{"model": "set-a", "max_tokens": 64, "temperature": 0.3,\n'
              ' "messages": [{"role": "user", "content": "hi"}]}')
    r = m.gw.post("/v1/chat/completions", body=caller,
                  headers={"content-type": "application/json"})
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "plain"
    (chat,) = m.mocks["chat"].requests()
    sent = json.loads(chat["body"])
    assert sent["reasoning_effort"] == "low" and sent["max_completion_tokens"] == 100, sent
    assert "max_tokens" not in sent and sent["temperature"] == 0.3, sent
    (claude,) = m.mocks["claude"].requests()
    assert claude["rejected"] is None, claude["rejected"]
    assert claude["path"] == "/v1/messages"
    sent = json.loads(claude["body"])
    assert sent["model"] == "claude-sonnet-4-5"
    # medium is a 10,000-token budget; max_tokens must stay above it (64 of answer kept).
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 10000}, sent
    assert sent["max_tokens"] == 10064 and "temperature" not in sent, sent
    (plain,) = m.mocks["plain"].requests()
    assert plain["body"] == caller, "an entry without settings gets the caller's bytes"
    # A Responses request: reasoning.effort and max_output_tokens (Messages cannot take it).
    r = m.gw.post("/v1/responses", json={"model": "set-r", "input": "hi",
                                        "reasoning": {"summary": "auto"}})
    assert r.status == 200, r.text
    sent = json.loads(m.mocks["chat"].requests()[-1]["body"])
    assert sent["reasoning"] == {"summary": "auto", "effort": "low"}, sent
    assert sent["max_output_tokens"] == 100, sent


GATHER = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
breaker: {failures: 1000}
timeouts: {first_token: 1s}
providers:
  - {name: slow, endpoint: "127.0.0.1:${SLOW_PORT}"}
  - {name: fast, endpoint: "127.0.0.1:${FAST_PORT}"}
  - {name: claude, endpoint: "127.0.0.1:${CLAUDE_PORT}", api: anthropic,
     credential: {header: x-api-key, value: sk-claude}}
  - {name: gpt, endpoint: "127.0.0.1:${GPT_PORT}", api: openai}
  - {name: gem, endpoint: "127.0.0.1:${GEM_PORT}", api: gemini_native,
     credential: {header: x-goog-api-key, value: gm-key}}
chains:
  - {name: across, models: ["x-*"],
     providers: [slow, {provider: claude, model: claude-sonnet-4-5}]}
  - {name: back, models: ["claude-*"], providers: [{provider: gpt, model: gpt-4o}]}
  - {name: google, models: ["gemini-2.5-flash"],
     providers: [gem, {provider: gpt, model: gpt-4o}]}
  - {name: to-google, models: ["gemini-back"],
     providers: [{provider: gpt, model: gpt-4o}, {provider: gem, model: gemini-2.5-flash}]}
  - {name: main, providers: [slow, fast]}
"""


@pytest.fixture(scope="module")
def gathering(tmp_path_factory):
    m = Module(tmp_path_factory.mktemp("gather"), GATHER,
               ("slow", "fast", "claude", "gpt", "gem"))
    yield m
    m.stop()


# Gathering holds the answer's headers until its first output: Envoy 1.36 never holds an
# answer (behaviour.md 5), so a request not streamed goes there as it is.
needs_hold = pytest.mark.skipif(
    not harness.holds_answers(),
    reason="Envoy 1.36 never holds an answer (1.36.4 crashes retrying a held answer): a request "
           "not streamed is sent as it is there, not gathered")


@needs_hold
def test_a_request_not_streamed_is_streamed_under_first_token_and_answered_whole(gathering):
    m = gathering
    m.reset()
    # Headers at once, no output within the first-token timeout: cut, falls over.
    m.mocks["slow"].set_default(first_chunk_delay_ms=3000)
    # On time, then longer than the first-token timeout to finish: never cut.
    m.mocks["fast"].set_default(chunks=4, chunk_interval_ms=400,
                                usage={"prompt_tokens": 7, "completion_tokens": 4,
                                       "total_tokens": 11})
    caller = '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}'
    r = m.gw.post("/v1/chat/completions", body=caller,
                  headers={"content-type": "application/json"}, timeout=15)
    assert r.status == 200, r.text
    assert r.header("content-type") == "application/json"
    assert r.header("x-llm-provider") == "fast"
    assert r.header("x-llm-fallback-reason") == "timeout"
    answer = r.json()
    assert answer["object"] == "chat.completion", answer
    assert answer["choices"][0]["message"]["content"] == "fast:0 fast:1 fast:2 fast:3 "
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"]["prompt_tokens"] == 7 and answer["usage"]["completion_tokens"] == 4
    for name in ("slow", "fast"):
        sent = json.loads(m.mocks[name].requests()[-1]["body"])
        assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    # Several choices cannot be gathered: sent as it is (and slow answers JSON at once).
    m.reset()
    caller = '{"model": "gpt-4o", "n": 2, "messages": [{"role": "user", "content": "hi"}]}'
    r = m.gw.post("/v1/chat/completions", body=caller,
                  headers={"content-type": "application/json"})
    assert r.status == 200 and r.header("x-llm-provider") == "slow", r.text
    assert m.mocks["slow"].requests()[-1]["body"] == caller


@needs_hold
def test_a_gathered_answer_crosses_apis_both_ways(gathering):
    m = gathering
    m.reset()
    m.mocks["slow"].set_default(first_chunk_delay_ms=3000)
    m.mocks["claude"].set_default(strict=True, usage={"input_tokens": 9, "output_tokens": 3})
    r = m.gw.post("/v1/chat/completions", timeout=15, json={
        "model": "x-1", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status == 200 and r.header("x-llm-provider") == "claude", r.text
    answer = r.json()
    assert answer["object"] == "chat.completion", answer
    assert answer["choices"][0]["message"]["content"] == "claude:0 claude:1 claude:2 "
    assert answer["usage"]["prompt_tokens"] == 9 and answer["usage"]["completion_tokens"] == 3
    sent = json.loads(m.mocks["claude"].requests()[-1]["body"])
    assert sent["stream"] is True and "stream_options" not in sent, sent
    # An Anthropic caller gathered from an OpenAI provider's stream.
    r = m.gw.post("/v1/messages", timeout=15, headers={"anthropic-version": "2023-06-01"},
                  json={"model": "claude-3", "max_tokens": 50,
                        "messages": [{"role": "user", "content": "hi"}]})
    assert r.status == 200 and r.header("x-llm-provider") == "gpt", r.text
    answer = r.json()
    assert answer["type"] == "message", answer
    assert answer["content"][0]["text"] == "gpt:0 gpt:1 gpt:2 "


@needs_hold
def test_an_openai_responses_app_not_streamed_is_gathered_under_first_token(gathering):
    """`client.responses.create` without `stream`: each attempt is sent as a stream, the primary
    that gives no output within the first-token timeout is cut as `timeout`, and the SDK gets
    one Response gathered from the fallback's stream: from Anthropic's events (translated, a
    function call included) and from a same-API Responses stream."""
    import openai
    m = gathering
    m.reset()
    m.mocks["slow"].set_default(first_chunk_delay_ms=3000)
    m.mocks["claude"].set_default(strict=True, chunks=2, tool_calls=[
        {"id": "toolu_01A", "name": "get_weather", "arguments": {"city": "Paris"}}],
        usage={"input_tokens": 9, "cache_read_input_tokens": 4, "output_tokens": 3})
    c = openai.OpenAI(base_url=m.gw.url + "/v1", api_key="gw-key", max_retries=0, timeout=15)
    tools = [{"type": "function", "name": "get_weather", "description": "Weather in a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    started = time.monotonic()
    raw = c.responses.with_raw_response.create(model="x-1", input="Weather in Paris?",
                                               tools=tools)
    took = time.monotonic() - started
    r = raw.parse()
    assert raw.headers["x-llm-provider"] == "claude", raw.headers
    assert raw.headers["x-llm-fallback-reason"] == "timeout"
    assert raw.headers["content-type"] == "application/json"
    assert 0.9 < took < 3.0, f"{took:.2f}s: about the 1 s first-token timeout"
    assert r.object == "response" and r.status == "completed", r
    assert r.output_text == "claude:0 claude:1 "
    (call,) = [o for o in r.output if o.type == "function_call"]
    assert (call.call_id, call.name, json.loads(call.arguments)) == \
        ("toolu_01A", "get_weather", {"city": "Paris"})
    assert (r.usage.input_tokens, r.usage.output_tokens) == (13, 3), r.usage
    assert r.usage.input_tokens_details.cached_tokens == 4
    slow = json.loads(m.mocks["slow"].requests()[-1]["body"])
    assert slow["stream"] is True and slow["input"] == "Weather in Paris?", slow
    (sent,) = m.mocks["claude"].requests()
    assert sent["rejected"] is None, sent["rejected"]
    assert json.loads(sent["body"])["stream"] is True
    # The same API on the fallback: its typed events gathered into one Response.
    m.mocks["fast"].set_default(chunks=3, usage={
        "input_tokens": 6, "output_tokens": 3, "total_tokens": 9,
        "input_tokens_details": {"cached_tokens": 2},
        "output_tokens_details": {"reasoning_tokens": 0}})
    raw = c.responses.with_raw_response.create(model="gpt-4o", input="hi")
    r = raw.parse()
    assert raw.headers["x-llm-provider"] == "fast" and r.status == "completed", raw.headers
    assert r.output_text == "fast:0 fast:1 fast:2 "
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens) == (6, 3, 9)
    assert r.usage.input_tokens_details.cached_tokens == 2
    assert json.loads(m.mocks["fast"].requests()[-1]["body"])["stream"] is True


@needs_hold
def test_a_google_genai_app_not_streamed_is_gathered_under_first_token(gathering):
    """google-genai's `generate_content`: each attempt asks for a stream (a Gemini provider
    `:streamGenerateContent?alt=sse`, an OpenAI one `"stream": true`), the primary with no
    output in time is cut as `timeout`, and the SDK gets one GenerateContentResponse gathered
    from the fallback's stream, usage included, in both directions."""
    from google import genai
    from google.genai import types
    import cloud_mock
    m = gathering
    m.reset()
    if not hasattr(m.mocks["gem"], "server"):
        pytest.skip("the Gemini mock runs in-process")
    m.mocks["gem"].server.cloud = cloud_mock.validate({"kind": "gemini", "api_key": "gm-key"})
    m.mocks["gem"].set_default(first_chunk_delay_ms=3000)
    m.mocks["gpt"].set_default(chunks=2, usage={
        "prompt_tokens": 8, "completion_tokens": 2, "total_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 3}})
    client = genai.Client(api_key="gw-key", http_options=types.HttpOptions(
        base_url=m.gw.url, api_version="v1beta", timeout=15_000,
        retry_options=types.HttpRetryOptions(attempts=1)))
    started = time.monotonic()
    r = client.models.generate_content(model="gemini-2.5-flash", contents="hi")
    took = time.monotonic() - started
    assert 0.9 < took < 3.0, f"{took:.2f}s: about the 1 s first-token timeout"
    assert r.text == "gpt:0 gpt:1 ", r
    assert r.candidates[0].finish_reason == types.FinishReason.STOP
    u = r.usage_metadata
    assert (u.prompt_token_count, u.candidates_token_count, u.cached_content_token_count) == \
        (8, 2, 3), u
    (gem,) = m.mocks["gem"].requests()
    assert gem["rejected"] is None, gem["rejected"]
    assert gem["path"] == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    sent = json.loads(m.mocks["gpt"].requests()[-1]["body"])
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}, sent
    # The other way: an OpenAI primary that stalls, a Gemini fallback's stream gathered.
    m.mocks["gpt"].set_default(first_chunk_delay_ms=3000)
    m.mocks["gem"].set_default(chunks=3)
    r = client.models.generate_content(model="gemini-back", contents="hi")
    assert r.text == "gem:0 gem:1 gem:2 ", r
    assert r.usage_metadata.prompt_token_count is not None, r.usage_metadata
    gem = m.mocks["gem"].requests()[-1]
    assert gem["rejected"] is None, gem["rejected"]
    assert gem["path"] == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
