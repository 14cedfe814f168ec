"""Chains across vendors (behaviour.md 13), end to end: the official `openai` and `anthropic`
Python SDKs call a real Envoy whose chain falls over from one vendor's API to the other's, and
the mock providers answer like the real APIs, refusing (400) what those refuse (`strict`,
mock_api_rules.py). Every test asserts both sides: what the caller got (content, tool calls,
stop reasons, usage, model, errors in its own dialect) and what each provider received (path,
credentials, `anthropic-version`, the translated body).

Also: capability skips (behaviour.md 2.4) in headers, metrics and the access log, body-read classes on
translated attempts, and regression tests named after bugs Envoy AI Gateway's users reported
in its translators (envoyproxy/ai-gateway#2135, #2162, #2290, #2352)."""
import json
import os
import re
import subprocess
import sys

import pytest

import harness
from harness import http_request, prometheus_samples, wait_until

if harness.external_mode():
    pytest.skip("needs its own gateway and mocks (5 of them, strict)", allow_module_level=True)
import anthropic  # noqa: E402
import openai  # noqa: E402

# Envoy 1.36-1.38 (grouping mode) fix a request's providers when it is routed: the renderer
# refuses alternative lists there (README "Older Envoys"), so the `ctx` chain goes without.
LISTS = "    context_window: [{provider: backup, model: gpt-long}]\n"
CONFIG = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT:-10000}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT:-9901}"}
breaker: {failures: 1000, cooldown: 60s}

providers:
  - name: openai
    endpoint: "127.0.0.1:${OPENAI_PORT:-18301}"
    api: openai
    credential: {header: authorization, prefix: "Bearer ", value: sk-openai}
  - name: anthropic
    endpoint: "127.0.0.1:${ANTHROPIC_PORT:-18302}"
    api: anthropic
    max_tokens: 1024
    credential: {header: x-api-key, value: sk-anthropic}
  - name: backup                  # no api: whatever its caller speaks, never translated
    endpoint: "127.0.0.1:${BACKUP_PORT:-18303}"
    credential: {header: authorization, prefix: "Bearer ", value: sk-backup}
  - name: spare                   # another OpenAI endpoint
    endpoint: "127.0.0.1:${SPARE_PORT:-18304}"
    api: openai
    credential: {header: authorization, prefix: "Bearer ", value: sk-spare}
  - name: gemini                  # Gemini's OpenAI endpoint (Chat Completions only), on spare
    endpoint: "127.0.0.1:${SPARE_PORT:-18304}"
    api: gemini
    credential: {header: authorization, prefix: "Bearer ", value: sk-gemini}
  - name: relay                   # another Anthropic Messages endpoint
    endpoint: "127.0.0.1:${RELAY_PORT:-18305}"
    api: anthropic
    credential: {header: x-api-key, value: sk-relay}

chains:
  - name: caps-first              # capabilities never skip the first entry
    models: [caps-first]
    providers:
      - {provider: anthropic, model: claude-small,
         capabilities: {vision: false, tools: false, context_window: 2000}}
      - {provider: backup, model: gpt-backup}
  - name: caps
    models: ["caps-*"]
    providers:
      - openai
      - {provider: anthropic, model: claude-small,
         capabilities: {vision: false, tools: false, context_window: 2000}}
      - {provider: backup, model: gpt-backup}
  - name: ctx
    models: ["ctx-*"]
    providers: [openai, {provider: anthropic, model: claude-sonnet-4-5}]
""" + LISTS + """
  - name: openai-endpoints        # OpenAI's other endpoints: OpenAI, then another OpenAI
    models: ["oai-*"]
    paths: ["/v1/responses", "/v1/embeddings", "/v1/completions"]
    providers: [openai, {provider: spare, model: gpt-spare}, {provider: anthropic, model: claude-x}]
  - name: resp-gemini             # a Responses app: OpenAI, then a Chat-only provider
    models: ["rg-*"]
    providers: [openai, {provider: gemini, model: gemini-2.5-flash}]
  - name: resp-three              # a Responses app: OpenAI, Anthropic, a Chat-only provider
    models: ["rx-*"]
    providers: [openai, {provider: anthropic, model: claude-sonnet-4-5},
                {provider: gemini, model: gemini-2.5-flash}]
  - name: think                   # OpenAI, then Claude with thinking on
    models: ["rt-*"]
    providers: [openai, {provider: anthropic, model: claude-sonnet-4-5, effort: low}]
  - name: resp-claude             # a Responses app: OpenAI, then Anthropic
    models: ["rc-*"]
    providers: [openai, {provider: anthropic, model: claude-sonnet-4-5}]
  - name: responses               # state kept by a provider: previous_response_id
    models: ["gpt-*"]
    paths: ["/v1/responses"]
    providers: [backup, spare]
  - name: gpt                     # an OpenAI-SDK app: OpenAI, then Anthropic
    models: ["gpt-*"]
    providers:
      - openai
      - {provider: anthropic, model: claude-sonnet-4-5,
         capabilities: {vision: true, tools: true, context_window: 200000}}
  - name: mixed                   # Anthropic, then an endpoint that declares no api
    models: ["mixed-*"]
    providers: [anthropic, {provider: backup, model: claude-backup}]
  - name: claude                  # an Anthropic-SDK app: Anthropic, then OpenAI
    models: ["claude-*"]
    providers:
      - anthropic
      - {provider: openai, model: gpt-4.1}
      - {provider: relay, model: claude-relay}
"""

PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJ"
       "RU5ErkJggg==")
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
OPENAI_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city", "parameters": WEATHER}}]
ANTHROPIC_TOOLS = [{"name": "get_weather", "description": "Weather in a city",
                    "input_schema": WEATHER}]
CACHE_USAGE = {"input_tokens": 11, "cache_read_input_tokens": 40,
               "cache_creation_input_tokens": 3, "output_tokens": 9}
OPENAI_CACHE_USAGE = {"prompt_tokens": 60, "completion_tokens": 9, "total_tokens": 69,
                      "prompt_tokens_details": {"cached_tokens": 40}}
needs_hold = pytest.mark.skipif(
    not harness.holds_answers(),
    reason="Envoy 1.36 classifies on status and headers only (1.36.4 crashes retrying an "
           "attempt whose answer was held to read its body)")
needs_lists = pytest.mark.skipif(
    harness.grouping_mode(),
    reason="alternative lists need Envoy 1.39+ (refused at render for Envoy 1.36-1.38)")


class Cross:
    """The gateway on CONFIG with five strict mocks; access logs flushed every 50 ms."""

    def __init__(self, gateway):
        self.gateway = gateway
        self.openai, self.anthropic, self.backup, self.spare, self.relay = gateway.mocks(
            "openai", "anthropic", "backup", "spare", "relay")
        for m in (self.openai, self.anthropic, self.backup, self.spare, self.relay):
            m.set_default(strict=True)
        self.gw = None

    def start(self):
        config = CONFIG if not harness.grouping_mode() else CONFIG.replace(LISTS, "")
        self.gw = self.gateway.start(config, extra_args=["--file-flush-interval-msec", "50"])
        return self.gw

    def oai(self, **kw):
        return openai.OpenAI(base_url=self.gw.url + "/v1", api_key="gw-key", max_retries=0,
                             **kw)

    def claude(self, **kw):
        return anthropic.Anthropic(base_url=self.gw.url, api_key="gw-key", max_retries=0, **kw)


@pytest.fixture
def xv(gateway):
    return Cross(gateway)


def header(record, name):
    return [v for k, v in record["headers"] if k.lower() == name.lower()]


def body(record):
    return json.loads(record["body"])


def accepted(mock):
    """The requests a strict mock took (asserting it refused none)."""
    recs = mock.requests()
    assert [r["rejected"] for r in recs if r["rejected"]] == [], "the provider refused a request"
    return recs


def assert_no_gateway_key(record):
    assert not [v for _, v in record["headers"] if "gw-key" in v], record["headers"]


def anthropic_side(record):
    """What an Anthropic provider must get: its path, its key, the version header."""
    assert record["path"] == "/v1/messages", record["path"]
    assert header(record, "x-api-key") == ["sk-anthropic"]
    assert header(record, "anthropic-version") == ["2023-06-01"]
    assert header(record, "authorization") == []
    assert_no_gateway_key(record)
    return body(record)


def openai_side(record):
    assert record["path"] == "/v1/chat/completions", record["path"]
    assert header(record, "authorization") == ["Bearer sk-openai"]
    assert header(record, "x-api-key") == []
    assert not [k for k, _ in record["headers"] if k.lower().startswith("anthropic-")], \
        "no anthropic-* header reaches an OpenAI provider"
    assert_no_gateway_key(record)
    return body(record)


def text_of(content):
    """A system prompt or message content as text, whichever form (string or text blocks)."""
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content)


def metric(gw, name):
    return {tuple(sorted(labels.items())): value
            for labels, value in prometheus_samples(gw.prometheus(), name)}


def skipped(gw):
    return {(dict(k)["provider"], dict(k)["reason"]): v
            for k, v in metric(gw, "llm_failover_skipped_total").items()}


def walk(gw, request_id):
    """The access log's llm_failover=... walk of one request, durations as 'N'."""
    def find():
        for line in gw.log().splitlines():
            if f"request_id={request_id}" in line:
                return line
        return None
    line = wait_until(find, 10, f"access log line of {request_id}")
    m = re.search(r" llm_failover=(\S+)", line)
    assert m, line
    return re.sub(r":\d+ms", ":Nms", m.group(1))


# ----------------------------------------------------------------------- capability skips

def test_capability_skips_are_shown_in_headers_metrics_and_the_access_log(xv):
    xv.openai.set_default(status=503, strict=True)
    gw = xv.start()
    c = xv.oai()
    image = [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]}]
    raw = c.chat.completions.with_raw_response.create(
        model="caps-model", messages=image, extra_headers={"x-request-id": "xv-vision"})
    assert raw.headers["x-llm-provider"] == "backup"
    assert raw.headers["x-llm-attempts"] == "2", "a skipped entry spends no attempt"
    raw = c.chat.completions.with_raw_response.create(
        model="caps-model", messages=[{"role": "user", "content": "Weather?"}],
        tools=OPENAI_TOOLS, extra_headers={"x-request-id": "xv-tools"})
    assert raw.headers["x-llm-provider"] == "backup"
    # 95% of a 2000-token window is 1900 tokens: about 7600 bytes of prompt.
    long = [{"role": "user", "content": "lorem ipsum " * 800}]
    raw = c.chat.completions.with_raw_response.create(
        model="caps-model", messages=long, extra_headers={"x-request-id": "xv-context"})
    assert raw.headers["x-llm-provider"] == "backup"
    # A request the entry can take still goes to it.
    raw = c.chat.completions.with_raw_response.create(
        model="caps-model", messages=[{"role": "user", "content": "hi"}],
        extra_headers={"x-request-id": "xv-plain"})
    assert raw.headers["x-llm-provider"] == "anthropic"
    assert xv.anthropic.request_count() == 1
    assert skipped(gw) == {("anthropic", "capability_vision"): 1,
                           ("anthropic", "capability_tools"): 1,
                           ("anthropic", "capability_context"): 1}
    for rid, reason in (("xv-vision", "capability_vision"), ("xv-tools", "capability_tools"),
                        ("xv-context", "capability_context")):
        # Skips are decided when planning, before the first attempt: listed first.
        assert walk(gw, rid) == (f"anthropic:skipped:{reason},openai:overloaded:Nms,"
                                 "backup:ok:Nms:in=5/out=7/cached=0")
    assert walk(gw, "xv-plain") == \
        "openai:overloaded:Nms,anthropic:ok:Nms:in=5/out=7/cached=0"
    # The caller's path in the access log, though Anthropic was sent /v1/messages.
    assert xv.anthropic.last_request()["path"] == "/v1/messages"
    line = next(l for l in gw.log().splitlines() if "request_id=xv-plain" in l)
    assert '"POST /v1/chat/completions ' in line, line
    assert [body(r)["model"] for r in accepted(xv.backup)] == ["gpt-backup"] * 3


def test_capabilities_never_skip_the_first_entry(xv):
    gw = xv.start()
    raw = xv.oai().chat.completions.with_raw_response.create(
        model="caps-first", tools=OPENAI_TOOLS, messages=[{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]}])
    assert raw.headers["x-llm-provider"] == "anthropic"
    assert raw.parse().choices[0].message.content.startswith("Hello from anthropic")
    assert skipped(gw) == {}
    (rec,) = accepted(xv.anthropic)
    assert body(rec)["model"] == "claude-small"


def test_previous_response_id_skips_entries_on_other_providers(xv):
    xv.backup.set_default(status=503)
    gw = xv.start()
    c = xv.oai()
    raw = c.responses.with_raw_response.create(model="gpt-4o", input="hi")
    assert raw.headers["x-llm-provider"] == "spare", "without state the chain falls over"
    with pytest.raises(openai.InternalServerError) as e:
        c.responses.create(model="gpt-4o", input="and then?", previous_response_id="resp_1",
                           extra_headers={"x-request-id": "xv-state"})
    assert e.value.status_code == 503
    assert e.value.response.headers["x-llm-provider"] == "backup"
    assert xv.spare.request_count() == 1, "spare keeps no state of backup's: not tried"
    assert skipped(gw) == {("spare", "content_incompatible"): 1}
    assert walk(gw, "xv-state") == "spare:skipped:content_incompatible,backup:overloaded:Nms"


def test_responses_embeddings_and_completions_fail_over_to_another_openai_provider(xv):
    """A provider declaring `api: openai` speaks the Responses API, embeddings and completions
    as they are (same bytes, `model` rewritten): they fail over to it as chat does (they were
    skipped as content_incompatible, so the primary's 503 reached the app)."""
    xv.openai.set_default(status=503, strict=True)
    gw = xv.start()
    c = xv.oai()
    raw = c.responses.with_raw_response.create(
        model="oai-4o", input="hi", extra_headers={"x-request-id": "xv-resp"})
    assert raw.headers["x-llm-provider"] == "spare"
    answer = raw.parse()
    assert answer.output_text == "Hello from spare (model gpt-spare)"
    events = list(c.responses.create(model="oai-4o", input="hi", stream=True))
    assert events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == \
        "spare:0 spare:1 spare:2 "
    with c.responses.stream(model="oai-4o", input="hi") as stream:
        final = stream.get_final_response()
    assert final.status == "completed"
    assert c.embeddings.create(model="oai-embed", input="hi").data[0].embedding == \
        [0.25, -0.5, 1.0]
    assert c.completions.create(model="oai-davinci", prompt="hi").choices[0].text == \
        "Hello from spare (model gpt-spare)"
    recs = accepted(xv.spare)
    assert [r["path"] for r in recs] == ["/v1/responses"] * 3 + ["/v1/embeddings",
                                                                  "/v1/completions"]
    assert all(body(r)["model"] == "gpt-spare" for r in recs)
    assert body(recs[0])["input"] == "hi", "the caller's body, never translated"
    assert [header(r, "authorization") for r in recs] == [["Bearer sk-spare"]] * 5
    assert xv.anthropic.request_count() == 0, "the same API comes first in this chain"
    # The Responses answer's usage (input_tokens, output_tokens) counts for the serving one.
    assert walk(gw, "xv-resp") == "openai:overloaded:Nms,spare:ok:Nms:in=5/out=7/cached=0"
    assert skipped(gw) == {("anthropic", "content_incompatible"): 2}, \
        "embeddings and completions have no translation"


RESPONSES_TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather in a city",
                    "parameters": WEATHER}]


def test_openai_responses_app_through_an_anthropic_fallback(xv):
    """`client.responses.create` (JSON and stream=True) and the `responses.stream` helper
    through an outage of the OpenAI primary: the Anthropic fallback gets a Messages request,
    the app its answer as a Response and as Responses' typed events, usage included."""
    xv.openai.set_default(status=503, strict=True)
    xv.anthropic.set_default(strict=True, usage=CACHE_USAGE)
    gw = xv.start()
    c = xv.oai()
    raw = c.responses.with_raw_response.create(
        model="rc-4o", instructions="Be brief.", input="hi", max_output_tokens=100,
        extra_headers={"x-request-id": "xv-rc"})
    assert raw.headers["x-llm-provider"] == "anthropic"
    r = raw.parse()
    assert r.object == "response" and r.status == "completed"
    assert r.output_text == "Hello from anthropic (model claude-sonnet-4-5)"
    assert r.model == "claude-sonnet-4-5"
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens) == (54, 9, 63)
    assert r.usage.input_tokens_details.cached_tokens == 40
    events = list(c.responses.create(model="rc-4o", input=[
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}], stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == \
        "anthropic:0 anthropic:1 anthropic:2 "
    assert events[-1].response.usage.input_tokens_details.cached_tokens == 40
    with c.responses.stream(model="rc-4o", input="hi") as stream:
        texts = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(texts) == final.output_text == "anthropic:0 anthropic:1 anthropic:2 "
    first, second, third = accepted(xv.anthropic)
    sent = anthropic_side(first)
    assert sent == {"model": "claude-sonnet-4-5", "max_tokens": 100,
                    "system": [{"type": "text", "text": "Be brief."}],
                    "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert anthropic_side(second)["stream"] is True and body(third)["max_tokens"] == 1024
    # Input: 11 + 40 read from the cache + 3 written to it.
    assert walk(gw, "xv-rc") == "openai:overloaded:Nms,anthropic:ok:Nms:in=54/out=9/cached=40"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_openai_responses_tool_round_trip_through_an_anthropic_fallback(xv, stream):
    """A function tool's call and result cross both ways: the Anthropic tool_use comes back as
    a function_call item (call_id kept), and the app's function_call_output reaches
    Anthropic as the tool_result of that call."""
    xv.openai.set_default(status=503, strict=True)
    xv.anthropic.enqueue(
        {"strict": True, "tool_calls": [{"id": "toolu_01A", "name": "get_weather",
                                         "arguments": {"city": "Paris"}}]},
        {"strict": True, "content": "It is 18 degrees in Paris."})
    xv.start()
    c = xv.oai()
    items = [{"role": "user", "content": "Weather in Paris?"}]
    kw = dict(model="rc-4o", tools=RESPONSES_TOOLS, parallel_tool_calls=False)
    if stream:
        with c.responses.stream(input=items, **kw) as s:
            args = "".join(e.delta for e in s if e.type == "response.function_call_arguments.delta")
            r = s.get_final_response()
        assert json.loads(args) == {"city": "Paris"}
    else:
        r = c.responses.create(input=items, **kw)
    (call,) = [o for o in r.output if o.type == "function_call"]
    assert (call.call_id, call.name, json.loads(call.arguments)) == \
        ("toolu_01A", "get_weather", {"city": "Paris"})
    items += [{"type": "function_call", "call_id": call.call_id, "name": call.name,
               "arguments": call.arguments},
              {"type": "function_call_output", "call_id": call.call_id, "output": "18C, sunny"}]
    r = c.responses.create(input=items, **kw)
    assert r.output_text == "It is 18 degrees in Paris."
    first, second = accepted(xv.anthropic)
    for rec in (first, second):
        sent = anthropic_side(rec)
        assert sent["tools"] == [{"name": "get_weather", "description": "Weather in a city",
                                  "input_schema": WEATHER}]
        assert sent["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    sent = body(second)
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert sent["messages"][1]["content"] == [{"type": "tool_use", "id": "toolu_01A",
                                               "name": "get_weather", "input": {"city": "Paris"}}]
    assert sent["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "toolu_01A",
                                               "content": "18C, sunny"}]


THOUGHT = 'The user wants "Paris" weather.\nCall get_weather.'
THINKING_TOOL = {"strict": True, "thinking": THOUGHT, "tool_calls": [
    {"id": "toolu_01A", "name": "get_weather", "arguments": {"city": "Paris"}}]}


def test_a_thinking_claude_fallback_keeps_its_thinking_across_a_tool_loop(xv):
    """Claude with thinking on (the entry's `effort`) behind an OpenAI outage: a Responses app
    gets Claude's thinking as a reasoning item (its summary the thinking, the signature in
    `encrypted_content`), JSON and streamed, and sends it back with the tool's result, which
    reaches Anthropic as the signed thinking block it requires before the `tool_use` (the
    strict mock refuses a tool loop without it, as Anthropic does). A Chat app's tool loop,
    whose dialect carries no thinking back, continues without thinking instead of a 400."""
    import mock_api_rules
    xv.openai.set_default(status=503, strict=True)
    answer = {"strict": True, "content": "It is 18 degrees in Paris.", "chunks": 2}
    xv.anthropic.enqueue(THINKING_TOOL, THINKING_TOOL, answer, answer, THINKING_TOOL, answer)
    xv.start()
    c = xv.oai()
    kw = dict(model="rt-4o", tools=RESPONSES_TOOLS)
    items = [{"role": "user", "content": "Weather in Paris?"}]
    r = c.responses.create(input=items, **kw)
    with c.responses.stream(input=items, **kw) as s:
        events = list(s)
        streamed = s.get_final_response()
    summary = [e.type for e in events if "reasoning" in e.type]
    assert summary == ["response.reasoning_summary_part.added"] + \
        ["response.reasoning_summary_text.delta"] * 2 + \
        ["response.reasoning_summary_text.done", "response.reasoning_summary_part.done"]
    assert "".join(e.delta for e in events if e.type.endswith("summary_text.delta")) == THOUGHT
    for got in (r, streamed):
        assert [o.type for o in got.output] == ["reasoning", "function_call"]
        reasoning = got.output[0]
        assert [p.text for p in reasoning.summary] == [THOUGHT]
        assert reasoning.encrypted_content == \
            "llm-failover:anthropic:" + mock_api_rules.signature(THOUGHT)
        more = [o.model_dump(exclude_none=True) for o in got.output] + [
            {"type": "function_call_output", "call_id": "toolu_01A", "output": "18C, sunny"}]
        assert c.responses.create(input=items + more, **kw).output_text == \
            "It is 18 degrees in Paris."
    chat = c.chat.completions.create(model="rt-4o", tools=OPENAI_TOOLS, messages=[
        {"role": "user", "content": "Weather in Paris?"}])
    (call,) = chat.choices[0].message.tool_calls
    chat = c.chat.completions.create(model="rt-4o", tools=OPENAI_TOOLS, messages=[
        {"role": "user", "content": "Weather in Paris?"},
        chat.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "18C, sunny"}])
    assert chat.choices[0].message.content == "It is 18 degrees in Paris."
    sent = [anthropic_side(rec) for rec in accepted(xv.anthropic)]
    signed = {"type": "thinking", "thinking": THOUGHT,
              "signature": mock_api_rules.signature(THOUGHT)}
    for turn in (sent[2], sent[3]):
        assert turn["thinking"] == {"type": "enabled", "budget_tokens": 4000}
        assert turn["messages"][1]["content"] == [signed, {
            "type": "tool_use", "id": "toolu_01A", "name": "get_weather",
            "input": {"city": "Paris"}}]
    assert sent[4]["thinking"] == {"type": "enabled", "budget_tokens": 4000}
    assert "thinking" not in sent[5] and sent[5]["messages"][1]["content"][0]["type"] == \
        "tool_use"


def test_an_endpoint_without_translation_skips_entries_of_another_api(xv):
    """Only chat completions and messages are translated: an embeddings request never reaches
    an Anthropic entry (content_incompatible), it stays on the first entry."""
    xv.openai.set_default(status=503, strict=True)
    gw = xv.start()
    with pytest.raises(openai.InternalServerError):
        xv.oai().embeddings.create(model="gpt-embed", input="hi",
                                   extra_headers={"x-request-id": "xv-embed"})
    assert xv.anthropic.request_count() == 0
    assert skipped(gw) == {("anthropic", "content_incompatible"): 1}


# ---------------------------------------------------------------- the docs show real output

EXAMPLE_CONFIG = harness.REPO_ROOT / "envoy" / "cross-vendor.failover.yaml"
EXPLAIN = re.compile(r"```\n\$ llm-failover explain ((?:.*\\\n)*.*)\n((?:.*\n)*?)```")


def test_docs_show_the_example_file_and_explains_real_output():
    """README and docs/cross-vendor.md show envoy/cross-vendor.failover.yaml (README an
    excerpt of its lines), examples/cross_vendor.py verbatim, and `explain` output that the CLI
    really prints for them."""
    readme = (harness.REPO_ROOT / "README.md").read_text()
    doc = (harness.REPO_ROOT / "docs" / "cross-vendor.md").read_text()
    config = EXAMPLE_CONFIG.read_text()
    assert config.strip() in doc
    assert (harness.REPO_ROOT / "examples" / "cross_vendor.py").read_text().strip() in doc
    calling = (harness.REPO_ROOT / "docs" / "calling.md").read_text()
    assert RESPONSES_EXAMPLE.read_text().strip() in calling
    excerpt = readme.split("From\n`envoy/cross-vendor.failover.yaml`:\n\n```yaml\n", 1)[1]
    excerpt = excerpt.split("```", 1)[0]
    assert excerpt.count("\n") > 20
    for line in excerpt.splitlines():
        assert line in config.splitlines(), f"README's line is not in the file: {line!r}"
    env = {**os.environ, "OPENAI_API_KEY": "x", "ANTHROPIC_API_KEY": "y"}
    shown = EXPLAIN.findall(readme) + EXPLAIN.findall(doc)
    assert len(shown) == 4, shown  # docs/cross-vendor.md: chat, Messages, Responses, Gemini
    for command, output in shown:
        args = command.replace("\\\n", " ").split()
        p = subprocess.run([str(harness.cli_bin()), "explain", *args], env=env, cwd=harness.REPO_ROOT,
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        assert p.stdout == output, f"explain {command} prints:\n{p.stdout}"
def test_the_example_file_points_at_mocks_through_its_endpoint_variables(gateway):
    """envoy/cross-vendor.failover.yaml as shipped, its providers moved to local mocks by the
    variables its header names: OpenAI down, the OpenAI-SDK app is answered by Anthropic."""
    openai_mock, anthropic_mock, gemini_mock, local = gateway.mocks(
        "openai", "anthropic", "gemini", "local")
    openai_mock.set_default(status=503)
    env = {"OPENAI_ENDPOINT": f"127.0.0.1:{openai_mock.port}",
           "ANTHROPIC_ENDPOINT": f"127.0.0.1:{anthropic_mock.port}",
           "GEMINI_ENDPOINT": f"127.0.0.1:{gemini_mock.port}",
           "LOCAL_LLM": f"127.0.0.1:{local.port}",
           "OPENAI_API_KEY": "sk-o", "ANTHROPIC_API_KEY": "sk-a", "GEMINI_API_KEY": "g-k"}
    gw = gateway.start(EXAMPLE_CONFIG, env=env)
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="gw-key", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert raw.headers["x-llm-provider"] == "anthropic"
    assert raw.headers["x-llm-attempts"] == "2"
    assert (openai_mock.request_count(), anthropic_mock.request_count()) == (1, 1)
    assert header(anthropic_mock.requests()[0], "x-api-key") == ["sk-a"]


# ------------------------------------------------- an OpenAI-SDK app, Anthropic as the fallback

def test_openai_sdk_json_answer_from_an_anthropic_fallback(xv):
    xv.openai.set_default(status=503, strict=True)
    xv.anthropic.set_default(strict=True, content="Bonjour", usage=CACHE_USAGE)
    gw = xv.start()
    raw = xv.oai().chat.completions.with_raw_response.create(
        model="gpt-4o", temperature=0.5, stop=["END"],
        messages=[{"role": "system", "content": "Be brief."},
                  {"role": "developer", "content": "Answer in French."},
                  {"role": "user", "content": "Say hello"}])
    assert raw.headers["x-llm-provider"] == "anthropic"
    assert raw.headers["x-llm-attempts"] == "2"
    assert raw.headers["x-llm-fallback-reason"] == "overloaded"
    reply = raw.parse()
    assert reply.object == "chat.completion"
    assert reply.model == "claude-sonnet-4-5", "the answer names the model that answered"
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content == "Bonjour"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.id
    # Usage in OpenAI's terms: the prompt counts cached and cache-written tokens too.
    assert reply.usage.prompt_tokens == 54 and reply.usage.completion_tokens == 9
    assert reply.usage.total_tokens == 63
    assert reply.usage.prompt_tokens_details.cached_tokens == 40
    # The primary got the caller's own request; the fallback a Messages request.
    (first,) = xv.openai.requests()
    assert openai_side(first)["model"] == "gpt-4o"
    (rec,) = accepted(xv.anthropic)
    sent = anthropic_side(rec)
    assert sent["model"] == "claude-sonnet-4-5"
    assert sent["max_tokens"] == 1024, "the provider's max_tokens when the caller sets none"
    assert "Be brief." in text_of(sent["system"]) and "Answer in French." in text_of(
        sent["system"])
    assert [m["role"] for m in sent["messages"]] == ["user"]
    assert text_of(sent["messages"][0]["content"]) == "Say hello"
    assert sent["stop_sequences"] == ["END"] and sent["temperature"] == 0.5
    assert "stop" not in sent and "stream_options" not in sent


def test_openai_sdk_stream_from_an_anthropic_fallback_with_cache_usage(xv):
    xv.openai.set_default(status=503, strict=True)
    xv.anthropic.set_default(strict=True, usage=CACHE_USAGE, chunk_interval_ms=5)
    gw = xv.start()
    chunks = list(xv.oai().chat.completions.create(
        model="gpt-4o", max_tokens=200, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Say hello"}]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "anthropic:0 anthropic:1 anthropic:2 "
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices
                and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert {c.model for c in chunks} == {"claude-sonnet-4-5"}
    assert len({c.id for c in chunks}) == 1
    usage = [c.usage for c in chunks if c.usage]
    assert len(usage) == 1 and not [c for c in chunks if c.usage and c.choices]
    assert (usage[0].prompt_tokens, usage[0].completion_tokens, usage[0].total_tokens) \
        == (54, 9, 63)
    assert usage[0].prompt_tokens_details.cached_tokens == 40
    (rec,) = accepted(xv.anthropic)
    sent = anthropic_side(rec)
    assert sent["stream"] is True and sent["max_tokens"] == 200


def test_openai_sdk_without_include_usage_gets_no_usage_chunk(xv):
    xv.openai.set_default(status=503, strict=True)
    gw = xv.start()
    chunks = list(xv.oai().chat.completions.create(
        model="gpt-4o", stream=True, messages=[{"role": "user", "content": "hi"}]))
    assert chunks and all(c.choices for c in chunks), "no usage chunk was asked for"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) \
        == "anthropic:0 anthropic:1 anthropic:2 "


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_openai_sdk_tool_round_trip_through_an_anthropic_fallback(xv, stream):
    xv.openai.set_default(status=503, strict=True)
    xv.anthropic.enqueue(
        {"strict": True, "tool_calls": [{"id": "toolu_01A", "name": "get_weather",
                                         "arguments": {"city": "Paris"}}]},
        {"strict": True, "content": "It is 18 degrees in Paris."})
    gw = xv.start()
    c = xv.oai()
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    kw = dict(model="gpt-4o", tools=OPENAI_TOOLS, tool_choice="auto",
              parallel_tool_calls=False)
    if stream:
        calls, finish = {}, None
        for chunk in c.chat.completions.create(messages=messages, stream=True, **kw):
            for d in chunk.choices:
                finish = d.finish_reason or finish
                for tc in d.delta.tool_calls or []:
                    slot = calls.setdefault(tc.index, {"id": None, "name": "", "args": ""})
                    slot["id"] = tc.id or slot["id"]
                    slot["name"] += (tc.function.name or "") if tc.function else ""
                    slot["args"] += (tc.function.arguments or "") if tc.function else ""
        assert finish == "tool_calls"
        assert list(calls) == [0]
        call = calls[0]
        call_id, name, args = call["id"], call["name"], call["args"]
    else:
        reply = c.chat.completions.create(messages=messages, **kw)
        assert reply.choices[0].finish_reason == "tool_calls"
        (tc,) = reply.choices[0].message.tool_calls
        call_id, name, args = tc.id, tc.function.name, tc.function.arguments
    assert call_id == "toolu_01A" and name == "get_weather"
    assert json.loads(args) == {"city": "Paris"}
    # Round two: the tool's result, and the model's final answer.
    messages += [{"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": "get_weather", "arguments": args}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "18C, sunny"}]
    reply = c.chat.completions.create(messages=messages, **kw)
    assert reply.choices[0].message.content == "It is 18 degrees in Paris."
    assert reply.choices[0].finish_reason == "stop"
    first, second = accepted(xv.anthropic)
    for rec in (first, second):
        sent = anthropic_side(rec)
        assert sent["tools"] == [{"name": "get_weather", "description": "Weather in a city",
                                  "input_schema": WEATHER}]
        assert sent["tool_choice"]["type"] == "auto"
        assert sent["tool_choice"].get("disable_parallel_tool_use") is True
        assert "parallel_tool_calls" not in sent
    sent = body(second)
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    (use,) = [b for b in sent["messages"][1]["content"] if b["type"] == "tool_use"]
    assert use == {"type": "tool_use", "id": "toolu_01A", "name": "get_weather",
                   "input": {"city": "Paris"}}
    (result,) = sent["messages"][2]["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_01A"
    assert text_of(result["content"]) == "18C, sunny"


def test_openai_tool_ids_anthropic_refuses_are_made_valid_on_the_way(xv):
    """OpenAI-compatible providers name calls `functions.get_weather:0` (Kimi) or `call.1`: a
    conversation carrying such ids must still reach Anthropic, whose ids are ^[a-zA-Z0-9_-]+$,
    with each tool_result still matching its tool_use."""
    xv.openai.set_default(status=503, strict=True)
    gw = xv.start()
    odd = ["functions.get_weather:0", "call.1"]
    messages = [{"role": "user", "content": "Weather in Paris and Rome?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": i, "type": "function", "function": {
                        "name": "get_weather", "arguments": json.dumps({"city": c})}}
                    for i, c in zip(odd, ["Paris", "Rome"])]},
                {"role": "tool", "tool_call_id": odd[0], "content": "18C"},
                {"role": "tool", "tool_call_id": odd[1], "content": "24C"}]
    reply = xv.oai().chat.completions.create(model="gpt-4o", messages=messages,
                                             tools=OPENAI_TOOLS)
    assert reply.choices[0].message.content.startswith("Hello from anthropic")
    (rec,) = accepted(xv.anthropic)
    sent = anthropic_side(rec)
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    uses = [b for b in sent["messages"][1]["content"] if b["type"] == "tool_use"]
    results = sent["messages"][2]["content"]
    assert [u["input"] for u in uses] == [{"city": "Paris"}, {"city": "Rome"}]
    assert [r["tool_use_id"] for r in results] == [u["id"] for u in uses], \
        "both role: tool messages become one user turn of tool_result blocks, in order"
    assert len({u["id"] for u in uses}) == 2


def test_openai_sdk_images_reach_an_anthropic_fallback_as_image_blocks(xv):
    xv.openai.set_default(status=503, strict=True)
    gw = xv.start()
    reply = xv.oai().chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": [
        {"type": "text", "text": "What are these?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg",
                                            "detail": "high"}}]}])
    assert reply.choices[0].message.content == "Hello from anthropic (model claude-sonnet-4-5)"
    (rec,) = accepted(xv.anthropic)
    parts = anthropic_side(rec)["messages"][0]["content"]
    assert parts == [
        {"type": "text", "text": "What are these?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}}]


@pytest.mark.parametrize("anthropic_reason,openai_reason", [
    ("max_tokens", "length"), ("stop_sequence", "stop"), ("end_turn", "stop")])
def test_stop_reasons_are_told_in_the_callers_terms(xv, anthropic_reason, openai_reason):
    xv.openai.set_default(status=503, strict=True)
    xv.anthropic.set_default(strict=True, stop_reason=anthropic_reason)
    gw = xv.start()
    reply = xv.oai().chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].finish_reason == openai_reason
    xv.anthropic.set_default(status=529, strict=True)
    xv.openai.set_default(strict=True, stop_reason=openai_reason)
    msg = xv.claude().messages.create(model="claude-x", max_tokens=64,
                                      messages=[{"role": "user", "content": "hi"}])
    assert msg.stop_reason == ("end_turn" if openai_reason == "stop" else anthropic_reason)


# ------------------------------------------------- an Anthropic-SDK app, OpenAI as the fallback

def test_anthropic_sdk_json_answer_from_an_openai_fallback(xv):
    xv.anthropic.set_default(status=529, strict=True)
    xv.openai.set_default(strict=True, content="Hi there", usage=OPENAI_CACHE_USAGE)
    gw = xv.start()
    raw = xv.claude().messages.with_raw_response.create(
        model="claude-sonnet-4-5", max_tokens=256, system="Be brief.",
        extra_body={"temperature": 0.5},  # this SDK version has no temperature argument
        stop_sequences=["END"], messages=[{"role": "user", "content": "Say hello"}])
    assert raw.headers["x-llm-provider"] == "openai"
    assert raw.headers["x-llm-attempts"] == "2"
    assert raw.headers["x-llm-fallback-reason"] == "overloaded"
    msg = raw.parse()
    assert msg.type == "message" and msg.role == "assistant"
    assert msg.model == "gpt-4.1"
    assert [(b.type, b.text) for b in msg.content] == [("text", "Hi there")]
    assert msg.stop_reason == "end_turn"
    assert msg.id
    # Anthropic's input_tokens leave out the tokens read from the cache.
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (20, 9)
    assert msg.usage.cache_read_input_tokens == 40
    (first,) = xv.anthropic.requests()
    assert first["path"] == "/v1/messages" and body(first)["model"] == "claude-sonnet-4-5"
    (rec,) = accepted(xv.openai)
    sent = openai_side(rec)
    assert sent["model"] == "gpt-4.1"
    assert sent["messages"][0]["role"] in ("system", "developer")
    assert text_of(sent["messages"][0]["content"]) == "Be brief."
    assert [m["role"] for m in sent["messages"][1:]] == ["user"]
    assert text_of(sent["messages"][1]["content"]) == "Say hello"
    assert sent.get("max_tokens", sent.get("max_completion_tokens")) == 256
    assert sent["stop"] == ["END"] and sent["temperature"] == 0.5
    assert "stop_sequences" not in sent and "system" not in sent


def test_anthropic_sdk_stream_from_an_openai_fallback_with_cache_usage(xv):
    xv.anthropic.set_default(status=529, strict=True)
    xv.openai.set_default(strict=True, usage=OPENAI_CACHE_USAGE, chunk_interval_ms=5)
    gw = xv.start()
    with xv.claude().messages.stream(model="claude-sonnet-4-5", max_tokens=256, messages=[
            {"role": "user", "content": "Say hello"}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == "openai:0 openai:1 openai:2 "
    assert final.model == "gpt-4.1" and final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 9
    assert final.usage.input_tokens == 20 and final.usage.cache_read_input_tokens == 40
    (rec,) = accepted(xv.openai)
    sent = openai_side(rec)
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}, \
        "the gateway asks OpenAI for usage so the translated stream can report it"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_anthropic_sdk_tool_round_trip_through_an_openai_fallback(xv, stream):
    xv.anthropic.set_default(status=529, strict=True)
    xv.openai.enqueue(
        {"strict": True, "tool_calls": [{"id": "call_Wx9", "name": "get_weather",
                                         "arguments": {"city": "Paris"}}]},
        {"strict": True, "content": "It is 18 degrees in Paris."})
    gw = xv.start()
    c = xv.claude()
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    kw = dict(model="claude-sonnet-4-5", max_tokens=256, tools=ANTHROPIC_TOOLS,
              tool_choice={"type": "any"})
    if stream:
        with c.messages.stream(messages=messages, **kw) as s:
            msg = s.get_final_message()
    else:
        msg = c.messages.create(messages=messages, **kw)
    assert msg.stop_reason == "tool_use"
    (use,) = [b for b in msg.content if b.type == "tool_use"]
    assert (use.id, use.name, use.input) == ("call_Wx9", "get_weather", {"city": "Paris"})
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                   for b in msg.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                               "content": "18C, sunny"}]}]
    final = c.messages.create(messages=messages, **kw)
    assert final.content[0].text == "It is 18 degrees in Paris."
    first, second = accepted(xv.openai)
    for rec in (first, second):
        sent = openai_side(rec)
        assert sent["tools"] == OPENAI_TOOLS
        assert sent["tool_choice"] == "required"
    sent = body(second)
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "tool"]
    (call,) = sent["messages"][1]["tool_calls"]
    assert call["id"] == "call_Wx9" and call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert sent["messages"][2]["tool_call_id"] == "call_Wx9"
    assert text_of(sent["messages"][2]["content"]) == "18C, sunny"


def test_anthropic_sdk_images_reach_an_openai_fallback_as_data_uris(xv):
    xv.anthropic.set_default(status=529, strict=True)
    gw = xv.start()
    msg = xv.claude().messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=[
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": PNG}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/c.jpg"}},
            {"type": "text", "text": "What are these?"}]}])
    assert msg.content[0].text == "Hello from openai (model gpt-4.1)"
    (rec,) = accepted(xv.openai)
    parts = openai_side(rec)["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["image_url", "image_url", "text"]
    assert parts[0]["image_url"]["url"] == f"data:image/png;base64,{PNG}"
    assert parts[1]["image_url"]["url"] == "https://example.com/c.jpg"
    assert parts[2]["text"] == "What are these?"


# ------------------------------------------------------------ errors in the caller's dialect

def test_an_undeclared_fallback_gets_the_callers_anthropic_version_and_beta(xv):
    """A provider that declares no api takes the caller's request as it is, headers included:
    the Anthropic provider's default anthropic-version must not take the caller's away from it
    (Envoy shares one header map across attempts). The strict mock refuses a Messages request
    without anthropic-version, as Anthropic does."""
    xv.anthropic.set_default(status=529, strict=True)
    xv.backup.set_default(strict=True, content="from backup")
    gw = xv.start()
    client = xv.claude()
    msg = client.messages.create(
        model="mixed-x", max_tokens=20, messages=[{"role": "user", "content": "hi"}],
        extra_headers={"anthropic-version": "2024-10-22", "anthropic-beta": "flag-2025"})
    assert [b.text for b in msg.content] == ["from backup"]
    (first,) = xv.anthropic.requests()
    assert header(first, "anthropic-version") == ["2023-06-01"], "the provider's own"
    assert header(first, "anthropic-beta") == ["flag-2025"]
    (rec,) = accepted(xv.backup)
    assert rec["path"] == "/v1/messages"
    assert header(rec, "anthropic-version") == ["2024-10-22"], "the caller's"
    assert header(rec, "anthropic-beta") == ["flag-2025"]
    assert header(rec, "x-api-key") == [] and header(rec, "authorization") == ["Bearer sk-backup"]


def test_an_anthropic_app_sees_an_openai_fallbacks_400_as_an_anthropic_error(xv):
    xv.anthropic.set_default(status=529, strict=True)
    xv.openai.set_default(status=400, strict=True,
                          error={"message": "Invalid 'messages': too many images."})
    gw = xv.start()
    with pytest.raises(anthropic.BadRequestError) as e:
        xv.claude().messages.create(model="claude-sonnet-4-5", max_tokens=64,
                                    messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 400
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "too many images" in e.value.body["error"]["message"]
    assert "too many images" in str(e.value)
    assert e.value.response.headers["x-llm-provider"] == "openai"
    assert xv.relay.request_count() == 0, "a 400 is the request's answer: no fallback"


def test_an_openai_app_sees_an_anthropic_fallbacks_error_as_an_openai_error(xv):
    xv.openai.set_default(status=503, strict=True)
    xv.anthropic.set_default(status=429, strict=True,
                             error={"message": "Number of request tokens has exceeded your "
                                               "per-minute rate limit"})
    gw = xv.start()
    with pytest.raises(openai.RateLimitError) as e:
        xv.oai().chat.completions.create(model="gpt-4o",
                                         messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 429
    assert "per-minute rate limit" in e.value.body["message"]
    assert e.value.response.headers["x-llm-provider"] == "anthropic"


def test_the_gateways_own_errors_come_in_the_anthropic_dialect(xv):
    gw = xv.start()
    with pytest.raises(anthropic.BadRequestError) as e:
        xv.claude().messages.create(model="mistral-large", max_tokens=64,
                                    messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["type"] == "error", e.value.body
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "mistral-large" in e.value.body["error"]["message"]
    # The same refusal to an OpenAI caller keeps OpenAI's shape and code.
    with pytest.raises(openai.BadRequestError) as e:
        xv.oai().chat.completions.create(model="mistral-large",
                                         messages=[{"role": "user", "content": "hi"}])
    assert e.value.code == "model_not_recognized"


# --------------------------------------------------------- body-read classes across dialects

@needs_hold
@needs_lists
def test_anthropic_prompt_too_long_sends_an_openai_caller_to_the_context_window_list(xv):
    xv.openai.set_default(status=503, strict=True)
    xv.anthropic.set_default(preset="anthropic_prompt_too_long", strict=True)
    xv.backup.set_default(strict=True, content="A long answer")
    gw = xv.start()
    raw = xv.oai().chat.completions.with_raw_response.create(
        model="ctx-model", messages=[{"role": "user", "content": "a long prompt"}])
    assert raw.headers["x-llm-provider"] == "backup"
    assert raw.headers["x-llm-fallback-reason"] == "context_window_exceeded"
    assert raw.parse().choices[0].message.content == "A long answer"
    (rec,) = accepted(xv.backup)
    assert rec["path"] == "/v1/chat/completions" and body(rec)["model"] == "gpt-long"
    assert body(accepted(xv.anthropic)[0])["model"] == "claude-sonnet-4-5"


@needs_hold
def test_an_error_as_a_translated_streams_first_event_falls_over(xv):
    """OpenAI caller: the Anthropic fallback opens its stream with `event: error`
    (overloaded): not a byte of it reaches the caller, the next entry answers."""
    xv.openai.set_default(status=503, strict=True)
    xv.anthropic.set_default(preset="anthropic_overloaded_stream", strict=True)
    gw = xv.start()
    raw = xv.oai().chat.completions.with_raw_response.create(
        model="caps-model", stream=True, messages=[{"role": "user", "content": "hi"}])
    assert raw.headers["x-llm-provider"] == "backup"
    assert raw.headers["x-llm-attempts"] == "3"
    assert raw.headers["x-llm-fallback-reason"] == "overloaded"
    text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    assert text == "backup:0 backup:1 backup:2 "


@needs_hold
def test_an_error_as_an_openai_streams_first_event_sends_an_anthropic_app_on(xv):
    xv.anthropic.set_default(status=529, strict=True)
    xv.openai.set_default(preset="openai_error_stream", strict=True)
    gw = xv.start()
    with xv.claude().messages.stream(model="claude-sonnet-4-5", max_tokens=64, messages=[
            {"role": "user", "content": "hi"}]) as s:
        text = "".join(s.text_stream)
    assert text == "relay:0 relay:1 relay:2 "
    (rec,) = accepted(xv.relay)
    assert rec["path"] == "/v1/messages" and body(rec)["model"] == "claude-relay"


# ----------------------------------------------------------------------- capability skips

# ------------------------------------------- Envoy AI Gateway's users' bugs, each a test here

def test_ai_gateway_2135_a_fallback_to_a_backend_of_another_schema_is_translated(xv):
    """envoyproxy/ai-gateway#2135: a fallback reached a backend of another schema with the
    caller's request untranslated. Both directions: each fallback gets its own API's path and
    body (strict mocks refuse the other's), and the caller its own API's answer."""
    xv.openai.enqueue({"status": 503, "strict": True})
    xv.anthropic.enqueue({"strict": True})
    xv.anthropic.set_default(status=529, strict=True)
    gw = xv.start()
    reply = xv.oai().chat.completions.create(
        model="gpt-4o", messages=[{"role": "system", "content": "s"},
                                  {"role": "user", "content": "hi"}])
    assert reply.object == "chat.completion"
    msg = xv.claude().messages.create(model="claude-x", max_tokens=64,
                                      messages=[{"role": "user", "content": "hi"}])
    assert msg.type == "message" and msg.content[0].text == "Hello from openai (model gpt-4.1)"
    a = accepted(xv.anthropic)
    assert [r["path"] for r in a] == ["/v1/messages", "/v1/messages"]
    assert "system" in body(a[0]) and "max_tokens" in body(a[0])
    o = accepted(xv.openai)
    assert [r["path"] for r in o] == ["/v1/chat/completions", "/v1/chat/completions"]
    assert body(o[1])["model"] == "gpt-4.1" and body(o[1])["messages"][0]["role"] == "user"


@pytest.mark.parametrize("cut", [1, 7, 64])
def test_ai_gateway_2162_usage_kept_when_events_span_body_chunks(xv, cut):
    """envoyproxy/ai-gateway#2162: usage was lost when an event spanned body chunks. The
    providers' streams here are cut every `cut` bytes, whatever the event boundaries."""
    xv.openai.set_default(status=503, strict=True)
    xv.anthropic.set_default(strict=True, usage=CACHE_USAGE, chunk_bytes=cut,
                             chunk_interval_ms=1 if cut < 8 else 3)
    gw = xv.start()
    chunks = list(xv.oai().chat.completions.create(
        model="gpt-4o", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "hi"}]))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) \
        == "anthropic:0 anthropic:1 anthropic:2 "
    (usage,) = [c.usage for c in chunks if c.usage]
    assert (usage.prompt_tokens, usage.completion_tokens) == (54, 9)
    assert usage.prompt_tokens_details.cached_tokens == 40
    # And the other way: an OpenAI stream cut anywhere, to an Anthropic app.
    xv.anthropic.set_default(status=529, strict=True)
    xv.openai.set_default(strict=True, usage=OPENAI_CACHE_USAGE, chunk_bytes=cut,
                          chunk_interval_ms=1 if cut < 8 else 3)
    with xv.claude().messages.stream(model="claude-x", max_tokens=64, messages=[
            {"role": "user", "content": "hi"}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == "openai:0 openai:1 openai:2 "
    assert (final.usage.input_tokens, final.usage.output_tokens) == (20, 9)
    assert final.usage.cache_read_input_tokens == 40


@pytest.mark.parametrize("where", ["start", "delta", "both"])
def test_ai_gateway_2290_2352_input_and_cache_tokens_kept_in_a_translated_stream(xv, where):
    """envoyproxy/ai-gateway#2290 and #2352: input and cache tokens were dropped from a
    translated stream when Anthropic (or a compatible backend) reported them in message_delta,
    and double counted when both events carried them. Wherever they come, the OpenAI caller's
    usage is the same."""
    xv.openai.set_default(status=503, strict=True)
    xv.anthropic.set_default(strict=True, usage=CACHE_USAGE, usage_events=where)
    gw = xv.start()
    chunks = list(xv.oai().chat.completions.create(
        model="gpt-4o", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "hi"}]))
    (usage,) = [c.usage for c in chunks if c.usage]
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (54, 9, 63)
    assert usage.prompt_tokens_details.cached_tokens == 40


# ------------------------------------------------------------------ the example users copy

EXAMPLE = harness.REPO_ROOT / "examples" / "cross_vendor.py"


RESPONSES_EXAMPLE = harness.REPO_ROOT / "examples" / "responses_app.py"


def test_openai_responses_app_through_a_chat_only_fallback(xv):
    """A Responses request falls over to a provider that speaks only Chat Completions (Gemini's
    OpenAI endpoint): translated to Chat there, its answer and stream back as a Response,
    function calls both ways, usage with cached tokens."""
    xv.openai.set_default(status=503, strict=True)
    xv.spare.enqueue(
        {"strict": True, "tool_calls": [{"id": "call_7", "name": "get_weather",
                                         "arguments": {"city": "Paris"}}],
         "usage": OPENAI_CACHE_USAGE},
        {"strict": True, "chunks": 2})
    gw = xv.start()
    c = xv.oai()
    items = [{"role": "user", "content": "Weather in Paris?"}]
    raw = c.responses.with_raw_response.create(
        model="rg-4o", instructions="Be brief.", input=items, tools=RESPONSES_TOOLS,
        max_output_tokens=50, extra_headers={"x-request-id": "xv-rg"})
    assert raw.headers["x-llm-provider"] == "gemini"
    r = raw.parse()
    (call,) = r.output
    assert (call.type, call.call_id, json.loads(call.arguments)) == \
        ("function_call", "call_7", {"city": "Paris"})
    assert (r.usage.input_tokens, r.usage.input_tokens_details.cached_tokens) == (60, 40)
    items += [{"type": "function_call", "call_id": call.call_id, "name": call.name,
               "arguments": call.arguments},
              {"type": "function_call_output", "call_id": call.call_id, "output": "18C"}]
    with c.responses.stream(model="rg-4o", input=items, tools=RESPONSES_TOOLS) as s:
        final = s.get_final_response()
    assert final.output_text == "spare:0 spare:1 "
    first, second = accepted(xv.spare)
    assert first["path"] == second["path"] == "/v1beta/openai/chat/completions"
    assert header(first, "authorization") == ["Bearer sk-gemini"]
    sent = body(first)
    assert sent["model"] == "gemini-2.5-flash" and sent["max_completion_tokens"] == 50
    assert sent["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": [
                                    {"type": "text", "text": "Weather in Paris?"}]}]
    assert sent["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city", "parameters": WEATHER}}]
    sent = body(second)
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["messages"][1:] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_7", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_7", "content": "18C"}][1:]
    assert walk(gw, "xv-rg") == "openai:overloaded:Nms,gemini:ok:Nms:in=60/out=9/cached=40"


@needs_hold
def test_a_responses_stream_whose_translated_first_event_is_an_error_falls_over(xv):
    """A Responses app's stream: the Anthropic fallback opens with `event: error`
    (overloaded), which is read on Anthropic's own bytes and falls over; the Chat-only entry
    after it answers, translated. When the last entry answers an error, the app gets it in
    OpenAI's error shape with the provider's message."""
    xv.openai.set_default(status=503, strict=True)
    xv.anthropic.set_default(preset="anthropic_overloaded_stream", strict=True)
    xv.start()
    c = xv.oai()
    raw = c.responses.with_raw_response.create(model="rx-4o", input="hi", stream=True)
    assert raw.headers["x-llm-provider"] == "gemini"
    assert raw.headers["x-llm-fallback-reason"] == "overloaded"
    events = list(raw.parse())
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == \
        "spare:0 spare:1 spare:2 "
    assert events[-1].type == "response.completed"
    xv.anthropic.set_default(status=400, strict=True, body={"type": "error", "error": {
        "type": "invalid_request_error", "message": "messages: roles must alternate"}})
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model="rc-4o", input="hi")
    assert e.value.body["message"] == "messages: roles must alternate"
    assert e.value.body["type"] == "invalid_request_error"


def test_an_agents_sdk_agent_with_a_function_tool_through_an_anthropic_fallback(xv):
    """OpenAI's Agents SDK (`openai-agents`, on the Responses API) runs an agent with one
    function tool for two turns during an OpenAI outage: the tool call comes from Claude, the
    SDK runs the tool, its result goes back to Claude, and the agent's final output is
    Claude's answer."""
    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"  # traffic only to 127.0.0.1
    import asyncio
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
    set_tracing_disabled(True)
    xv.openai.set_default(status=503, strict=True)
    turns = [{"strict": True, "tool_calls": [{"id": "toolu_01", "name": "get_weather",
                                              "arguments": {"city": "Paris"}}]},
             {"strict": True, "content": "It is 18 degrees in Paris.", "chunks": 2}]
    xv.anthropic.enqueue(*turns, *turns)
    gw = xv.start()
    seen = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        seen.append(city)
        return "18C, sunny"

    client = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="gw-key", max_retries=0)
    agent = Agent(name="weather", instructions="Answer with the tool.", tools=[get_weather],
                  model=OpenAIResponsesModel(model="rc-4o", openai_client=client))

    async def both():
        result = await Runner.run(agent, "What is the weather in Paris?")
        run = Runner.run_streamed(agent, "What is the weather in Paris?")
        kinds = [event.type async for event in run.stream_events()]
        return result.final_output, run.final_output, kinds

    final, output, kinds = asyncio.run(both())
    assert final == "It is 18 degrees in Paris."
    assert seen == ["Paris", "Paris"]
    assert output == "anthropic:0 anthropic:1 " and "raw_response_event" in kinds
    first, second, third, fourth = accepted(xv.anthropic)
    assert body(third)["stream"] is True and body(fourth)["stream"] is True
    sent = anthropic_side(first)
    assert sent["system"] == [{"type": "text", "text": "Answer with the tool."}]
    assert [t["name"] for t in sent["tools"]] == ["get_weather"]
    sent = anthropic_side(second)
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert sent["messages"][1]["content"][-1] == {
        "type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}
    assert sent["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "toolu_01",
                                               "content": "18C, sunny"}]


def test_an_agents_sdk_tool_loop_on_a_thinking_claude_fallback(xv):
    """The Agents SDK's two turns (run and run_streamed) on Claude with thinking on: the SDK
    sends Claude's reasoning item back with the tool's output, and Anthropic gets the signed
    thinking block before its `tool_use` (the strict mock refuses the turn without it)."""
    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"  # traffic only to 127.0.0.1
    import asyncio
    import mock_api_rules
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
    set_tracing_disabled(True)
    xv.openai.set_default(status=503, strict=True)
    answer = {"strict": True, "content": "It is 18 degrees in Paris.", "chunks": 2}
    xv.anthropic.enqueue(THINKING_TOOL, answer, THINKING_TOOL, answer)
    gw = xv.start()

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "18C, sunny"

    client = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="gw-key", max_retries=0)
    agent = Agent(name="weather", instructions="Answer with the tool.", tools=[get_weather],
                  model=OpenAIResponsesModel(model="rt-4o", openai_client=client))

    async def both():
        result = await Runner.run(agent, "What is the weather in Paris?")
        run = Runner.run_streamed(agent, "What is the weather in Paris?")
        [event async for event in run.stream_events()]
        return result, run

    result, run = asyncio.run(both())
    assert result.final_output == "It is 18 degrees in Paris."
    assert run.final_output == "anthropic:0 anthropic:1 "
    reasoning = [i for i in result.new_items if i.type == "reasoning_item"]
    assert [p.text for p in reasoning[0].raw_item.summary] == [THOUGHT]
    sent = [anthropic_side(rec) for rec in accepted(xv.anthropic)]
    for turn in (sent[1], sent[3]):
        assert turn["thinking"] == {"type": "enabled", "budget_tokens": 4000}
        assert turn["messages"][1]["content"][0] == {
            "type": "thinking", "thinking": THOUGHT,
            "signature": mock_api_rules.signature(THOUGHT)}


def test_the_responses_example_runs_through_an_anthropic_fallback(xv):
    """examples/responses_app.py (docs/calling.md shows it) during an OpenAI outage: the
    function call, its result and the streamed final answer cross to the Anthropic mock."""
    xv.openai.set_default(status=503, strict=True)
    xv.anthropic.enqueue(
        {"strict": True, "tool_calls": [{"id": "toolu_01", "name": "get_weather",
                                         "arguments": {"city": "Paris"}}]},
        {"strict": True, "chunks": 2, "usage": {"input_tokens": 30, "output_tokens": 8}})
    gw = xv.start()
    env = {**os.environ, "GATEWAY_URL": gw.url, "GATEWAY_KEY": "gw-key", "MODEL": "rc-4o"}
    p = subprocess.run([sys.executable, str(RESPONSES_EXAMPLE)], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "anthropic claude-sonnet-4-5 completed",
        "get_weather {'city': 'Paris'}",
        "anthropic:0 anthropic:1 ",
        "38 tokens"], p.stdout
    second = accepted(xv.anthropic)[1]
    sent = anthropic_side(second)
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert sent["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "toolu_01",
                                               "content": '{"celsius": 18}'}]


def test_the_cross_vendor_example_runs_through_an_anthropic_fallback(xv):
    """examples/cross_vendor.py (README shows it) during an OpenAI outage: the answer, the tool
    call and the final answer all come from the Anthropic mock, in OpenAI's format."""
    xv.openai.set_default(status=503, strict=True)
    xv.anthropic.enqueue(
        {"strict": True, "tool_calls": [{"id": "toolu_01", "name": "get_weather",
                                         "arguments": {"city": "Paris"}}]},
        {"strict": True, "content": "It is 18 degrees and sunny in Paris."})
    gw = xv.start()
    env = {**os.environ, "GATEWAY_URL": gw.url, "GATEWAY_KEY": "gw-key", "MODEL": "gpt-4o"}
    p = subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "anthropic claude-sonnet-4-5 tool_calls",
        "get_weather {'city': 'Paris'}",
        "It is 18 degrees and sunny in Paris."], p.stdout
    second = accepted(xv.anthropic)[1]
    assert [m["role"] for m in anthropic_side(second)["messages"]] == \
        ["user", "assistant", "user"]
