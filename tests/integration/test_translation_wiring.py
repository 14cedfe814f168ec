"""The upstream role applies translation on real Envoy (behaviour.md 13): an OpenAI caller's request
falls over from a failing OpenAI provider to an Anthropic Messages provider, is translated for
it, and its answer comes back in OpenAI's shape; the OpenAI attempt goes out untouched. The
SDK suite over every direction is test_cross_vendor.py; this proves the wiring alone."""
import json

import harness

CONFIG = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
providers:
  - {name: openai, endpoint: "127.0.0.1:${OPENAI_PORT}", api: openai,
     credential: {header: authorization, prefix: "Bearer ", value: sk-openai}}
  - {name: claude, endpoint: "127.0.0.1:${CLAUDE_PORT}", api: anthropic, max_tokens: 300,
     credential: {header: x-api-key, value: sk-claude}}
chains:
  - name: gpt
    models: ["gpt-*"]
    providers: [openai, {provider: claude, model: claude-sonnet-4-5}]
  - name: claude
    models: ["claude-*"]
    providers: [claude, {provider: openai, model: gpt-4o}]
"""

BODY = {"model": "gpt-4o", "messages": [{"role": "system", "content": "be brief"},
                                        {"role": "user", "content": "hi"}]}


def header(record, name):
    return [v for k, v in record["headers"] if k.lower() == name]


def post(gw, body):
    return gw.post("/v1/chat/completions", body=json.dumps(body).encode(),
                   headers={"content-type": "application/json",
                            "authorization": "Bearer caller-key"})


def test_openai_caller_falls_over_to_an_anthropic_provider_translated_both_ways(gateway):
    openai, claude = gateway.mocks("openai", "claude")
    openai.set_default(status=503)
    claude.set_default(strict=True)   # refuses what the real Messages API refuses
    gw = gateway.start(CONFIG)
    r = post(gw, BODY)
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "claude"
    assert r.header("x-llm-fallback-reason") == "overloaded"
    answer = r.json()
    assert answer["object"] == "chat.completion", answer
    assert answer["choices"][0]["message"]["content"] == \
        "Hello from claude (model claude-sonnet-4-5)"
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["model"] == "claude-sonnet-4-5"
    # The OpenAI attempt went out as the caller sent it.
    [first] = openai.requests()
    assert first["path"] == "/v1/chat/completions"
    assert json.loads(first["body"]) == BODY
    assert header(first, "anthropic-version") == []
    # The Anthropic attempt: Messages path, body, version and key.
    [sent] = claude.requests()
    assert sent["path"] == "/v1/messages"
    assert not sent.get("rejected"), sent.get("rejected")
    body = json.loads(sent["body"])
    assert body["model"] == "claude-sonnet-4-5"
    assert body["max_tokens"] == 300
    assert body["system"][0]["text"] == "be brief"
    assert body["messages"] == [{"role": "user", "content": "hi"}] or \
        body["messages"][0]["role"] == "user"
    assert header(sent, "anthropic-version") == ["2023-06-01"]
    assert header(sent, "x-api-key") == ["sk-claude"]
    assert header(sent, "authorization") == [], "no OpenAI key, no caller key"


def test_a_translated_stream_reaches_the_caller_as_openai_chunks(gateway):
    openai, claude = gateway.mocks("openai", "claude")
    openai.set_default(status=503)
    claude.set_default(strict=True)
    gw = gateway.start(CONFIG)
    r = post(gw, {**BODY, "stream": True})
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "claude"
    assert r.header("content-type").startswith("text/event-stream")
    data = [line[len("data: "):] for line in r.text.split("\n") if line.startswith("data: ")]
    assert data[-1] == "[DONE]", r.text
    chunks = [json.loads(d) for d in data[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or ""
                   for c in chunks if c.get("choices"))
    assert text == "claude:0 claude:1 claude:2 ", r.text
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    [sent] = claude.requests()
    assert sent["path"] == "/v1/messages" and not sent.get("rejected")
    assert json.loads(sent["body"])["stream"] is True


def test_an_error_the_anthropic_provider_gives_back_is_an_openai_error(gateway):
    openai, claude = gateway.mocks("openai", "claude")
    openai.set_default(status=503)
    claude.set_default(status=400, error={"message": "messages: too many images"})
    gw = gateway.start(CONFIG)
    r = post(gw, BODY)
    assert r.status == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error", r.text
    assert "too many images" in error["message"], r.text
    assert r.header("x-llm-provider") == "claude"


def test_anthropic_caller_falls_over_to_an_openai_provider_translated_both_ways(gateway):
    openai, claude = gateway.mocks("openai", "claude")
    claude.set_default(status=529)
    openai.set_default(strict=True)   # refuses Anthropic-only shapes, as OpenAI does
    gw = gateway.start(CONFIG)
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "system": "be brief",
            "messages": [{"role": "user", "content": "hi"}]}
    r = gw.post("/v1/messages", body=json.dumps(body).encode(),
                headers={"content-type": "application/json", "x-api-key": "caller-key",
                         "anthropic-version": "2023-06-01"})
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "openai"
    answer = r.json()
    assert answer["type"] == "message", answer
    assert answer["content"][0]["text"] == "Hello from openai (model gpt-4o)"
    assert answer["stop_reason"] == "end_turn"
    [sent] = openai.requests()
    assert sent["path"] == "/v1/chat/completions"
    assert not sent.get("rejected"), sent.get("rejected")
    sent_body = json.loads(sent["body"])
    assert sent_body["model"] == "gpt-4o"
    assert sent_body["messages"][0]["role"] == "system"
    assert header(sent, "anthropic-version") == [], "not for an OpenAI provider"
    assert header(sent, "authorization") == ["Bearer sk-openai"]
    assert header(sent, "x-api-key") == [], "no caller key, no Anthropic key"
