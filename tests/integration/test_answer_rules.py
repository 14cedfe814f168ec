"""Answers a provider gives that are not what they seem, and what the breaker counts (behaviour.md 16),
through one real Envoy for the whole module:

* a translated attempt whose `200` is no answer of its provider's API (JSON or stream) falls
  over as a `server_error`; on the last entry the caller gets a `502` in its own API, never a
  `200` holding an error (both directions: OpenAI caller -> Anthropic provider, Anthropic
  caller -> OpenAI provider);
* with `retry_in_place`, a request counts once toward its provider's breaker: a primary that
  answers every try `503` opens its breaker (failures 3) after three requests, not two;
* a browser's request (with `Origin`) gets the gateway's headers in
  `access-control-expose-headers`, merged with what is there, also behind Envoy's CORS filter
  (a second Envoy, the rendered bootstrap with the filter and a cors policy added)."""
import json

import pytest

import harness
from harness import Envoy, prometheus_samples, render_config, start_mock

if harness.external_mode():
    pytest.skip("needs its own gateway and mocks", allow_module_level=True)

# After the skip: the docker-compose run's test image has no PyYAML, and skips this module.
import yaml  # noqa: E402  (PyYAML, tests/integration/requirements.txt)

MOCKS = ("oai", "ant", "backup", "flaky", "spare")
CONFIG = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
breaker: {failures: 3, window: 30s, cooldown: 60s}
providers:
  - {name: oai, endpoint: "127.0.0.1:${OAI_PORT}", api: openai,
     credential: {header: authorization, prefix: "Bearer ", value: sk-oai}}
  - {name: ant, endpoint: "127.0.0.1:${ANT_PORT}", api: anthropic,
     credential: {header: x-api-key, value: sk-ant}}
  - {name: backup, endpoint: "127.0.0.1:${BACKUP_PORT}", api: openai}
  - {name: flaky, endpoint: "127.0.0.1:${FLAKY_PORT}"}
  - {name: spare, endpoint: "127.0.0.1:${SPARE_PORT}"}
chains:
  - name: gpt                     # an OpenAI-SDK app: OpenAI, Anthropic, another OpenAI
    models: ["gpt-*"]
    providers: [oai, {provider: ant, model: claude-x}, backup]
  - name: claude                  # an Anthropic-SDK app: Anthropic, then OpenAI (the last)
    models: ["claude-*"]
    providers: [ant, {provider: oai, model: gpt-x}]
  - name: flaky
    models: ["flaky-*"]
    providers: [flaky, spare]
ROUTER_ONLY"""
IN_PLACE = "    retry_in_place: {}\n"
needs_router = pytest.mark.skipif(
    harness.grouping_mode(),
    reason="in-place retry needs Envoy 1.39+ (refused at render for Envoy 1.36-1.38)")
needs_hold = pytest.mark.skipif(
    not harness.holds_answers(),
    reason="Envoy 1.36 classifies on status and headers only (1.36.4 crashes retrying an "
           "attempt whose answer was held to read its body)")


def start(d, mocks, patch=None):
    """Envoy on CONFIG rendered for `mocks`; `patch(bootstrap)` edits the rendered bootstrap."""
    env = {f"{name.upper()}_PORT": str(m.port) for name, m in mocks.items()}
    env.update(LISTEN_PORT=str(harness.free_port()), ADMIN_PORT=str(harness.free_port()))
    config = CONFIG.replace("ROUTER_ONLY", "" if harness.grouping_mode() else IN_PLACE)
    path = render_config(config, env, out_dir=d)
    if patch:
        bootstrap = yaml.safe_load(path.read_text())
        patch(bootstrap)
        path.write_text(yaml.safe_dump(bootstrap))
    envoy = Envoy(path, d / "envoy", env=env).start()
    gateway = harness.Gateway(envoy.listener_url(), envoy.admin_url, envoy=envoy)
    gateway.mocks = mocks
    return envoy, gateway


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    mocks = {name: start_mock(name) for name in MOCKS}
    envoy = None
    try:
        envoy, gateway = start(tmp_path_factory.mktemp("answer-rules"), mocks)
        yield gateway
    finally:
        if envoy:
            envoy.stop()
        for m in mocks.values():
            m.stop()


@pytest.fixture
def mocks(gw):
    for m in gw.mocks.values():
        m.reset()
    return gw.mocks


NOT_AN_ANSWER = {"status": 200, "stream": False, "content_type": "application/json",
                 "body": {"hello": "world"}}
# A first event no API has: an OpenAI caller's Anthropic provider, or the reverse.
NOT_AN_EVENT = {"status": 200, "stream": True, "events": ['data: {"hello": "world"}\n\n',
                                                          "data: [DONE]\n\n"]}
# The first entry steps aside without counting toward its breaker (a 429 counts for none).
STEP_ASIDE = {"status": 429}
CLAUDE = {"max_tokens": 64}
MESSAGES = {"path": "/v1/messages", "headers": {"anthropic-version": "2023-06-01"}}


def attempts(gw, provider, outcome):
    for labels, value in prometheus_samples(gw.prometheus(), "llm_failover_attempts_total"):
        if labels == {"provider": provider, "outcome": outcome}:
            return value
    return 0


@needs_hold
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_openai_callers_anthropic_fallback_that_answers_no_messages_answer_falls_over(
        gw, mocks, stream):
    mocks["oai"].set_default(STEP_ASIDE)
    mocks["ant"].set_default(NOT_AN_EVENT if stream else NOT_AN_ANSWER)
    r = gw.chat("gpt-4o", stream=stream)
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "backup"
    assert r.header("x-llm-attempts") == "3"
    assert [rec["path"] for rec in mocks["ant"].requests()] == ["/v1/messages"]
    if stream:
        assert r.sse_content() == "backup:0 backup:1 backup:2 "
        assert "stream_cut_short" not in r.text
    else:
        assert r.json()["choices"][0]["message"]["content"].startswith("Hello from backup")
    assert attempts(gw, "ant", "server_error") >= 1


@needs_hold
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_anthropic_callers_last_openai_entry_that_answers_no_completion_is_a_502(
        gw, mocks, stream):
    mocks["ant"].set_default(STEP_ASIDE)
    mocks["oai"].set_default(NOT_AN_EVENT if stream else NOT_AN_ANSWER)
    r = gw.chat("claude-x", stream=stream, **MESSAGES, **CLAUDE)
    assert r.status == 502, r.text
    assert r.header("content-type") == "application/json"
    assert r.header("x-should-retry") == "true"
    assert r.header("x-llm-provider") == "oai"
    error = r.json()
    assert error["type"] == "error", error
    assert error["error"]["type"] == "api_error"
    assert "could not be translated" in error["error"]["message"]
    assert [rec["path"] for rec in mocks["oai"].requests()] == ["/v1/chat/completions"]


@needs_router
def test_retry_in_place_does_not_halve_the_breakers_threshold(gw, mocks):
    mocks["flaky"].set_default(status=503)
    for n in range(1, 4):
        r = gw.chat("flaky-model")
        assert r.status == 200, r.text
        assert r.header("x-llm-provider") == "spare"
        # Each request: the primary, its retry in place, then the spare.
        assert r.header("x-llm-attempts") == "3", f"request {n}"
        assert mocks["flaky"].request_count() == 2 * n, f"request {n} tried the primary twice"
    # Three requests, three failures: open; the next request does not try the primary.
    r = gw.chat("flaky-model")
    assert r.status == 200, r.text
    assert r.header("x-llm-fallback-reason") == "breaker_open"
    assert r.header("x-llm-attempts") == "1"
    assert mocks["flaky"].request_count() == 6
    assert attempts(gw, "flaky", "overloaded") == 6


# ---------------------------------------------------------------------------------------------
# Headers browsers can read (behaviour.md 16).

EXPOSE = "access-control-expose-headers"
OURS = "x-llm-provider, x-llm-attempts, x-llm-fallback-count, x-llm-fallback-reason"
ORIGIN = {"origin": "https://app.example"}


def test_a_browsers_request_gets_the_gateways_headers_exposed(gw, mocks):
    mocks["oai"].set_default(STEP_ASIDE)
    mocks["ant"].set_default(headers={EXPOSE: "x-mock-provider"})
    r = gw.chat("gpt-4o", headers=ORIGIN)
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "ant"
    # The provider's own list, and ours after it.
    assert r.header(EXPOSE) == f"x-mock-provider, {OURS}"
    mocks["ant"].set_default({})
    r = gw.chat("gpt-4o", headers=ORIGIN)
    assert r.header(EXPOSE) == OURS
    # No Origin: nothing added.
    r = gw.chat("gpt-4o")
    assert r.status == 200 and r.header(EXPOSE) is None


CORS_FILTER = {"name": "envoy.filters.http.cors", "typed_config": {
    "@type": "type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors"}}
CORS_POLICY = {
    "@type": "type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy",
    "allow_origin_string_match": [{"exact": "https://app.example"}],
    "allow_methods": "POST, OPTIONS", "allow_headers": "content-type, authorization"}


def with_cors(bootstrap):
    """Envoy's CORS filter first in the API listener's chain (it answers preflights before
    llm_failover sees them, and so runs after it on the response), the policy on the host."""
    hcm = bootstrap["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    config = hcm["typed_config"]
    config["http_filters"].insert(0, CORS_FILTER)
    for host in config["route_config"]["virtual_hosts"]:
        host.setdefault("typed_per_filter_config", {})["envoy.filters.http.cors"] = CORS_POLICY


def test_behind_envoys_cors_filter_the_gateways_headers_are_exposed_too(tmp_path):
    mocks = {name: start_mock(name) for name in MOCKS}
    envoy = None
    try:
        envoy, cors = start(tmp_path, mocks, patch=with_cors)
        # The preflight is the CORS filter's: no provider sees it.
        r = cors.request("OPTIONS", "/v1/chat/completions", headers={
            **ORIGIN, "access-control-request-method": "POST"})
        assert r.status == 200, r.text
        assert r.header("access-control-allow-origin") == "https://app.example"
        assert all(m.request_count() == 0 for m in mocks.values())
        # The request: the CORS filter's headers and ours.
        r = cors.chat("gpt-4o", headers=ORIGIN)
        assert r.status == 200, r.text
        assert r.header("access-control-allow-origin") == "https://app.example"
        assert r.header(EXPOSE) == OURS
    finally:
        if envoy:
            envoy.stop()
        for m in mocks.values():
            m.stop()
