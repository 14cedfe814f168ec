"""What Envoy's own hedging (route `hedge_policy: {hedge_on_per_try_timeout: true}`) does to
router mode, pinned against a real Envoy (docs/internals.md "Hedging: why Envoy's router cannot
race two providers"). The filter does not offer hedging; these tests hold the facts that decision
stands on, and the one way found for a hedge to reach another provider, so an Envoy that changes
them fails here first.

The tests on the filter render the usual router-mode configuration and add the hedge policy to
its route by hand, as an operator editing the rendered file would."""
import time

import pytest

import harness

pytestmark = [
    pytest.mark.skipif(
        harness.grouping_mode() or not harness.holds_answers(),
        reason="router mode (Envoy 1.39+) only: older Envoys carry attempts another way"),
    pytest.mark.skipif(harness.external_mode(),
                       reason="edits the rendered bootstrap: needs its own Envoy"),
]

CONFIG = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
providers:
""" + "".join(
    f'  - {{name: {name}, endpoint: "127.0.0.1:${{{name.upper()}_PORT}}", '
    f'credential: {{header: authorization, value: sk-{name}}}}}\n'
    for name in ("primary", "secondary")) + """timeouts: TIMEOUTS
chains: [{name: main, providers: PROVIDERS}]
"""
HEDGE = "hedge_policy: {hedge_on_per_try_timeout: true}\n                  retry_policy:"


def start_hedged(gateway, tmp_path, timeouts, providers):
    """The rendered configuration with Envoy's hedge policy on its one route."""
    source = CONFIG.replace("TIMEOUTS", timeouts).replace("PROVIDERS", providers)
    rendered = harness.render_config(source, gateway.env, out_dir=tmp_path / "rendered")
    text = rendered.read_text()
    assert text.count("retry_policy:") == 1, "expected one route with one retry policy"
    hedged = tmp_path / "hedged.envoy.yaml"
    hedged.write_text(text.replace("retry_policy:", HEDGE))
    return gateway.start_bootstrap(hedged)


def test_a_hedged_attempt_goes_to_the_first_attempts_cluster_not_the_next_providers(
        gateway, tmp_path):
    # Attempt 2 is planned for secondary. A retry re-runs the matcher cluster specifier
    # (refresh_cluster_on_retry); the hedge a per-try timeout sends does not: it goes to
    # primary's cluster, the upstream role refuses it as misrouted, and that local reply ends
    # the whole request, the still-running first attempt with it.
    primary, secondary = gateway.mocks("primary", "secondary")
    primary.set_default(delay_ms=3000)
    gw = start_hedged(gateway, tmp_path, "{attempt: 500ms}", "[primary, secondary]")
    started = time.monotonic()
    r = gw.chat("gpt-4o", stream=True)
    took = time.monotonic() - started
    assert r.status == 502, r.text
    assert r.json()["error"]["code"] == "misrouted_attempt"
    assert "attempt 2 was planned for provider" in r.text
    assert took < 2.0, took
    assert secondary.request_count() == 0
    records = primary.wait_settled(timeout=6.0)
    assert len(records) == 1 and records[0]["outcome"] == "client_gone", records


def test_within_one_cluster_the_first_to_release_its_held_headers_wins_and_the_loser_is_reset(
        gateway, tmp_path):
    # Both slots on primary's cluster (two entries of one provider), so the hedge is accepted.
    # The upstream role holds a stream's headers until its first output (first_token), so the
    # router sees the first *token*, not the first headers: the hedge's token at 300 ms wins
    # over the first attempt's at 3 s, whose stream Envoy resets (the mock sees it go).
    primary, _ = gateway.mocks("primary", "secondary")
    primary.enqueue({"status": 200, "stream": True, "first_chunk_delay_ms": 3000},
                    {"status": 200, "stream": True, "first_chunk_delay_ms": 300})
    gw = start_hedged(gateway, tmp_path, "{first_token: 2500ms, attempt: 500ms}",
                      "[primary, {provider: primary, model: hedge-model}]")
    started = time.monotonic()
    r = gw.chat("gpt-4o", stream=True)
    took = time.monotonic() - started
    assert r.status == 200, r.text
    assert r.header("x-llm-attempts") == "2"
    assert '"model": "hedge-model"' in r.text and "chatcmpl-mock-primary-1" not in r.text
    assert took < 2.0, took
    first, second = primary.wait_settled(timeout=6.0)
    assert first["outcome"] == "client_gone", first
    assert second["outcome"] == "streamed", second


def test_a_hedge_is_hedged_again_three_attempts_in_flight(gateway, tmp_path):
    # Every per-try timeout sends one more attempt while retries are left: three in flight at
    # 0, 500 and 1000 ms, the first two reset when the third answers.
    primary, _ = gateway.mocks("primary", "secondary")
    primary.enqueue({"delay_ms": 3000}, {"delay_ms": 3000}, {"delay_ms": 300})
    gw = start_hedged(gateway, tmp_path, "{attempt: 500ms}",
                      "[primary, {provider: primary, model: b}, {provider: primary, model: c}]")
    r = gw.chat("gpt-4o")
    assert r.status == 200, r.text
    assert r.header("x-llm-attempts") == "3"
    assert r.json()["model"] == "c"
    outcomes = [x["outcome"] for x in primary.wait_settled(timeout=6.0)]
    assert outcomes == ["client_gone", "client_gone", "responded"], outcomes


def test_with_hedging_the_per_try_timeout_no_longer_ends_an_attempt(gateway, tmp_path):
    # With no retry left the per-try timeout ends nothing: a lone attempt runs past it (1.5 s
    # against 500 ms) and its answer is used; without the hedge policy it would be a timeout.
    primary, _ = gateway.mocks("primary", "secondary")
    primary.set_default(delay_ms=1500)
    gw = start_hedged(gateway, tmp_path, "{attempt: 500ms}", "[primary]")
    started = time.monotonic()
    r = gw.chat("gpt-4o")
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "primary"
    assert time.monotonic() - started >= 1.4


# Envoy's hedge on the route, and the retry priority that moves a retry to a priority not tried.
PAIR_ROUTE = """{cluster: upstream, timeout: 0s,
                  hedge_policy: {hedge_on_per_try_timeout: true},
                  retry_policy: {retry_on: reset, num_retries: 1, per_try_timeout: 0.5s,
                    retry_priority: {name: envoy.retry_priorities.previous_priorities,
                      typed_config: {"@type": "type.googleapis.com/envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig",
                                     update_frequency: 1}}}}"""


def pair_endpoints(first: int, second: int) -> str:
    """Two endpoints, `first` at priority 0 and `second` at priority 1."""
    return "[" + ", ".join(
        f"{{priority: {priority}, lb_endpoints: [{{endpoint: {{address: {{socket_address: "
        f"{{address: 127.0.0.1, port_value: {port}}}}}}}}}]}}"
        for priority, port in ((0, first), (1, second))) + "]"


def test_a_hedge_moves_to_the_next_priority_of_one_cluster_with_previous_priorities(gateway):
    # The one way found for Envoy's hedge to reach another provider (no filter here, plain
    # Envoy): both providers' endpoints in one cluster at priorities 0 and 1, and the retry
    # priority `previous_priorities`, so the hedge's host selection skips the priority tried.
    first, second = gateway.mocks("primary", "secondary")
    first.set_default(delay_ms=3000)
    second.set_default(delay_ms=200)
    bootstrap = harness.plain_bootstrap(harness.free_port(), harness.free_port(), PAIR_ROUTE,
                                        pair_endpoints(first.port, second.port))
    gw = gateway.start_bootstrap(bootstrap)
    started = time.monotonic()
    r = gw.chat("gpt-4o")
    took = time.monotonic() - started
    assert r.status == 200, r.text
    assert r.json()["id"].startswith("chatcmpl-mock-secondary"), r.text
    assert took < 2.0, took
    assert [x["outcome"] for x in first.wait_settled(timeout=6.0)] == ["client_gone"]
    assert [x["outcome"] for x in second.wait_settled(timeout=6.0)] == ["responded"]
