"""Chains across vendors (SPEC 13, issue 21), end to end: the official `openai` and `anthropic`
Python SDKs call a real Envoy whose chain falls over from one vendor's API to the other's, and
the mock providers answer like the real APIs, refusing (400) what those refuse (`strict`,
mock_api_rules.py). Every test asserts both sides: what the caller got (content, tool calls,
stop reasons, usage, model, errors in its own dialect) and what each provider received (path,
credentials, `anthropic-version`, the translated body).

Also: capability skips (SPEC 2.4) in headers, metrics and the access log, body-read classes on
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
    pytest.skip("needs its own gateway and mocks (4 of them, strict)", allow_module_level=True)
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
  - name: spare
    endpoint: "127.0.0.1:${SPARE_PORT:-18304}"
    credential: {header: authorization, prefix: "Bearer ", value: sk-spare}

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
  - name: claude                  # an Anthropic-SDK app: Anthropic, then OpenAI
    models: ["claude-*"]
    providers:
      - anthropic
      - {provider: openai, model: gpt-4.1}
      - {provider: spare, model: claude-spare}
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
    """The gateway on CONFIG with four strict mocks; access logs flushed every 50 ms."""

    def __init__(self, gateway):
        self.gateway = gateway
        self.openai, self.anthropic, self.backup, self.spare = gateway.mocks(
            "openai", "anthropic", "backup", "spare")
        for m in (self.openai, self.anthropic, self.backup, self.spare):
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
                                 "backup:ok:Nms")
    assert walk(gw, "xv-plain") == "openai:overloaded:Nms,anthropic:ok:Nms"
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
