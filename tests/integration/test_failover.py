"""Router-mode failover through a real Envoy running the built filter, with mock providers on
real sockets. Every scenario runs the example config envoy/demo.failover.yaml,
rendered with ports and a few knobs (timeouts, attempts, breaker) set through its
environment variables."""
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from harness import prometheus_samples

DEMO = "envoy/demo.failover.yaml"


def header(record, name):
    """A header's values in a mock's request record."""
    return [v for k, v in record["headers"] if k.lower() == name.lower()]


def body_json(record):
    return json.loads(record["body"])


@pytest.fixture
def demo(gateway):
    primary, secondary, tertiary = gateway.mocks("primary", "secondary", "tertiary")
    return gateway, primary, secondary, tertiary


@pytest.mark.parametrize("status,reason", [
    (500, "server_error"), (502, "server_error"), (503, "overloaded"), (529, "overloaded"),
    (429, "rate_limited"), (404, "model_not_found"),
])
def test_failing_status_falls_over_and_headers_say_so(demo, status, reason):
    gateway, primary, secondary, tertiary = demo
    primary.set_default(status=status)
    gw = gateway.start(DEMO)
    r = gw.chat("gpt-4o")
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-attempts") == "2"
    assert r.header("x-llm-fallback-count") == "1"
    assert r.header("x-llm-fallback-reason") == reason
    # Internal headers never reach the caller.
    for internal in ("x-llm-failover-retry", "x-envoy-attempt-count"):
        assert r.header(internal) is None
    assert (primary.request_count(), secondary.request_count(), tertiary.request_count()) == (1, 1, 0)


def test_refused_connection_falls_over(demo):
    gateway, primary, secondary, _ = demo
    primary.down()
    gw = gateway.start(DEMO)
    r = gw.chat("gpt-4o")
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-fallback-reason") == "connection_error"


@pytest.mark.parametrize("action", ["reset", "close"])
def test_connection_dropped_before_headers_is_a_connection_error(demo, action):
    gateway, primary, secondary, _ = demo
    primary.set_default(action=action)
    gw = gateway.start(DEMO)
    r = gw.chat("gpt-4o")
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-fallback-reason") == "connection_error"


def test_a_caller_going_away_is_no_provider_failure(demo):
    gateway, primary, secondary, _ = demo
    primary.set_default(action="hang")
    gw = gateway.start(DEMO, env={"BREAKER_FAILURES": "1"})
    with pytest.raises(Exception):
        gw.chat("gpt-4o", timeout=0.5)

    def disconnects():
        samples = prometheus_samples(gw.prometheus(), "llm_failover_attempts_total")
        return sum(v for labels, v in samples
                   if labels == {"provider": "primary", "outcome": "client_disconnect"})

    deadline = time.monotonic() + 5
    while disconnects() < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert disconnects() == 1
    assert secondary.request_count() == 0, "a caller that left is never failed over"
    primary.set_default(status=200)
    r = gw.chat("gpt-4o")
    # With a one-failure breaker, counting the disconnect would have opened it.
    assert r.header("x-llm-provider") == "primary"


def test_hang_past_the_attempt_timeout_falls_over(demo):
    gateway, primary, secondary, _ = demo
    primary.set_default(action="hang")
    gw = gateway.start(DEMO, env={"ATTEMPT_TIMEOUT": "1s"})
    t0 = time.monotonic()
    r = gw.chat("gpt-4o", timeout=20)
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-fallback-reason") == "timeout"
    assert 0.9 < time.monotonic() - t0 < 10


def test_healthy_primary_answers_alone_with_no_fallback_headers(demo):
    gateway, primary, secondary, _ = demo
    gw = gateway.start(DEMO)
    r = gw.chat("gpt-4o")
    assert r.status == 200
    assert r.header("x-llm-provider") == "primary"
    assert r.header("x-llm-attempts") == "1"
    assert r.header("x-llm-fallback-count") is None
    assert r.header("x-llm-fallback-reason") is None
    assert secondary.request_count() == 0


def test_answers_that_do_not_fall_over_reach_the_client_unchanged(demo):
    gateway, primary, secondary, _ = demo
    body = {"error": {"message": "bad temperature", "type": "invalid_request_error", "code": "x"}}
    primary.set_default(status=400, body=body, headers={"x-provider-trace": "abc123"})
    gw = gateway.start(DEMO)
    r = gw.chat("gpt-4o")
    assert r.status == 400
    assert r.json() == body
    assert r.header("x-provider-trace") == "abc123"
    assert r.header("x-llm-provider") == "primary"
    assert r.header("x-llm-attempts") == "1"
    assert secondary.request_count() == 0


def test_401_is_returned_by_default_and_falls_over_when_the_chain_says_so(demo):
    gateway, primary, secondary, _ = demo
    primary.set_default(status=401)
    gw = gateway.start(DEMO)
    assert gw.chat("gpt-4o").status == 401
    assert secondary.request_count() == 0
    gw.envoy.stop()

    gw = gateway.start(DEMO, env={"FALLBACK_ON": "[setup_fault, server_error, overloaded]"})
    r = gw.chat("gpt-4o")
    assert r.status == 200
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-fallback-reason") == "setup_fault"


def test_max_attempts_holds_and_last_error_is_returned(demo):
    gateway, primary, secondary, tertiary = demo
    for m in (primary, secondary, tertiary):
        m.set_default(status=502)
    gw = gateway.start(DEMO, env={"MAX_ATTEMPTS": "2"})
    r = gw.chat("gpt-4o")
    assert r.status == 502
    assert r.header("x-mock-provider") == "secondary"
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-attempts") == "2"
    assert r.header("x-llm-failover-retry") is None
    assert tertiary.request_count() == 0


def test_exhausted_chain_can_answer_fallbacks_exhausted(demo):
    gateway, primary, secondary, tertiary = demo
    for m in (primary, secondary, tertiary):
        m.set_default(status=503)
    gw = gateway.start(DEMO, env={"FALLBACKS_EXHAUSTED": "true"})
    r = gw.chat("gpt-4o")
    assert r.status == 503
    assert r.json()["error"]["code"] == "fallbacks_exhausted"
    assert r.header("x-should-retry") == "true"
    assert r.header("x-llm-attempts") == "3"


def test_opt_out_header_limits_the_request_to_its_first_provider(demo):
    gateway, primary, secondary, _ = demo
    primary.set_default(status=503)
    gw = gateway.start(DEMO)
    r = gw.chat("gpt-4o", headers={"x-llm-fallback": "off"})
    assert r.status == 503
    assert secondary.request_count() == 0
    assert not header(primary.last_request(), "x-llm-fallback")


def test_each_provider_gets_its_own_model_and_key_never_another_or_the_callers(demo):
    gateway, primary, secondary, tertiary = demo
    primary.set_default(status=500)
    secondary.set_default(status=500)
    gw = gateway.start(DEMO)
    r = gw.chat("gpt-4o", headers={"authorization": "Bearer gateway-key", "x-api-key": "caller"})
    assert r.status == 200
    assert r.header("x-llm-provider") == "tertiary"
    p, s, t = primary.last_request(), secondary.last_request(), tertiary.last_request()
    assert header(p, "authorization") == ["Bearer sk-primary"] and not header(p, "x-api-key")
    assert header(s, "authorization") == ["Bearer sk-secondary"] and not header(s, "x-api-key")
    assert header(t, "x-api-key") == ["sk-tertiary"] and not header(t, "authorization")
    assert body_json(p)["model"] == "gpt-4o"
    assert body_json(s)["model"] == "gpt-4o"
    assert body_json(t)["model"] == "tertiary-model"
    assert int(header(t, "content-length")[0]) == len(t["body"].encode())
    for rec in (p, s, t):
        for internal in ("x-envoy-max-retries", "x-llm-failover-retry"):
            assert not header(rec, internal), internal


def test_a_5_mib_body_reaches_the_fallback_byte_identical(demo):
    gateway, primary, secondary, _ = demo
    primary.set_default(status=503)
    gw = gateway.start(DEMO)
    filler = "x" * (5 * 1024 * 1024)
    raw = json.dumps({"messages": [{"role": "user", "content": filler}], "model": "gpt-4o",
                      "temperature": 0.5}, separators=(", ", ": ")).encode()
    r = gw.post("/v1/chat/completions", body=raw, headers={"content-type": "application/json"},
                timeout=60)
    assert r.status == 200, r.text[:500]
    assert r.header("x-llm-provider") == "secondary"
    got = secondary.requests()[-1]
    assert got["body_size"] == len(raw)
    import hashlib
    assert got["body_sha256"] == hashlib.sha256(raw).hexdigest()


def test_callers_cannot_steer_routing(demo):
    gateway, primary, secondary, tertiary = demo
    primary.set_default(status=503)
    gw = gateway.start(DEMO)
    forged = {
        "x-envoy-attempt-count": "2",
        "x-envoy-max-retries": "0",
        "x-envoy-retry-on": "5xx",
        "x-envoy-upstream-rq-per-try-timeout-ms": "1",
        "llm_failover.try1": "tertiary",
        "x-llm-failover-retry": "1",
    }
    r = gw.chat("gpt-4o", headers=forged, fallbacks=["tertiary"])
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "secondary"
    assert tertiary.request_count() == 0
    rec = secondary.last_request()
    assert "fallbacks" not in body_json(rec)
    assert header(rec, "x-envoy-attempt-count") == ["2"]  # Envoy's own count, not the forged one
    assert not header(rec, "x-envoy-max-retries")
    assert not header(rec, "x-envoy-retry-on")


def test_fallback_streams_incrementally(demo):
    gateway, primary, secondary, _ = demo
    primary.set_default(status=503)
    secondary.set_default(chunks=5, chunk_interval_ms=300)
    gw = gateway.start(DEMO)
    r = gw.chat("gpt-4o", stream=True)
    assert r.status == 200
    assert r.header("x-llm-provider") == "secondary"
    events = r.sse_events()
    assert events[-1][1] == "[DONE]"
    assert r.sse_content().startswith("secondary:0 ")
    times = [t for t, _ in events[:5]]
    # Chunks arrive as the provider sends them (~300 ms apart), not all at the end.
    assert times[-1] - times[0] > 0.9, times
    assert min(b - a for a, b in zip(times, times[1:])) > 0.15, times


def test_a_long_healthy_stream_outlives_the_attempt_timeout(demo):
    gateway, primary, secondary, _ = demo
    primary.set_default(chunks=6, chunk_interval_ms=400)
    gw = gateway.start(DEMO, env={"ATTEMPT_TIMEOUT": "1s"})
    r = gw.chat("gpt-4o", stream=True, timeout=20)
    assert r.status == 200
    assert r.complete, r.error
    assert r.sse_content().startswith("primary:0 ")
    assert "primary:5" in r.sse_content()
    assert r.sse_events()[-1][1] == "[DONE]"
    assert secondary.request_count() == 0


def test_stream_failing_after_first_bytes_is_not_failed_over_or_spliced(demo):
    gateway, primary, secondary, _ = demo
    primary.set_default(chunks=5, chunk_interval_ms=50, abort_after_chunks=2, abort="reset")
    gw = gateway.start(DEMO)
    r = gw.chat("gpt-4o", stream=True)
    assert r.status == 200
    assert r.header("x-llm-provider") == "primary"
    content = r.sse_content()
    assert content.startswith("primary:0 primary:1")
    assert "secondary" not in content
    assert "[DONE]" not in [d for _, d in r.sse_events()]
    time.sleep(0.3)
    assert secondary.request_count() == 0


def test_breaker_opens_then_skips_without_spending_an_attempt(demo):
    gateway, primary, secondary, tertiary = demo
    primary.set_default(status=500)
    gw = gateway.start(DEMO, env={"BREAKER_FAILURES": "3", "BREAKER_COOLDOWN": "60s"})
    for _ in range(3):
        assert gw.chat("gpt-4o").header("x-llm-provider") == "secondary"
    assert primary.request_count() == 3
    r = gw.chat("gpt-4o")
    assert r.status == 200
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-attempts") == "1"
    assert r.header("x-llm-fallback-reason") == "breaker_open"
    assert primary.request_count() == 3


def test_breaker_counts_every_failure_across_workers(demo):
    gateway, primary, secondary, _ = demo
    primary.set_default(status=500, delay_ms=200)
    gw = gateway.start(DEMO, env={"BREAKER_FAILURES": "40", "BREAKER_COOLDOWN": "60s"})
    # 40 concurrent requests on fresh connections, spread over Envoy's two workers, all
    # planned before any failure is recorded: the breaker must count exactly 40 and open.
    with ThreadPoolExecutor(40) as pool:
        results = list(pool.map(lambda _: gw.chat("gpt-4o"), range(40)))
    assert all(r.header("x-llm-provider") == "secondary" for r in results)
    assert primary.request_count() == 40
    r = gw.chat("gpt-4o")
    assert r.header("x-llm-fallback-reason") == "breaker_open"
    assert primary.request_count() == 40


@pytest.mark.parametrize("behaviour", [
    {"status": 404},
    {"status": 429, "headers": {"Retry-After": "3600"}},
], ids=["model_not_found", "quota_spent"])
def test_dead_marks_skip_the_provider_for_that_model_only(demo, behaviour):
    gateway, primary, secondary, _ = demo
    primary.set_default(**behaviour)
    gw = gateway.start(DEMO)
    assert gw.chat("gpt-4o").header("x-llm-provider") == "secondary"
    assert primary.request_count() == 1
    primary.set_default(status=200)
    r = gw.chat("gpt-4o")
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-attempts") == "1"
    assert primary.request_count() == 1, "a dead model is skipped without an attempt"
    # Another model on the same provider is unaffected.
    assert gw.chat("gpt-4o-mini").header("x-llm-provider") == "primary"


def test_all_providers_open_is_an_immediate_circuit_open(demo):
    gateway, primary, secondary, tertiary = demo
    for m in (primary, secondary, tertiary):
        m.set_default(status=500)
    gw = gateway.start(DEMO, env={"BREAKER_FAILURES": "2", "BREAKER_COOLDOWN": "60s"})
    for _ in range(2):
        assert gw.chat("gpt-4o").status == 500
    counts = [m.request_count() for m in (primary, secondary, tertiary)]
    t0 = time.monotonic()
    r = gw.chat("gpt-4o")
    elapsed = time.monotonic() - t0
    assert r.status == 503
    assert r.json()["error"]["code"] == "circuit_open"
    assert r.header("x-should-retry") == "true"
    assert elapsed < 0.5
    assert [m.request_count() for m in (primary, secondary, tertiary)] == counts


def test_breaker_lets_one_probe_through_after_cooldown_and_closes_on_success(demo):
    gateway, primary, secondary, _ = demo
    primary.set_default(status=500)
    gw = gateway.start(DEMO, env={"BREAKER_FAILURES": "2", "BREAKER_COOLDOWN": "1s"})
    for _ in range(2):
        gw.chat("gpt-4o")
    assert gw.chat("gpt-4o").header("x-llm-fallback-reason") == "breaker_open"
    assert primary.request_count() == 2
    time.sleep(1.2)
    primary.set_default(delay_ms=500)  # healthy again, but slow: probes overlap
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: gw.chat("gpt-4o"), range(8)))
    assert all(r.status == 200 for r in results)
    served = [r.header("x-llm-provider") for r in results]
    assert served.count("primary") == 1, served  # exactly one probe
    assert primary.request_count() == 3
    # The probe succeeded: the breaker is closed again.
    r = gw.chat("gpt-4o")
    assert r.header("x-llm-provider") == "primary"


def test_retry_after_extends_the_cooldown(demo):
    gateway, primary, secondary, _ = demo
    primary.set_default(status=503, headers={"Retry-After": "3"})
    gw = gateway.start(DEMO, env={"BREAKER_FAILURES": "1", "BREAKER_COOLDOWN": "1s"})
    gw.chat("gpt-4o")
    assert primary.request_count() == 1
    primary.set_default(status=200)
    time.sleep(1.5)  # past the configured cooldown, inside Retry-After
    assert gw.chat("gpt-4o").header("x-llm-provider") == "secondary"
    assert primary.request_count() == 1
    time.sleep(2.0)  # past Retry-After
    assert gw.chat("gpt-4o").header("x-llm-provider") == "primary"


def test_200_concurrent_requests_with_a_failing_primary_lose_none(demo):
    gateway, primary, secondary, _ = demo
    primary.set_default(status=503)
    # A high threshold keeps the breaker closed so every request really fails over.
    gw = gateway.start(DEMO, env={"BREAKER_FAILURES": "1000"})
    n = 200

    def one(i):
        return gw.chat("gpt-4o", headers={"x-request-id": f"req-{i}"}, timeout=60)

    with ThreadPoolExecutor(200) as pool:
        results = list(pool.map(one, range(n)))
    assert [r.status for r in results] == [200] * n
    assert all(r.header("x-llm-provider") == "secondary" for r in results)
    ids = [header(rec, "x-request-id")[0] for rec in secondary.requests(bodies=False)]
    assert sorted(ids) == sorted(f"req-{i}" for i in range(n))
    stats = gw.stats()
    overflow = sum(v for k, v in stats.items() if k.endswith("upstream_rq_retry_overflow"))
    assert overflow == 0


def test_header_values_that_are_not_utf8_pass_through_and_break_nothing(demo):
    """HTTP allows obs-text (bytes 0x80-0xFF) in header values and Envoy forwards them. The
    filter reads every request header and, on failures, the provider's answer headers: none
    of that may assume UTF-8 (a panic would take the worker's wasm VM down)."""
    gateway, primary, secondary, _ = demo
    primary.set_default(status=429, headers={"x-ratelimit-note": "\u00e9t\u00e9",
                                             "retry-after": "\u00ff"})
    gw = gateway.start(DEMO)
    for i in range(3):
        r = gw.chat("gpt-4o", headers={"openai-note": "caf\u00e9", "x-note": "caf\u00e9",
                                       "x-request-id": f"latin-{i}"})
        assert r.status == 200, r.text
        assert r.header("x-llm-provider") == "secondary"
        assert r.header("x-llm-fallback-reason") == "rate_limited"
    # The bytes reach the providers unchanged (the mock reads headers as latin-1) in a header
    # providers take; a header they do not take is removed, bytes and all.
    for mock in (primary, secondary):
        records = mock.requests(bodies=False)
        assert len(records) == 3
        assert all(header(rec, "openai-note") == ["caf\u00e9"] for rec in records)
        assert all(header(rec, "x-note") == [] for rec in records)


def test_a_provider_cannot_trigger_a_failover_by_sending_the_internal_marker(demo):
    """The retry policy retries answers carrying x-llm-failover-retry; only the filter may set
    it. A provider's own copy is removed, so its answer stands."""
    gateway, primary, secondary, _ = demo
    primary.set_default(headers={"x-llm-failover-retry": "1"})
    gw = gateway.start(DEMO)
    r = gw.chat("gpt-4o")
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "primary"
    assert r.header("x-llm-attempts") == "1"
    assert r.header("x-llm-failover-retry") is None
    assert (primary.request_count(), secondary.request_count()) == (1, 0)


def test_bad_plugin_configuration_is_refused_naming_the_field(gateway, render, tmp_path):
    import subprocess
    import harness
    path = render(DEMO, {**gateway.env, "PRIMARY_PORT": "1", "SECONDARY_PORT": "2",
                         "TERTIARY_PORT": "3"})
    text = path.read_text()
    # Corrupt the plugin configuration the way a hand edit could: an unknown provider.
    broken = text.replace('["primary","secondary",', '["primary","secnodary",')
    assert broken != text, "could not find the chain in the rendered config"
    bad = tmp_path / "bad.yaml"
    bad.write_text(broken)
    out = subprocess.run([harness.envoy_bin(), "--mode", "validate", "-c", str(bad)],
                         cwd=harness.REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "unknown provider" in out.stdout + out.stderr
    assert "chains[0].providers[1]" in out.stdout + out.stderr
