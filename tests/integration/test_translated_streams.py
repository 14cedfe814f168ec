"""Translated streams on real Envoy (behaviour.md 13): whatever the chunk boundaries the
provider's stream arrives in, the caller's SDK reads the same answer as from one chunk per event,
the first (held) event included, and the stream ends with the caller's end marker. Both
directions, through a fallback after a failing primary (so the fallback's answer is held for
its first event, then translated), and on the last entry (not held).

Regression: envoyproxy/ai-gateway#2162 (usage lost when an event spans body chunks) and
#2290/#2352 (input and cache tokens dropped from a translated stream)."""
import json

import pytest

# The SDKs are not in the docker-compose run's test image (as test_api_surface.py).
anthropic = pytest.importorskip("anthropic")
httpx = pytest.importorskip("httpx2")
openai = pytest.importorskip("openai")

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

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}
CALLS = [{"id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
         {"id": "call_2", "name": "get_weather", "arguments": '{"city": "Rome"}'}]

# Cut every 7 bytes (events, lines and `\n\n` split anywhere), or one chunk per event.
CUTS = [None, 7]


def openai_client(gw):
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="gw-key", max_retries=0,
                         http_client=httpx.Client(timeout=30))


def anthropic_client(gw):
    return anthropic.Anthropic(base_url=gw.url, api_key="gw-key", max_retries=0,
                               http_client=httpx.Client(timeout=30))


@pytest.mark.parametrize("cut", CUTS)
def test_an_openai_sdk_reads_a_translated_anthropic_stream_cut_anywhere(gateway, cut):
    openai_mock, claude = gateway.mocks("openai", "claude")
    openai_mock.set_default(status=503)
    behaviour = {"strict": True, "chunks": 2, "tool_calls": CALLS, "usage_events": "both",
                 "usage": {"input_tokens": 11, "cache_read_input_tokens": 1920,
                           "cache_creation_input_tokens": 5, "output_tokens": 42}}
    if cut:
        behaviour["chunk_bytes"] = cut
    claude.set_default(**behaviour)
    gw = gateway.start(CONFIG)
    with openai_client(gw).chat.completions.stream(
            model="gpt-4o", messages=[{"role": "user", "content": "weather?"}],
            tools=[TOOL], stream_options={"include_usage": True}) as stream:
        for _ in stream:
            pass
        answer = stream.get_final_completion()
    [sent] = claude.requests()
    assert sent["path"] == "/v1/messages" and not sent.get("rejected"), sent.get("rejected")
    choice = answer.choices[0]
    assert choice.message.content == "claude:0 claude:1 "
    assert [(t.id, t.function.name, json.loads(t.function.arguments))
            for t in choice.message.tool_calls] == \
        [("call_1", "get_weather", {"city": "Paris"}), ("call_2", "get_weather", {"city": "Rome"})]
    assert choice.finish_reason == "tool_calls"
    assert answer.model == "claude-sonnet-4-5"
    # prompt_tokens counts every input token (11 + 1920 read + 5 written), as OpenAI does.
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens,
            answer.usage.total_tokens) == (1936, 42, 1978)
    assert answer.usage.prompt_tokens_details.cached_tokens == 1920


@pytest.mark.parametrize("cut", CUTS)
def test_an_anthropic_sdk_reads_a_translated_openai_stream_cut_anywhere(gateway, cut):
    openai_mock, claude = gateway.mocks("openai", "claude")
    claude.set_default(status=529)
    behaviour = {"strict": True, "chunks": 2, "tool_calls": CALLS,
                 "usage": {"prompt_tokens": 2006, "completion_tokens": 300,
                           "total_tokens": 2306,
                           "prompt_tokens_details": {"cached_tokens": 1920}}}
    if cut:
        behaviour["chunk_bytes"] = cut
    openai_mock.set_default(**behaviour)
    gw = gateway.start(CONFIG)
    with anthropic_client(gw).messages.stream(
            model="claude-sonnet-4-5", max_tokens=100,
            messages=[{"role": "user", "content": "weather?"}],
            tools=[{"name": "get_weather", "input_schema": TOOL["function"]["parameters"]}],
    ) as stream:
        for _ in stream:
            pass
        message = stream.get_final_message()
    [sent] = openai_mock.requests()
    assert sent["path"] == "/v1/chat/completions" and not sent.get("rejected"), \
        sent.get("rejected")
    assert json.loads(sent["body"])["stream_options"] == {"include_usage": True}
    blocks = [(b.type, b.text if b.type == "text" else (b.id, b.name, b.input))
              for b in message.content]
    assert blocks == [("text", "openai:0 openai:1 "),
                      ("tool_use", ("call_1", "get_weather", {"city": "Paris"})),
                      ("tool_use", ("call_2", "get_weather", {"city": "Rome"}))]
    assert message.stop_reason == "tool_use"
    assert message.model == "gpt-4o"
    # Anthropic counts cache reads apart from input_tokens.
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens,
            message.usage.output_tokens) == (86, 1920, 300)


def test_a_translated_stream_on_the_last_entry_is_not_held_and_still_ends_right(gateway):
    """The last entry's answer is not held for its first event: it is translated from the
    response headers on, chunk by chunk, and ends with [DONE]."""
    openai_mock, claude = gateway.mocks("openai", "claude")
    openai_mock.set_default(status=503)
    claude.set_default(strict=True, chunks=3, chunk_bytes=3)
    gw = gateway.start(CONFIG)
    r = gw.post("/v1/chat/completions", body=json.dumps({
        "model": "gpt-4o", "stream": True,
        "messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"content-type": "application/json", "authorization": "Bearer k"})
    assert r.status == 200, r.text
    events = r.text.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""], r.text
    chunks = [json.loads(e[len("data: "):]) for e in events[:-2]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == \
        "claude:0 claude:1 claude:2 "
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert not any("usage" in c for c in chunks), "usage only when the caller asks"


@pytest.mark.parametrize("caller", ["openai", "anthropic"])
def test_a_translated_stream_cut_short_never_looks_complete(gateway, caller):
    """The provider's stream stops (FIN) after two events: the caller's stream has no end
    marker ([DONE], message_stop), so its client cannot take it for a whole answer."""
    openai_mock, claude = gateway.mocks("openai", "claude")
    provider, primary = (claude, openai_mock) if caller == "openai" else (openai_mock, claude)
    primary.set_default(status=503)
    provider.set_default(chunks=5, abort_after_chunks=2, abort="close")
    gw = gateway.start(CONFIG)
    path, model = (("/v1/chat/completions", "gpt-4o") if caller == "openai"
                   else ("/v1/messages", "claude-sonnet-4-5"))
    r = gw.post(path, body=json.dumps({
        "model": model, "stream": True, "max_tokens": 50,
        "messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"content-type": "application/json", "authorization": "Bearer k"})
    assert r.status == 200, r.text
    assert "[DONE]" not in r.text and "message_stop" not in r.text, r.text
    name = "claude" if caller == "openai" else "openai"
    assert f"{name}:0 " in r.text and f"{name}:1 " in r.text, r.text


def start_with_trailers(gateway, config):
    """Envoy on `config` with its provider clusters forwarding HTTP/1.1 trailers (off by
    default: Envoy's HTTP/1 codec drops them and ends the body with its last chunk; an HTTP/2
    provider's trailers always come through)."""
    yaml = pytest.importorskip("yaml")
    from harness import render_config
    path = render_config(config, gateway.env, out_dir=gateway._tmp / "rendered")
    boot = yaml.safe_load(path.read_text())
    for cluster in boot["static_resources"]["clusters"]:
        opts = (cluster.get("typed_extension_protocol_options") or {}).get(
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions")
        h1 = ((opts or {}).get("explicit_http_config") or {}).get("http_protocol_options")
        if h1 is not None:
            h1["enable_trailers"] = True
    path.write_text(yaml.safe_dump(boot))
    return gateway.start_bootstrap(path)



CLAUDE_EVENTS = [
    'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",'
    '"role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,'
    '"stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":1}}}\n\n',
    'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    '"content_block":{"type":"text","text":""}}\n\n',
    'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    '"delta":{"type":"text_delta","text":"Hi there"}}\n\n',
    'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
    'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn",'
    '"stop_sequence":null},"usage":{"output_tokens":3}}\n\n',
    # The last event without its blank line: only the stream's end completes it.
    'event: message_stop\ndata: {"type":"message_stop"}',
]


def post_stream(gw, caller):
    path, model = (("/v1/chat/completions", "gpt-4o") if caller == "openai"
                   else ("/v1/messages", "claude-sonnet-4-5"))
    return gw.post(path, body=json.dumps({
        "model": model, "stream": True, "max_tokens": 50,
        "messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"content-type": "application/json", "authorization": "Bearer k"})


def test_a_translated_stream_that_ends_with_trailers_still_gets_its_end(gateway):
    """The provider ends its stream with trailers (HTTP/2, or chunked trailers): the end of the
    stream comes in the trailers callback, not with the last body chunk. The caller's stream
    still ends with its end marker (the translator's end is written after the bytes the
    filter kept for it)."""
    openai_mock, claude = gateway.mocks("openai", "claude")
    openai_mock.set_default(status=503)
    claude.set_default(events=CLAUDE_EVENTS, trailers={"x-provider-trailer": "1"})
    gw = start_with_trailers(gateway, CONFIG)
    r = post_stream(gw, "openai")
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "claude"
    assert "Hi there" in r.text, r.text
    assert r.text.endswith("data: [DONE]\n\n"), r.text
    assert '"finish_reason":"stop"' in r.text and "message_" not in r.text, r.text


@pytest.mark.parametrize("caller", ["openai", "anthropic"])
def test_a_translated_stream_ended_cleanly_before_its_final_event_raises_in_the_sdk(
        gateway, caller):
    """The provider's stream ends cleanly (its last chunk sent) before its final event: the
    caller's stream ends with an error event in its own dialect, and its SDK raises."""
    openai_mock, claude = gateway.mocks("openai", "claude")
    if caller == "openai":
        openai_mock.set_default(status=503)
        claude.set_default(events=CLAUDE_EVENTS[:3])
    else:
        claude.set_default(status=529)
        openai_mock.set_default(chunk_bytes=4096, chunks=2, events=[
            'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o",'
            '"choices":[{"index":0,"delta":{"content":"Hi there"},"finish_reason":null}]}\n\n'])
    gw = gateway.start(CONFIG)
    r = post_stream(gw, caller)
    assert r.status == 200, r.text
    assert "Hi there" in r.text, r.text
    if caller == "openai":
        assert "[DONE]" not in r.text and r.text.endswith(
            '"code":"stream_cut_short"}}\n\n'), r.text
        with pytest.raises(openai.APIError):
            with openai_client(gw).chat.completions.stream(
                    model="gpt-4o", messages=[{"role": "user", "content": "hi"}]) as stream:
                for _ in stream:
                    pass
    else:
        assert "message_stop" not in r.text and r.text.endswith(
            "the provider's stream ended before its final event\"}}\n\n"), r.text
        assert "event: error\n" in r.text, r.text
        with pytest.raises(anthropic.APIError):
            with anthropic_client(gw).messages.stream(
                    model="claude-sonnet-4-5", max_tokens=50,
                    messages=[{"role": "user", "content": "hi"}]) as stream:
                for _ in stream:
                    pass
