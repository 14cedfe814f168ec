"""An OpenAI Chat stream whose caller did not ask for its usage, on real Envoy
(docs/behaviour.md section 15, docs/configuration.md ``ask_stream_usage``): the
gateway asks the provider for it (``stream_options.include_usage``), counts it in
``llm_failover_tokens_total`` exactly, and the caller gets byte for byte the stream the provider
would have sent it without the ask (no usage chunk, no ``"usage": null``); a caller who asked
gets the usage chunk as the provider wrote it; ``ask_stream_usage: false`` asks nothing (and
counts nothing for such a stream); a Chat caller translated to Anthropic is not asked for
anything.

The mock streams as OpenAI does: asked, every chunk carries ``"usage": null`` and a last chunk
with ``"choices": []`` carries the usage; not asked, no usage at all. It cuts the stream every
few bytes, so the usage chunk and the null members are split across body chunks. One Envoy per
configuration (the default, and ``ask_stream_usage: false`` with one worker)."""
import json
import re

import pytest

import harness
import mock_provider
from harness import prometheus_samples, wait_until

pytestmark = pytest.mark.skipif(
    harness.external_mode(), reason="needs a fresh gateway (counters start at zero)")

CONFIG = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
%s
providers:
  - {name: openai, endpoint: "127.0.0.1:${OPENAI_PORT}", api: openai}
  - {name: claude, endpoint: "127.0.0.1:${CLAUDE_PORT}", api: anthropic, max_tokens: 300}
chains:
  - {name: same, models: ["gpt-4o"], providers: [openai]}
  - {name: crossed, models: ["gpt-x"], providers: [{provider: claude, model: claude-sonnet-4-5}]}
"""
USAGE = {"prompt_tokens": 21, "completion_tokens": 13, "total_tokens": 34,
         "prompt_tokens_details": {"cached_tokens": 8}}
ONE = {("openai", "gpt-4o", "input"): 21, ("openai", "gpt-4o", "output"): 13,
       ("openai", "gpt-4o", "cached_input"): 8}
CLAUDE_USAGE = {"input_tokens": 11, "output_tokens": 42}
BEHAVIOUR = {"usage": USAGE, "chunks": 3, "chunk_bytes": 13}


class Module(harness.MockedGateway):
    def __init__(self, tmp, setting="", **envoy_args):
        super().__init__(CONFIG % setting, tmp, ["openai", "claude"], **envoy_args)

    def mocks_started(self):
        self.mocks["openai"].set_default(**BEHAVIOUR)
        self.mocks["claude"].set_default(strict=True, usage=CLAUDE_USAGE, chunks=2, chunk_bytes=7)

    def tokens(self):
        """{(provider, model, kind): value} of llm_failover_tokens_total."""
        return {(s["provider"], s["model"], s["kind"]): int(v) for s, v in
                prometheus_samples(self.gw.prometheus(), "llm_failover_tokens_total")}

    def wait_tokens(self, expected):
        """Waits for the counters to be exactly `expected` (the workers add theirs each second)."""
        try:
            wait_until(lambda: self.tokens() == expected, 5, "the tokens expected", interval=0.2)
        except harness.HarnessError:
            assert self.tokens() == expected

    def last(self, name):
        """The last request `name` got: its record and its JSON body."""
        rec = self.mocks[name].last_request()
        return rec, json.loads(rec["body"])


@pytest.fixture(scope="module")
def asking(tmp_path_factory):
    m = Module(tmp_path_factory.mktemp("usage-asked"))
    yield m
    m.stop()


def provider_stream(rec, received, asked):
    """The bytes the mock writes for the request `rec` was, asked for its usage or not, with
    the `created` time of the stream the caller `received` (the only thing not derived from
    the request)."""
    events, trailer = mock_provider._stream_events(
        "chat", "openai", rec["id"], "gpt-4o", BEHAVIOUR["chunks"], BEHAVIOUR, asked)
    created = re.search(rb'"created": (\d+)', received)
    assert created, received
    return re.sub(rb'"created": \d+', b'"created": ' + created.group(1),
                  b"".join(events + trailer))


def test_an_unasked_stream_is_asked_counted_and_given_to_the_caller_as_it_would_have_been(
        asking):
    gw = asking.gw
    r = gw.chat("gpt-4o", stream=True, stream_options={"include_obfuscation": False})
    assert r.status == 200, r.body
    rec, sent = asking.last("openai")
    # Asked, the caller's other stream_options kept; the mock reported its usage.
    assert sent["stream_options"] == {"include_obfuscation": False, "include_usage": True}
    assert rec["usage"] == USAGE
    # The caller: exactly what the mock writes to a request that did not ask.
    assert r.body == provider_stream(rec, r.body, asked=False)
    assert b'"usage"' not in r.body and r.body.endswith(b"data: [DONE]\n\n")
    asking.wait_tokens(ONE)

    # A Chat caller translated to Anthropic: nothing asked (strict: Messages refuses
    # stream_options), no usage in its stream, Anthropic's tokens counted.
    r = gw.chat("gpt-x", stream=True)
    assert r.status == 200, r.body
    rec, sent = asking.last("claude")
    assert rec["rejected"] is None and "stream_options" not in sent, sent
    assert b'"usage"' not in r.body and r.body.rstrip().endswith(b"data: [DONE]")
    asking.wait_tokens({**ONE, ("claude", "claude-sonnet-4-5", "input"): 11,
                        ("claude", "claude-sonnet-4-5", "output"): 42,
                        ("claude", "claude-sonnet-4-5", "cached_input"): 0})


def test_a_caller_who_asked_gets_the_usage_chunk_and_the_openai_sdk_parses_both(asking):
    import openai  # the caller most Chat clients use

    gw = asking.gw
    before = asking.tokens()

    def plus(n):
        return {**before, **{k: before.get(k, 0) + n * v for k, v in ONE.items()}}

    # Asked by the caller: the request and the stream as they are (the usage chunk untouched).
    r = gw.chat("gpt-4o", stream=True, stream_options={"include_usage": True})
    assert r.status == 200, r.body
    rec, sent = asking.last("openai")
    assert sent["stream_options"] == {"include_usage": True}
    assert r.body == provider_stream(rec, r.body, asked=True)
    assert r.body.count(b'"usage": null') == 3
    asking.wait_tokens(plus(1))

    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-caller", max_retries=0)
    hi = [{"role": "user", "content": "hi"}]
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=hi, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == \
        "openai:0 openai:1 openai:2 "
    assert all(c.usage is None and len(c.choices) == 1 for c in chunks), chunks
    assert asking.last("openai")[1]["stream_options"] == {"include_usage": True}
    asking.wait_tokens(plus(2))
    chunks = list(client.chat.completions.create(
        model="gpt-4o", messages=hi, stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == 21
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 8
    asking.wait_tokens(plus(3))


def test_turned_off_nothing_is_asked_and_the_stream_counts_nothing(tmp_path_factory):
    # One worker: once the JSON answer after the stream counts, the stream's tick has passed.
    m = Module(tmp_path_factory.mktemp("usage-unasked"), "ask_stream_usage: false",
               concurrency=1)
    try:
        r = m.gw.chat("gpt-4o", stream=True)
        assert r.status == 200, r.body
        rec, sent = m.last("openai")
        assert "stream_options" not in sent and rec["usage"] is None
        assert r.body == provider_stream(rec, r.body, asked=False)
        r = m.gw.chat("gpt-4o")
        assert r.status == 200, r.body
        m.wait_tokens(ONE)
    finally:
        m.stop()
