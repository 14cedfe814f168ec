"""Rate limits announced in advance through a real Envoy with two workers (docs/behaviour.md
section 4, docs/configuration.md "Rate limits announced in advance"): an answer in OpenAI's,
Azure's or Anthropic's style that says nothing remains moves the next requests to the fallback
with no attempt to the announced provider (metrics, access log, fallback reason, status), and
the provider comes back at its reset; a reserve skips a provider with tokens left under it;
answers with room left, or with headers that make no sense, change nothing."""
import time

import pytest

import harness
from harness import free_port, wait_until

if harness.external_mode():
    pytest.skip("needs its own gateway", allow_module_level=True)

STATUS = "/llm-failover/status"
CONFIG = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
status_path: /llm-failover/status
status_listen: {address: 127.0.0.1, port: "${STATUS_PORT}"}
dead_marks: {rate_limited_ahead: 10s}
providers:
  - {name: openai, endpoint: "127.0.0.1:${OPENAI_PORT}"}
  - {name: azure, endpoint: "127.0.0.1:${AZURE_PORT}"}
  - {name: anthropic, endpoint: "127.0.0.1:${ANTHROPIC_PORT}"}
  - {name: reserved, endpoint: "127.0.0.1:${RESERVED_PORT}", reserve_tokens: 5000}
  - {name: fallback, endpoint: "127.0.0.1:${FALLBACK_PORT}"}
chains:
  - {name: o, models: ["gpt-openai"], providers: [openai, fallback]}
  - {name: z, models: ["gpt-azure"], providers: [azure, fallback]}
  - {name: a, models: ["gpt-anthropic"], providers: [anthropic, fallback]}
  - {name: r, models: ["gpt-reserved"], providers: [reserved, fallback]}
"""


class Module(harness.MockedGateway):
    def __init__(self, tmp):
        self.status_port = free_port()
        super().__init__(CONFIG, tmp, ["openai", "azure", "anthropic", "reserved", "fallback"],
                         env={"STATUS_PORT": str(self.status_port)}, concurrency=2,
                         extra_args=["--file-flush-interval-msec", "50"])

    def status(self):
        return self.provider_status(self.status_port, STATUS)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    m = Module(tmp_path_factory.mktemp("ahead"))
    yield m
    m.stop()


@pytest.mark.parametrize("style,status", [("openai", 200), ("azure", 429), ("anthropic", 200)])
def test_an_announced_empty_quota_skips_the_provider_until_its_reset(setup, style, status):
    gw, m = setup.gw, setup.mocks
    provider = m[style]
    # Room left: the next request still goes there.
    provider.enqueue(rate_limits={"style": style, "requests": 5, "tokens": 900, "reset_s": 30})
    assert gw.chat(f"gpt-{style}").header("x-llm-provider") == style
    # Nothing left (requests), reset 2 s on: this answer is the request's (or fails over on a
    # 429), and the next ones go to the fallback without an attempt to it.
    provider.enqueue(status=status,
                     rate_limits={"style": style, "requests": 0, "tokens": 900, "reset_s": 2})
    first = gw.chat(f"gpt-{style}")
    assert first.status == 200
    sent = provider.request_count()
    skipped_before = setup.skipped().get((style, "rate_limited_ahead"), 0)
    for k in range(6):
        r = gw.chat(f"gpt-{style}", headers={"x-request-id": f"ahead-{style}-{k}"})
        assert r.status == 200 and r.header("x-llm-provider") == "fallback"
        assert r.header("x-llm-fallback-reason") == "rate_limited_ahead"
        assert r.header("x-llm-attempts") == "1"
    assert provider.request_count() == sent, "no attempt while announced empty"
    assert setup.skipped()[(style, "rate_limited_ahead")] == skipped_before + 6
    assert setup.walk(f"ahead-{style}-5").startswith(
        f"{style}:skipped:rate_limited_ahead,fallback:ok:Nms")
    ahead = setup.status()[style]["rate_limited_ahead"]
    assert ahead["spent"] == "requests" and ahead["requests_remaining"] == 0, ahead
    assert ahead["tokens_remaining"] == 900, ahead
    now_ms = time.time() * 1000
    assert now_ms < ahead["skipped_until_ms"] <= now_ms + 2_100, ahead
    # Back at its reset.
    until = ahead["skipped_until_ms"]
    wait_until(lambda: time.time() * 1000 > until + 20, 4, "the announced reset")
    r = gw.chat(f"gpt-{style}")
    assert r.header("x-llm-provider") == style and provider.request_count() == sent + 1
    assert setup.status()[style]["rate_limited_ahead"]["skipped_until_ms"] is None


def test_a_reserve_skips_under_it_and_absurd_or_broken_headers_are_capped_or_ignored(setup):
    gw, m = setup.gw, setup.mocks
    reserved = m["reserved"]
    # 8000 tokens left is above the 5000 reserve; 4000 is under it.
    reserved.enqueue(rate_limits={"style": "openai", "tokens": 8000, "reset_s": 30})
    assert gw.chat("gpt-reserved").header("x-llm-provider") == "reserved"
    assert gw.chat("gpt-reserved").header("x-llm-provider") == "reserved"
    reserved.enqueue(rate_limits={"style": "openai", "tokens": 4000, "reset_s": 1})
    assert gw.chat("gpt-reserved").header("x-llm-provider") == "reserved"
    sent = reserved.request_count()
    assert gw.chat("gpt-reserved").header("x-llm-provider") == "fallback"
    assert reserved.request_count() == sent
    assert setup.status()["reserved"]["rate_limited_ahead"]["spent"] == "tokens"
    wait_until(lambda: gw.chat("gpt-reserved").header("x-llm-provider") == "reserved", 4,
               "the reserve's reset")
    # Malformed and negative values change nothing.
    for headers in ({"x-ratelimit-remaining-requests": "none", "x-ratelimit-reset-requests": "5s"},
                    {"x-ratelimit-remaining-requests": "-1", "x-ratelimit-reset-requests": "5s"},
                    {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "soon"},
                    {"x-ratelimit-remaining-requests": "0"}):
        m["openai"].enqueue(headers=headers)
        assert gw.chat("gpt-openai").header("x-llm-provider") == "openai"
        assert gw.chat("gpt-openai").header("x-llm-provider") == "openai", headers
    # A reset a year away is the configured maximum (10 s).
    year = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 365 * 86400))
    m["anthropic"].enqueue(headers={"anthropic-ratelimit-tokens-remaining": "0",
                                    "anthropic-ratelimit-tokens-reset": year})
    assert gw.chat("gpt-anthropic").header("x-llm-provider") == "anthropic"
    ahead = setup.status()["anthropic"]["rate_limited_ahead"]
    assert ahead["skipped_until_ms"] - ahead["announced_at_ms"] == 10_000, ahead
    assert gw.chat("gpt-anthropic").header("x-llm-provider") == "fallback"
