"""What Envoy's own hedging (route `hedge_policy: {hedge_on_per_try_timeout: true}`) does to
router mode, pinned against a real Envoy (docs/internals.md "Hedging: what Envoy's router does
with a hedge"). The filter does not offer hedging; these tests hold the facts a `hedge_after`
would stand on: a hedge keeps the first attempt's cluster, and a composite cluster (Envoy 1.40's
`envoy.clusters.composite`, a sub-cluster per attempt number) is the way found for it to reach
the next provider, with the limits found there. An Envoy that changes them fails here first.

The tests on the filter render the usual router-mode configuration and add the hedge policy (and
the composite cluster) by hand, as an operator editing the rendered file would."""
import copy
import shutil
import time

import pytest

import harness

if harness.external_mode():
    # Before yaml's import: the compose harness's image has no yaml module.
    pytest.skip("edits the rendered bootstrap: needs its own Envoy", allow_module_level=True)

import yaml  # noqa: E402

pytestmark = pytest.mark.skipif(
    harness.grouping_mode() or not harness.holds_answers(),
    reason="router mode (Envoy 1.39+) only: older Envoys carry attempts another way")

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


# ---------------------------------------------------------------- the composite cluster
# Envoy 1.40's composite cluster picks its sub-cluster by the attempt number (attempt 1 the
# first, attempt 2 the second), and a hedge advances the attempt number although it keeps the
# first attempt's (composite) cluster.
COMPOSITE_TYPE = {"name": "envoy.clusters.composite", "typed_config": {
    "@type": "type.googleapis.com/envoy.extensions.clusters.composite.v3.ClusterConfig",
    "clusters": []}}
HEADER_MUTATION = "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation"


def tagging_filters(tag: str) -> dict:
    """Upstream filters that add `x-chain: tag` to every request this cluster's chain sends."""
    return {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
        "explicit_http_config": {"http_protocol_options": {}},
        "http_filters": [
            {"name": "tag", "typed_config": {"@type": HEADER_MUTATION, "mutations": {
                "request_mutations": [{"append": {"header": {"key": "x-chain", "value": tag},
                                                  "append_action": "APPEND_IF_EXISTS_OR_ADD"}}]}}},
            {"name": "envoy.filters.http.upstream_codec", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"}}]}}


def static_cluster(name: str, port: int) -> dict:
    return {"name": name, "type": "STATIC", "connect_timeout": "1s",
            "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [
                {"endpoint": {"address": {"socket_address": {
                    "address": "127.0.0.1", "port_value": port}}}}]}]},
            "typed_extension_protocol_options": tagging_filters(name)}


def composite_cluster(name: str, subs: list[str]) -> dict:
    kind = copy.deepcopy(COMPOSITE_TYPE)
    kind["typed_config"]["clusters"] = [{"name": s} for s in subs]
    return {"name": name, "connect_timeout": "1s", "lb_policy": "CLUSTER_PROVIDED",
            "cluster_type": kind, "typed_extension_protocol_options": tagging_filters(name)}


def composite_bootstrap(first: int, second: int, retries: int, hedge_policy: bool = True,
                        tweak=None) -> str:
    """Plain Envoy (no filter): the route's cluster is composite `both` = [first, second],
    a 0.5 s per-try timeout, and Envoy's hedge on the route (or not: the caller may ask for
    it per request with `x-envoy-hedge-on-per-try-timeout`)."""
    route = {"cluster": "both", "timeout": "0s",
             "retry_policy": {"retry_on": "reset", "num_retries": retries,
                              "per_try_timeout": "0.5s"}}
    if hedge_policy:
        route["hedge_policy"] = {"hedge_on_per_try_timeout": True}
    boot = yaml.safe_load(harness.plain_bootstrap(harness.free_port(), harness.free_port(),
                                                  "{cluster: both}", "[]"))
    hcm = boot["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    vhost = hcm["typed_config"]["route_config"]["virtual_hosts"][0]
    vhost["include_request_attempt_count"] = True
    vhost["routes"][0]["route"] = route
    clusters = [composite_cluster("both", ["first", "second"]),
                static_cluster("first", first), static_cluster("second", second)]
    if tweak:
        tweak(clusters)
    boot["static_resources"]["clusters"] = clusters
    return yaml.safe_dump(boot)


def values(record: dict, name: str) -> list[str]:
    return [v for k, v in record["headers"] if k.lower() == name]


@pytest.mark.parametrize("per_request", [False, True], ids=["route_policy", "request_header"])
def test_a_hedge_through_a_composite_cluster_reaches_its_second_sub_cluster(gateway, per_request):
    # (a) the hedge goes to the second sub-cluster; (b) the composite's own upstream filter chain
    # runs for both attempts, the sub-clusters' never (one request header map: attempt 2 shows
    # the composite's mutation twice); (c) the first response wins and the loser is reset.
    # Hedging asked per request (the header, no route policy) behaves the same.
    first, second = gateway.mocks("primary", "secondary")
    first.set_default(delay_ms=3000)
    second.set_default(delay_ms=200)
    gw = gateway.start_bootstrap(composite_bootstrap(first.port, second.port, 1,
                                                     hedge_policy=not per_request))
    headers = {"x-envoy-hedge-on-per-try-timeout": "true"} if per_request else None
    started = time.monotonic()
    r = gw.chat("gpt-4o", headers=headers)
    took = time.monotonic() - started
    assert r.status == 200, r.text
    assert r.json()["id"].startswith("chatcmpl-mock-secondary"), r.text
    assert 0.6 < took < 1.5, took
    lost, = first.wait_settled(timeout=6.0)
    won, = second.wait_settled(timeout=6.0)
    assert lost["outcome"] == "client_gone" and won["outcome"] == "responded"
    assert values(lost, "x-envoy-attempt-count") == ["1"]
    assert values(won, "x-envoy-attempt-count") == ["2"]
    assert values(lost, "x-chain") == ["both"]
    assert values(won, "x-chain") == ["both", "both"]


def test_a_third_per_try_timeout_with_no_third_sub_cluster_ends_the_whole_request(gateway):
    # (d) With a retry left, the hedge's own per-try timeout hedges again: attempt 3 maps to no
    # sub-cluster, Envoy answers `503 no healthy upstream` at once and resets both attempts.
    first, second = gateway.mocks("primary", "secondary")
    first.set_default(delay_ms=3000)
    second.set_default(delay_ms=3000)
    gw = gateway.start_bootstrap(composite_bootstrap(first.port, second.port, 2))
    started = time.monotonic()
    r = gw.chat("gpt-4o")
    took = time.monotonic() - started
    assert r.status == 503 and "no healthy upstream" in r.text, r.text
    assert 0.9 < took < 1.6, took
    assert [x["outcome"] for x in first.wait_settled(timeout=6.0)] == ["client_gone"]
    assert [x["outcome"] for x in second.wait_settled(timeout=6.0)] == ["client_gone"]


def test_with_no_retry_left_the_hedge_is_not_hedged_again(gateway):
    # One retry (the hedge) and two slow sub-clusters: the hedge's per-try timeout sends
    # nothing more, the per-try timeout ends neither attempt, and the first answer (1.2 s after
    # its start, the hedge's, against the first attempt's 3 s) is used.
    first, second = gateway.mocks("primary", "secondary")
    first.set_default(delay_ms=3000)
    second.set_default(delay_ms=1200)
    gw = gateway.start_bootstrap(composite_bootstrap(first.port, second.port, 1))
    r = gw.chat("gpt-4o")
    assert r.status == 200, r.text
    assert r.json()["id"].startswith("chatcmpl-mock-secondary"), r.text
    assert [x["outcome"] for x in first.wait_settled(timeout=6.0)] == ["client_gone"]


def test_a_composite_attempt_uses_its_sub_clusters_transport_socket(gateway, tmp_path):
    # The connection is the sub-cluster's: its TLS transport socket (and SNI) carries the hedge
    # although the composite has none.
    if shutil.which("openssl") is None:
        pytest.skip("the openssl CLI is needed to make a test certificate")
    from mock_provider import MockProvider
    from test_tls_providers import SNI, _make_ca, _make_server_cert
    ca = _make_ca(tmp_path, "ca")
    cert, key = _make_server_cert(tmp_path, "good", SNI, ca, 2001)
    first, _ = gateway.mocks("primary", "secondary")
    first.set_default(delay_ms=3000)
    tls = MockProvider("tls-second", tls_cert=cert, tls_key=key).start()
    try:
        tls_client = harness.MockClient("tls-second", tls.control_url)
        tls_client.set_default(delay_ms=200)

        def tls_second(clusters):
            clusters[2]["transport_socket"] = {"name": "envoy.transport_sockets.tls", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "sni": SNI,
                "common_tls_context": {"validation_context": {"trusted_ca": {"filename": str(ca[0])}}}}}
        gw = gateway.start_bootstrap(composite_bootstrap(first.port, tls_client.port, 1,
                                                         tweak=tls_second))
        r = gw.chat("gpt-4o")
        assert r.status == 200, r.text
        assert r.json()["id"].startswith("chatcmpl-mock-tls-second"), r.text
        won, = tls_client.wait_settled(timeout=6.0)
        assert won["tls"]["sni"] == SNI, won
    finally:
        tls.stop()


def start_composite_gateway(gateway, tmp_path, timeouts: str):
    """The rendered router-mode configuration, edited as a hedging render would have to: a
    composite cluster [primary, secondary] carrying the upstream role's filters, the
    providers' hosts naming their provider in metadata (the destination check's second way),
    attempt 1 of a plan starting at primary sent to the composite, Envoy's hedge on the route."""
    source = CONFIG.replace("TIMEOUTS", timeouts).replace("PROVIDERS", "[primary, secondary]")
    rendered = harness.render_config(source, gateway.env, out_dir=tmp_path / "rendered")
    boot = yaml.safe_load(rendered.read_text())
    clusters = boot["static_resources"]["clusters"]
    by_name = {c["name"]: c for c in clusters}
    pair = composite_cluster("hedge_primary_secondary", ["primary", "secondary"])
    pair["typed_extension_protocol_options"] = copy.deepcopy(
        by_name["primary"]["typed_extension_protocol_options"])
    clusters.append(pair)
    for name in ("primary", "secondary"):
        for group in by_name[name]["load_assignment"]["endpoints"]:
            for host in group["lb_endpoints"]:
                host["metadata"] = {"filter_metadata": {"llm_failover": {"provider": name}}}
    hcm = boot["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    route = hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"][0]["route"]
    matcher = route["inline_cluster_specifier_plugin"]["extension"]["typed_config"]
    first_try = matcher["cluster_matcher"]["on_no_match"]["matcher"]["matcher_tree"]
    first_try["exact_match_map"]["map"]["primary"]["action"]["typed_config"]["cluster"] = \
        pair["name"]
    route["hedge_policy"] = {"hedge_on_per_try_timeout": True}
    out = tmp_path / "composite.envoy.yaml"
    out.write_text(yaml.safe_dump(boot))
    return gateway.start_bootstrap(out)


def test_the_filter_confirms_a_composite_hedge_by_host_metadata_but_counts_the_loser_a_timeout(
        gateway, tmp_path):
    # A hand-made composite on a chain without hedge_after: the upstream role runs on the
    # composite (Envoy reports the composite as the attempt's cluster) and confirms each attempt
    # by its host's metadata, so each provider gets its own key; the hedge's answer wins. What
    # hedge_after changes (test_hedging.py): the reset loser settles as a `timeout` against
    # primary's breaker here, and the access log's attempt list leaves it out.
    primary, secondary = gateway.mocks("primary", "secondary")
    primary.set_default(delay_ms=3000)
    secondary.set_default(delay_ms=200)
    gw = start_composite_gateway(gateway, tmp_path, "{attempt: 500ms}")
    started = time.monotonic()
    r = gw.chat("gpt-4o")
    took = time.monotonic() - started
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-attempts") == "2"
    assert took < 1.5, took
    lost, = primary.wait_settled(timeout=6.0)
    won, = secondary.wait_settled(timeout=6.0)
    assert lost["outcome"] == "client_gone" and won["outcome"] == "responded"
    assert values(lost, "authorization") == ["sk-primary"]
    assert values(won, "authorization") == ["sk-secondary"]
    line = harness.wait_until(
        lambda: next((x for x in gw.log().splitlines() if "attempts=2" in x), None),
        timeout=5.0, what="the access log line")
    assert "cluster=hedge_primary_secondary" in line, line
    assert "llm_failover=secondary:ok:" in line and "primary:" not in line, line
    samples = dict(
        (labels["provider"] + ":" + labels["outcome"], value) for labels, value in
        harness.prometheus_samples(gw.prometheus(), "llm_failover_attempts_total"))
    assert samples.get("primary:timeout") == 1, samples
