"""Hedged first tokens (`hedge_after`, docs/behaviour.md section 5 "Hedging"), against a real
Envoy in router mode: a first attempt with no output after `hedge_after` gets a second attempt on
the next provider beside it, the first to produce output answers, the other is reset and never
reaches the caller, and the loser counts for no breaker."""
import time

import pytest

import harness

pytestmark = [
    pytest.mark.skipif(
        harness.grouping_mode() or not harness.holds_answers(),
        reason="router mode (Envoy 1.39+) only: render refuses hedge_after on older Envoys"),
    pytest.mark.skipif(harness.external_mode(),
                       reason="each scenario needs its own gateway and mock timings"),
]

CONFIG = harness.STATUS_HEAD + """providers:
  - {name: primary, endpoint: "127.0.0.1:${PRIMARY_PORT}", credential: {header: authorization, value: sk-primary}}
  - {name: secondary, endpoint: "127.0.0.1:${SECONDARY_PORT}", credential: {header: authorization, value: sk-secondary}}
breaker: {failures: 1, window: 60s, cooldown: 60s}
timeouts: {first_token: 8s}
chains: [{name: main, hedge_after: 500ms, providers: [primary, secondary]}]
"""


def values(record: dict, name: str) -> list[str]:
    return [v for k, v in record["headers"] if k.lower() == name]


def hedges(gw) -> dict[str, float]:
    return {f'{labels["provider"]}:{labels["outcome"]}': value for labels, value in
            harness.prometheus_samples(gw.prometheus(), "llm_failover_hedges_total")}


def races(gw) -> dict[str, float]:
    """The hedge counts, once Envoy shows some."""
    return harness.wait_until(lambda: hedges(gw) or None, timeout=5.0, what="hedge counts")


def attempts(gw) -> dict[str, float]:
    return {f'{labels["provider"]}:{labels["outcome"]}': value for labels, value in
            harness.prometheus_samples(gw.prometheus(), "llm_failover_attempts_total")}


@pytest.fixture
def hedged(gateway):
    primary, secondary = gateway.mocks("primary", "secondary")
    gw = gateway.start(CONFIG)
    gw.status_port = int(gateway.env["STATUS_PORT"])
    return gw, primary, secondary


def streamed_race(hedged, primary_ms: int, secondary_ms: int):
    """A streamed request with each provider's first token after that long: (answer, gateway,
    primary, secondary)."""
    gw, primary, secondary = hedged
    primary.set_default(stream=True, first_chunk_delay_ms=primary_ms)
    secondary.set_default(stream=True, first_chunk_delay_ms=secondary_ms)
    r = gw.chat("gpt-4o", stream=True)
    assert r.status == 200, r.text
    return r, gw, primary, secondary


def test_a_slow_first_token_is_raced_and_the_hedge_answers_alone(hedged):
    # Primary's first token at 4 s, hedge_after 500 ms: the caller's first byte comes from
    # secondary well before 1 s, primary's attempt is reset (its mock sees the connection
    # closed), and no byte of it reaches the caller.
    r, gw, primary, secondary = streamed_race(hedged, 4000, 100)
    first_event = r.sse_events()[0][0]
    assert first_event < 1.0, first_event
    assert r.sse_content() == "secondary:0 secondary:1 secondary:2 "
    assert "primary" not in r.text
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-attempts") == "2"
    assert r.header("x-llm-fallback-reason") == "hedge"
    lost, = primary.wait_settled(timeout=6.0)
    won, = secondary.wait_settled(timeout=6.0)
    assert lost["outcome"] == "client_gone", lost
    assert values(lost, "authorization") == ["sk-primary"]
    assert values(won, "authorization") == ["sk-secondary"]
    # Envoy's steering headers stay between the filter and the router.
    assert not values(won, "x-envoy-hedge-on-per-try-timeout")
    line = harness.wait_until(
        lambda: next((x for x in gw.log().splitlines() if "attempts=2" in x), None),
        timeout=5.0, what="the access log line")
    assert "secondary:ok:" in line, line
    assert "primary:hedge_lost:" in line, line
    counts = races(gw)
    assert counts == {"primary:lost": 1, "secondary:won": 1}, counts
    # The loser is no failure: primary's breaker (one failure opens it) stays closed.
    assert "primary:timeout" not in attempts(gw)
    status = gw_status(gw)
    assert status["primary"]["state"] == "closed", status["primary"]


def gw_status(gw) -> dict:
    """{provider: its status entry} of the gateway's status endpoint (its own listener)."""
    r = harness.http_request(f"http://127.0.0.1:{gw.status_port}", "GET", "/llm-failover/status")
    return {p["name"]: p for p in r.json()["providers"]}


def test_a_first_token_before_hedge_after_never_calls_the_next_provider(hedged):
    r, gw, primary, secondary = streamed_race(hedged, 200, 100)
    assert r.sse_content() == "primary:0 primary:1 primary:2 "
    assert r.header("x-llm-attempts") == "1"
    assert secondary.request_count() == 0
    assert not hedges(gw)


def test_a_non_streamed_request_is_hedged_and_gathered(hedged):
    # A JSON caller under a first-token timeout is streamed from each provider and gathered:
    # the race is on the first token all the same.
    gw, primary, secondary = hedged
    primary.set_default(stream=True, first_chunk_delay_ms=4000)
    started = time.monotonic()
    r = gw.chat("gpt-4o")
    took = time.monotonic() - started
    assert r.status == 200, r.text
    assert took < 1.5, took
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == "secondary:0 secondary:1 secondary:2 "
    assert r.header("x-llm-provider") == "secondary"
    assert [x["outcome"] for x in primary.wait_settled(timeout=6.0)] == ["client_gone"]


def test_the_first_attempt_can_win_the_race(hedged):
    # Both slow: primary's token at 900 ms beats secondary's (started at 500 ms) at 1.5 s.
    r, gw, primary, secondary = streamed_race(hedged, 900, 1500)
    assert r.sse_content() == "primary:0 primary:1 primary:2 "
    assert r.header("x-llm-provider") == "primary"
    assert r.header("x-llm-attempts") == "2"
    assert r.header("x-llm-fallback-count") is None
    assert [x["outcome"] for x in secondary.wait_settled(timeout=6.0)] == ["client_gone"]
    counts = races(gw)
    assert counts == {"primary:won": 1, "secondary:lost": 1}, counts


def test_the_losers_failure_after_the_winner_started_changes_nothing(hedged):
    # Secondary wins; primary's provider then answers 503: Envoy already reset that attempt,
    # so the caller's stream is secondary's, whole, and primary's breaker is untouched.
    gw, primary, secondary = hedged
    primary.set_default(status=503, delay_ms=1200)
    secondary.set_default(stream=True, first_chunk_delay_ms=100, chunks=5,
                          chunk_interval_ms=300)
    r = gw.chat("gpt-4o", stream=True)
    assert r.status == 200, r.text
    assert r.sse_content() == "".join(f"secondary:{i} " for i in range(5))
    assert r.header("x-llm-provider") == "secondary"
    assert [x["outcome"] for x in primary.wait_settled(timeout=6.0)] == ["client_gone"]
    assert "primary:server_error" not in attempts(gw)
    assert gw_status(gw)["primary"]["state"] == "closed"


def test_a_failure_during_the_race_lets_the_other_attempt_answer(hedged):
    # The hedge fails at once (503) while primary still waits for its token: Envoy drops the
    # hedge's answer and primary's stream, at 1.2 s, is the caller's.
    gw, primary, secondary = hedged
    primary.set_default(stream=True, first_chunk_delay_ms=1200)
    secondary.set_default(status=503)
    r = gw.chat("gpt-4o", stream=True)
    assert r.status == 200, r.text
    assert r.sse_content() == "primary:0 primary:1 primary:2 "
    assert r.header("x-llm-provider") == "primary"
    counts = races(gw)
    assert counts == {"primary:won": 1, "secondary:failed": 1}, counts
