"""Istio target, end to end without Kubernetes.

`llm-failover render FILE --target istio` writes the manifests; istio_shape.py builds the
gateway Envoy config istiod would build from the rendered ServiceEntry, DestinationRule,
Gateway and VirtualService (Istio's names, filter order, TLS origination, circuit breakers,
stats matcher), applies the rendered EnvoyFilter patches the way istiod applies them, serves
the two EXTENSION_CONFIG entries over extension config discovery (files instead of ADS) with
the module taken from the OCI image layout scripts/oci-image.sh builds (as istio-agent takes
it from a registry), and gives the proxy the environment the rendered Deployment patch asks
for from a Secret. The Envoy under test picks the Istio release that ships it (1.38: Istio
1.30, grouping mode; 1.39: Istio 1.31; 1.40: Istio 1.32) and the applier applies the patches as
that release's istiod does; real Envoy runs the result against TLS mock providers on 127.0.0.1.

Not proved here: istiod's and istio-agent's own code (the patch semantics are reproduced from
their sources), ADS delivery, the OCI pull, Kubernetes itself.
"""
from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import (HOST, REPO_ROOT, Gateway, HarnessError, cli_bin, external_mode, free_port,
                     wait_until)

if external_mode():
    pytest.skip("builds its own Istio-shaped gateway", allow_module_level=True)

import istio_shape as ist  # noqa: E402 (needs PyYAML: tests/integration/requirements.txt)
from test_tls_providers import TlsMock, _make_ca, _make_server_cert  # noqa: E402

# The Istio release whose Envoy runs here (istio.RELEASES in the CLI).
RELEASES = {(1, 38): "1.30", (1, 39): "1.31", (1, 40): "1.32"}
RELEASE = RELEASES.get(ist.envoy_minor())
if RELEASE is None:
    pytest.skip(f"no supported Istio release ships Envoy {ist.envoy_minor()}",
                allow_module_level=True)
GROUPING = RELEASE == "1.30"   # Istio 1.30 / Envoy 1.38: grouping clusters added by the EnvoyFilter

SOURCE = """
istio:
  module: oci://registry.test/llm-failover:test
  hosts: ["*"]
ca_file: ${ISTIO_TEST_CA}
max_request_body: 64KiB
providers:
  - name: alpha                          # OpenAI-like
    endpoint: alpha.provider.test:443
    credential: {header: authorization, prefix: "Bearer ", env: ALPHA_KEY}
  - name: beta                           # Azure-like
    endpoint: beta.provider.test:443
    path_prefix: /openai
    credential: {header: api-key, env: BETA_KEY}
  - name: gamma                          # Anthropic-like
    endpoint: gamma.provider.test:443
    credential: {header: x-api-key, env: GAMMA_KEY}
    headers: {anthropic-version: "2023-06-01"}
chains:
  - name: default
    providers: [alpha, beta, {provider: gamma, model: gamma-model}]
    fallback_on: [connection_error, timeout, rate_limited, server_error, overloaded]
breaker: {failures: 2, window: 30s, cooldown: 60s}
timeouts: {attempt: 10s}
"""
SECRET = {"ALPHA_KEY": "sk-alpha", "BETA_KEY": "sk-beta", "GAMMA_KEY": "sk-gamma"}
CALLER = {"authorization": "Bearer gateway-key", "x-api-key": "caller-key", "api-key": "caller-azure"}
HOSTS = {"alpha": "alpha.provider.test", "beta": "beta.provider.test", "gamma": "gamma.provider.test"}


def header(record, name):
    return [v for k, v in record["headers"] if k.lower() == name.lower()]



def render(d: Path, release: str, ca: str):
    (d / "gw.failover.yaml").write_text(SOURCE)
    r = subprocess.run([str(cli_bin()), "render", str(d / "gw.failover.yaml"), "--target", "istio",
                        "--istio-version", release, "--out", str(d / "out")],
                       capture_output=True, text=True, timeout=60,
                       env={"ISTIO_TEST_CA": ca, "PATH": "/usr/bin:/bin"})
    if r.returncode != 0:
        raise HarnessError(f"render --target istio failed:\n{r.stderr}")
    manifests = ist.load_manifests(d / "out/manifests.yaml")
    (patch,) = ist.load_manifests(d / "out/gateway-deployment-patch.yaml")
    return manifests, patch


@pytest.fixture(scope="module")
def rendered(tmp_path_factory, wildcard_cert):
    return render(tmp_path_factory.mktemp("istio"), RELEASE, wildcard_cert[0])


@pytest.fixture(scope="module")
def pulled_module(tmp_path_factory) -> Path:
    """The module as istio-agent would get it: from the OCI image layout scripts/oci-image.sh
    builds (compat variant), written to a local file."""
    d = tmp_path_factory.mktemp("oci")
    r = subprocess.run([str(REPO_ROOT / "scripts/oci-image.sh"), "--out", str(d / "layout"),
                        "--tag", "test", "--wasm", str(ist.module_path())],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise HarnessError(f"scripts/oci-image.sh failed:\n{r.stderr}")
    path = d / "plugin.wasm"
    path.write_bytes(ist.wasm_from_layout(d / "layout", "test"))
    return path


@pytest.fixture(scope="module")
def wildcard_cert(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl CLI is needed to make test certificates")
    d = tmp_path_factory.mktemp("istio-pki")
    ca = _make_ca(d, "ca")
    return str(ca[0]), _make_server_cert(d, "wildcard", "*.provider.test", ca, 2001)


class IstioGateway:
    def __init__(self, gateway: Gateway, mocks: dict, applier: ist.Applier, bootstrap: dict):
        self.gw, self.mocks, self.applier, self.bootstrap = gateway, mocks, applier, bootstrap


@pytest.fixture
def istio(rendered, wildcard_cert, pulled_module, envoy_factory, tmp_path, request):
    """Mocks alpha/beta/gamma + Envoy on the Istio-shaped, patched gateway config."""
    ca, cert = wildcard_cert
    mocks = {name: TlsMock(name, *cert) for name in HOSTS}
    request.addfinalizer(lambda: [m.stop() for m in mocks.values()])

    def start(envoy_filters=None, env=None, fetch_fails=None, withhold=frozenset(),
              render=None) -> IstioGateway:
        """`render`: other (manifests, patch) than the release's, applied by its istiod."""
        manifests, patch = render or rendered
        port = free_port()
        mock_at = {h: (HOST, mocks[n].port) for n, h in HOSTS.items()}
        bootstrap = ist.gateway_bootstrap(
            manifests, listen_port=port, admin_port=0, endpoints=mock_at, ca_file=ca,
            workdir=tmp_path, stats_inclusion_regexps=ist.annotation_inclusion_regexps(patch))
        applier = ist.Applier(bootstrap, tmp_path, pulled_module, fetch_fails=fetch_fails,
                              withhold=withhold, release=RELEASE, dns=mock_at)
        filters = ist.of_kind(manifests, "EnvoyFilter") if envoy_filters is None else envoy_filters
        unapplied = applier.apply(filters)
        assert unapplied == [], unapplied
        override = ist.bootstrap_override(manifests, patch)
        assert override, "the Deployment patch names the bootstrap ConfigMap"
        e = envoy_factory(json.dumps(bootstrap, indent=1),
                          env={**ist.container_env(patch, SECRET), **(env or {})},
                          extra_args=["--config-yaml", override])
        return IstioGateway(Gateway(f"http://{HOST}:{port}", e.admin_url, envoy=e), mocks,
                            applier, bootstrap)
    return start


# ------------------------------------------------------------------ what the patches did
def rendered_patches(rendered, apply_to: str) -> list[dict]:
    (ef,) = ist.of_kind(rendered[0], "EnvoyFilter")
    return [p for p in ef["spec"]["configPatches"] if p["applyTo"] == apply_to]


def test_patches_land_on_istios_names_and_the_retry_policy_is_the_failover_one(istio, rendered):
    ig = istio()
    b = ig.bootstrap
    (listener,) = b["static_resources"]["listeners"]
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    names = [f["name"] for f in hcm["http_filters"]]
    # Downstream role right before the router, after Istio's own filters.
    assert names == ["istio.metadata_exchange", "envoy.filters.http.fault", "envoy.filters.http.cors",
                     "istio.stats", "llm-failover-downstream", "envoy.filters.http.router"]
    (vhost,) = hcm["route_config"]["virtual_hosts"]
    (route,) = vhost["routes"]
    assert "direct_response" not in route          # the 503 placeholder was replaced
    rp = route["route"]["retry_policy"]
    # Exactly the rendered retry policy: nothing of Istio's default one (the placeholder route
    # had no route action, so none), on 1.30 with a plain MERGE.
    (route_patch,) = rendered_patches(rendered, "HTTP_ROUTE")
    assert route_patch["patch"]["operation"] == ("MERGE" if GROUPING else "MERGE_AND_REPLACE_LIST")
    assert rp == route_patch["patch"]["value"]["route"]["retry_policy"]
    assert rp["retry_on"] == "retriable-headers,connect-failure,reset,refused-stream"
    assert rp["retriable_headers"] == [
        {"name": "x-llm-failover-retry", "string_match": {"exact": "1"}}]
    assert vhost["include_request_attempt_count"] is True
    # Envoy's own local replies are the JSON errors (the connection manager merge landed).
    assert len(hcm["local_reply_config"]["mappers"]) == 3
    upstream_filters = ["llm-failover-upstream", "envoy.filters.http.upstream_codec"]
    if GROUPING:
        assert "refresh_cluster_on_retry" not in rp
        assert rp["retry_priority"]["name"] == "envoy.retry_priorities.previous_priorities"
        # Istio's own clusters are not in play (no ServiceEntry); the added ones are: one per
        # provider, its host naming its provider, and one grouping cluster per provider order.
        added = [c for c in b["static_resources"]["clusters"] if c["name"].startswith("llm")]
        providers = [c for c in added if c["name"].startswith("llm-failover-")]
        assert [c["name"] for c in providers] == [f"llm-failover-{n}" for n in HOSTS]
        for c, (name, host) in zip(providers, HOSTS.items()):
            (h,) = c["load_assignment"]["endpoints"][0]["lb_endpoints"]
            assert h["metadata"]["filter_metadata"]["llm_failover"]["provider"] == name
            assert c["transport_socket"]["typed_config"]["sni"] == host
        groups = [c for c in added if c["name"].startswith("llm_failover~")]
        assert len(groups) == 4                       # 3 providers, 3 attempts
        clusters = providers + groups
    else:
        assert rp["refresh_cluster_on_retry"] is True
        clusters = b["static_resources"]["clusters"][:3]
        for c in clusters:
            assert c["name"].startswith("outbound|443||")
            assert "explicit_http_config" not in c["typed_extension_protocol_options"][ist.HPO_KEY]
            assert c["transport_socket"]["typed_config"]["sni"] == c["name"].split("||")[1]
    for c in clusters:
        hpo = c["typed_extension_protocol_options"][ist.HPO_KEY]
        assert [f["name"] for f in hpo["http_filters"]] == upstream_filters
        assert hpo["http_filters"][0]["config_discovery"]["type_urls"] == [ist.WASM_TYPE]
    # Envoy accepted it all: both roles loaded over ECDS.
    dump = json.loads(ig.gw.envoy.admin("/config_dump"))
    ecds = [c for c in dump["configs"] if c["@type"].endswith("EcdsConfigDump")]
    loaded = {f["ecds_filter"]["name"] for c in ecds for f in c.get("ecds_filters", [])}
    assert loaded == {"llm-failover-downstream", "llm-failover-upstream"}, ecds


def test_without_the_envoyfilter_the_gateway_answers_503_and_reaches_no_provider(istio):
    ig = istio(envoy_filters=[])
    r = ig.gw.chat("gpt-4o", headers=CALLER)
    assert r.status == 503
    assert r.json()["error"]["code"] == "gateway_not_configured"
    assert all(m.request_count() == 0 for m in ig.mocks.values())


def scoped_labels_off(prom: str) -> str:
    """On Envoy 1.38 the filter's metrics live in a cluster's scope: Istio's cluster_name tag
    and the rendered llm_failover_scope tag label them too. Those two are taken off (and
    required there: a cluster-scoped name that lost them would be mislabelled)."""
    if not GROUPING:
        return prom
    out = []
    for line in prom.splitlines():
        if line.startswith("llm_failover_") and "{" in line:
            name, rest = line.split("{", 1)
            labels, value = rest.rsplit("}", 1)
            pairs = re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels)
            keep = [(k, v) for k, v in pairs if k not in ("llm_failover_scope", "cluster_name")]
            assert ("llm_failover_scope", "") in pairs and len(keep) == len(pairs) - 2, \
                f"a cluster-scoped metric without its two scope labels: {line}"
            assert "." not in name and ";" not in name, line
            line = name + "{" + ",".join(f'{k}="{v}"' for k, v in keep) + "}" + value
        out.append(line)
    return "\n".join(out)


# ------------------------------------------------------------------ core scenarios
def test_failover_to_the_next_provider_with_its_own_key_path_and_sni(istio):
    ig = istio()
    alpha, beta = ig.mocks["alpha"], ig.mocks["beta"]
    alpha.set_default(status=503)
    r = ig.gw.chat("gpt-4o", headers=CALLER)
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "beta"
    assert r.header("x-llm-attempts") == "2"
    assert r.header("x-llm-fallback-reason") == "overloaded"
    assert r.json()["choices"][0]["message"]["content"] == "Hello from beta (model gpt-4o)"
    (a,) = alpha.requests()
    (b,) = beta.requests()
    assert a["tls"]["sni"] == HOSTS["alpha"] and b["tls"]["sni"] == HOSTS["beta"]
    assert header(a, "host") == [HOSTS["alpha"]] and header(b, "host") == [HOSTS["beta"]]
    assert b["path"] == "/openai/v1/chat/completions"
    assert b["body_sha256"] == a["body_sha256"]
    assert ig.mocks["gamma"].request_count() == 0


def test_connection_errors_fall_over_to_the_third_provider_with_its_model(istio):
    ig = istio()
    ig.mocks["alpha"].set_default(action="reset")
    ig.mocks["beta"].set_default(status=500)
    r = ig.gw.chat("gpt-4o")
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "gamma"
    assert r.header("x-llm-attempts") == "3"
    assert json.loads(ig.mocks["gamma"].last_request()["body"])["model"] == "gamma-model"


def test_streaming_fallback_streams_the_next_providers_events_as_they_come(istio):
    ig = istio()
    ig.mocks["alpha"].set_default(status=503)
    ig.mocks["beta"].set_default(chunks=4, chunk_interval_ms=250)
    r = ig.gw.chat("gpt-4o", stream=True)
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "beta"
    assert r.sse_content() == "beta:0 beta:1 beta:2 beta:3 "
    events = r.sse_events()
    assert events[-1][1] == "[DONE]"
    times = [t for t, _ in events[:4]]
    assert times[-1] - times[0] > 0.6, times       # streamed, not buffered to the end
    # The client can read [DONE] before the mock records its last write: wait for it.
    assert ig.mocks["beta"].wait_settled()[-1]["outcome"] == "streamed"


def test_breaker_opens_across_roles_then_skips_and_metrics_carry_labels(istio):
    ig = istio()
    alpha = ig.mocks["alpha"]
    alpha.set_default(status=500)
    for _ in range(2):   # breaker failures: 2
        assert ig.gw.chat("gpt-4o").header("x-llm-provider") == "beta"
    assert alpha.request_count() == 2
    r = ig.gw.chat("gpt-4o")
    assert r.status == 200
    assert r.header("x-llm-provider") == "beta"
    assert r.header("x-llm-attempts") == "1"
    assert r.header("x-llm-fallback-reason") == "breaker_open"
    assert alpha.request_count() == 2       # skipped: the upstream role's reports reached the
    #                                         downstream role's plan (one VM, one health state)
    prom = scoped_labels_off(ig.gw.prometheus_raw())
    assert 'llm_failover_skipped_total{provider="alpha",reason="breaker_open"} 1' in prom, prom
    assert 'llm_failover_breaker_state{provider="alpha"} 1' in prom
    assert 'llm_failover_fallbacks_total{from="alpha",to="beta"} 2' in prom
    # The upstream role's own counter, labelled, past Istio's default stats matcher.
    assert 'llm_failover_attempts_total{provider="alpha",outcome="server_error"} 2' in prom


def test_credential_isolation_each_provider_gets_only_its_own_key(istio):
    ig = istio()
    ig.mocks["alpha"].set_default(status=500)
    ig.mocks["beta"].set_default(status=429)
    r = ig.gw.chat("gpt-4o", headers={**CALLER, "cookie": "session=1"})
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "gamma"
    a = ig.mocks["alpha"].last_request()
    b = ig.mocks["beta"].last_request()
    g = ig.mocks["gamma"].last_request()
    assert header(a, "authorization") == ["Bearer sk-alpha"]
    assert not header(a, "api-key") and not header(a, "x-api-key")
    assert header(b, "api-key") == ["sk-beta"]
    assert not header(b, "authorization") and not header(b, "x-api-key")
    assert header(g, "x-api-key") == ["sk-gamma"]
    assert not header(g, "authorization") and not header(g, "api-key")
    assert header(g, "anthropic-version") == ["2023-06-01"]
    assert not header(a, "anthropic-version") and not header(b, "anthropic-version")
    for rec in (a, b, g):
        for v in (v for _, v in rec["headers"]):
            assert "gateway-key" not in v and "caller" not in v
        assert not header(rec, "cookie")          # not on the provider-bound allow-list


def test_a_credential_missing_from_the_environment_refuses_the_config_fail_closed(istio):
    """The Secret lacks a key: the VM refuses the plugin config, no provider is contacted."""
    ig = istio(env={"BETA_KEY": ""})
    r = ig.gw.chat("gpt-4o", headers=CALLER)
    assert r.status >= 500
    assert all(m.request_count() == 0 for m in ig.mocks.values())


@pytest.mark.parametrize("how", ["policy", "allow"])
def test_a_failed_module_pull_never_runs_an_rbac_filter_in_the_modules_place(istio, how):
    """istio-agent replaces a module it cannot fetch with an RBAC filter (deny-all for a config
    that fails closed, allow-all for one that fails open). The rendered references accept the
    Wasm type only: Envoy rejects the substitute and nothing reaches a provider."""
    ig = istio(fetch_fails={"llm-failover-upstream": how, "llm-failover-downstream": how})
    r = ig.gw.chat("gpt-4o", headers=CALLER)
    assert r.status == 500
    assert all(m.request_count() == 0 for m in ig.mocks.values())
    assert "has type URL envoy.extensions.filters.http.rbac.v3.RBAC but expect " \
           "envoy.extensions.filters.http.wasm.v3.Wasm" in ig.gw.envoy.log()


def test_until_the_upstream_role_arrives_no_attempt_leaves_then_traffic_flows(istio):
    """The clusters' upstream filter config comes by its own discovery stream: while it has not
    arrived, an attempt is answered 500 (NFCF) by Envoy and no provider is contacted; once it
    arrives, requests fail over as usual, with no restart."""
    ig = istio(withhold={"llm-failover-upstream"})
    r = ig.gw.chat("gpt-4o", headers=CALLER)
    assert r.status == 500
    assert all(m.request_count() == 0 for m in ig.mocks.values())
    ig.mocks["alpha"].set_default(status=503)
    ig.applier.deliver("llm-failover-upstream")
    ok = wait_until(lambda: ig.gw.chat("gpt-4o", headers=CALLER).status == 200, 10,
                    "the upstream role's config to arrive", interval=0.2)
    assert ok
    r = ig.gw.chat("gpt-4o", headers=CALLER)
    assert r.status == 200 and r.header("x-llm-provider") == "beta"
    assert header(ig.mocks["beta"].last_request(), "api-key") == ["sk-beta"]


def test_control_a_reference_that_accepts_rbac_lets_the_allow_all_filter_run(istio, rendered):
    """The same pull failure of the upstream role under references that also accept RBAC (as
    WasmPlugin's do): the allow-all filter runs in the module's place and the attempt reaches
    the provider without the upstream role (no rewrite, no key, no health report, no check of
    its destination)."""
    manifests, _ = rendered
    (ef,) = copy.deepcopy(ist.of_kind(manifests, "EnvoyFilter"))
    for p in ef["spec"]["configPatches"]:
        ist_refs = json.dumps(p["patch"]["value"])
        if "config_discovery" in ist_refs:
            p["patch"]["value"] = json.loads(ist_refs.replace(
                f'"type_urls": ["{ist.WASM_TYPE}"]', f'"type_urls": ["{ist.WASM_TYPE}", "{ist.RBAC_TYPE}"]'))
    if GROUPING:
        # Envoy 1.38 has no RBAC upstream filter: it refuses such a reference outright.
        with pytest.raises(HarnessError, match="no factory found for a required type URL "
                                               "envoy.extensions.filters.http.rbac.v3.RBAC"):
            istio(envoy_filters=[ef], fetch_fails={"llm-failover-upstream": "allow"})
        return
    ig = istio(envoy_filters=[ef], fetch_fails={"llm-failover-upstream": "allow"})
    r = ig.gw.chat("gpt-4o", headers=CALLER)
    alpha = ig.mocks["alpha"].last_request()
    assert r.status == 200 and alpha is not None
    # The upstream role did not run: no :authority rewrite, no provider key. The caller's own
    # key is gone only because the downstream role removes it before routing (behaviour.md 7).
    assert header(alpha, "host") != [HOSTS["alpha"]]
    assert not header(alpha, "authorization") and not header(alpha, "x-api-key")


def retries_stay_on_alpha_and_are_refused(ig: IstioGateway) -> None:
    """Router mode without refresh_cluster_on_retry: the retry meant for beta goes to alpha's
    cluster again, whose upstream role refuses it (502); no provider gets another's key."""
    alpha = ig.mocks["alpha"]
    alpha.set_default(status=503)
    r = ig.gw.chat("gpt-4o", headers=CALLER)
    assert r.status == 502, r.text
    assert ig.mocks["beta"].request_count() == 0 and ig.mocks["gamma"].request_count() == 0
    for rec in alpha.requests():
        assert header(rec, "authorization") == ["Bearer sk-alpha"]
        assert not header(rec, "api-key") and not header(rec, "x-api-key")


@pytest.mark.skipif(GROUPING, reason="router mode's route patch; Istio 1.30 has its own test below")
def test_a_control_plane_that_drops_refresh_cluster_on_retry_fails_closed(istio, rendered):
    """What istiod 1.30 would do with the route patch (its go-control-plane lacks the field): the
    retry stays on the first provider's cluster, whose upstream role sees the attempt is not
    going where the plan says and refuses it; no provider gets another provider's key."""
    manifests, _ = rendered
    (ef,) = copy.deepcopy(ist.of_kind(manifests, "EnvoyFilter"))
    for p in ef["spec"]["configPatches"]:
        if p["applyTo"] == "HTTP_ROUTE":
            del p["patch"]["value"]["route"]["retry_policy"]["refresh_cluster_on_retry"]
    ig = istio(envoy_filters=[ef])
    retries_stay_on_alpha_and_are_refused(ig)


# ------------------------------------------------------------------ what operators read
def test_get_slash_answers_serving_on_istios_route_without_a_provider(istio):
    """The liveness answer (behaviour.md 10) on the route Istio builds from the VirtualService
    (`llm-failover`): the filter knows it as the gateway's own."""
    ig = istio()
    r = ig.gw.request("GET", "/")
    assert (r.status, r.body) == (200, b"serving\n"), r.text
    assert all(m.request_count() == 0 for m in ig.mocks.values())


# ------------------------------------------------------------------ Envoy's own local replies
def test_envoys_own_replies_are_json_errors_a_body_over_the_limit(istio):
    ig = istio()
    r = ig.gw.post("/v1/chat/completions", body=json.dumps({"model": "gpt-4o", "pad": "y" * 100_000}),
                   headers={"content-type": "application/json", **CALLER})
    assert r.status == 413, r.text
    assert r.header("x-should-retry") == "false"
    assert r.json()["error"]["code"] == "body_too_large"
    assert "65536 bytes" in r.json()["error"]["message"]
    assert all(m.request_count() == 0 for m in ig.mocks.values())


def test_envoys_own_replies_are_json_errors_no_provider_reachable(istio):
    ig = istio()
    for m in ig.mocks.values():
        m.set_default(action="reset")
    r = ig.gw.chat("gpt-4o", headers=CALLER)
    assert r.status == 503, r.text
    assert r.header("content-type").startswith("application/json")
    assert r.header("x-should-retry") == "true"
    assert r.header("x-llm-attempts") == "3"
    assert r.json()["error"]["code"] == "upstream_unreachable"


# ------------------------------------------------------------------ Istio 1.30 (Envoy 1.38)
@pytest.fixture(scope="module")
def router_render(tmp_path_factory, wildcard_cert):
    """The router-mode render (for Istio 1.31), to apply with Istio 1.30's istiod."""
    return render(tmp_path_factory.mktemp("istio-router"), "1.31", wildcard_cert[0])


@pytest.mark.skipif(not GROUPING, reason="Istio 1.30's istiod on Envoy 1.38")
def test_istio_1_30_refuses_the_router_mode_route_patch_and_nothing_is_sent(istio, router_render):
    """Router mode's route patch replaces lists (MERGE_AND_REPLACE_LIST), an operation Istio
    1.30 does not have: the route stays the 503 placeholder and no provider is contacted."""
    with pytest.raises(AssertionError, match="HTTP_ROUTE MERGE_AND_REPLACE_LIST"):
        istio(render=router_render)
    manifests, _ = router_render
    (ef,) = copy.deepcopy(ist.of_kind(manifests, "EnvoyFilter"))
    ef["spec"]["configPatches"] = [p for p in ef["spec"]["configPatches"]
                                   if p["patch"]["operation"] != "MERGE_AND_REPLACE_LIST"]
    ig = istio(render=router_render, envoy_filters=[ef])
    r = ig.gw.chat("gpt-4o", headers=CALLER)
    assert r.status == 503 and r.json()["error"]["code"] == "gateway_not_configured"
    assert all(m.request_count() == 0 for m in ig.mocks.values())


@pytest.mark.skipif(not GROUPING, reason="Istio 1.30's istiod on Envoy 1.38")
def test_istio_1_30_drops_refresh_cluster_on_retry_so_router_mode_would_fail_closed(
        istio, router_render):
    """Router mode with its route patch made a MERGE (what 1.30 accepts): istiod 1.30 drops
    refresh_cluster_on_retry, so every retry stays on the first provider's cluster; its upstream
    role refuses the attempt meant for the next provider (502) and no key goes astray. This is
    what the grouping-mode render exists for; the scenarios above pass with it."""
    manifests, _ = router_render
    (ef,) = copy.deepcopy(ist.of_kind(manifests, "EnvoyFilter"))
    for p in ef["spec"]["configPatches"]:
        if p["patch"]["operation"] == "MERGE_AND_REPLACE_LIST":
            p["patch"]["operation"] = "MERGE"
    ig = istio(render=router_render, envoy_filters=[ef])
    (route,) = ig.bootstrap["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0][
        "typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
    assert "refresh_cluster_on_retry" not in route["route"]["retry_policy"]
    retries_stay_on_alpha_and_are_refused(ig)


@pytest.mark.skipif(not GROUPING, reason="grouping clusters (Istio 1.30)")
def test_a_spill_to_the_next_providers_host_is_refused_by_the_hosts_metadata(istio, rendered):
    """An aggregate spills to its next sub-cluster when one has no healthy host (docs/older-envoys.md), so
    attempt 1 would reach beta carrying alpha's key. The added clusters' hosts name their
    provider; the upstream role compares that with the plan and refuses: nothing is sent."""
    manifests, _ = rendered
    (ef,) = copy.deepcopy(ist.of_kind(manifests, "EnvoyFilter"))
    (alpha_cluster,) = [p["patch"]["value"] for p in ef["spec"]["configPatches"]
                        if p["applyTo"] == "CLUSTER" and p["patch"]["value"]["name"] == "llm-failover-alpha"]
    alpha_cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["health_status"] = "UNHEALTHY"
    ig = istio(envoy_filters=[ef])
    r = ig.gw.chat("gpt-4o", headers=CALLER)
    assert r.status == 502, r.text
    assert "alpha" in r.text and "beta" in r.text, r.text
    assert all(m.request_count() == 0 for m in ig.mocks.values())


# ------------------------------------------------------------------ the applier itself
def test_applier_merge_appends_lists_and_merge_and_replace_list_replaces_them():
    base = {"route": {"retry_policy": {"retry_on": "5xx", "retriable_status_codes": [503],
                                       "retry_host_predicate": [{"name": "previous_hosts"}]},
                      "cluster": "outbound|443||x"}}
    patch = {"route": {"retry_policy": {"retry_on": "reset", "retry_host_predicate": [{"name": "p"}]},
                       "inline_cluster_specifier_plugin": {"extension": {}}}}
    merged = copy.deepcopy(base)
    ist.proto_merge(merged, patch, replace_lists=False)
    assert merged["route"]["retry_policy"]["retry_host_predicate"] == [{"name": "previous_hosts"}, {"name": "p"}]
    assert "cluster" not in merged["route"]           # oneof sibling cleared
    replaced = copy.deepcopy(base)
    ist.proto_merge(replaced, patch, replace_lists=True)
    assert replaced["route"]["retry_policy"]["retry_host_predicate"] == [{"name": "p"}]
    assert replaced["route"]["retry_policy"]["retriable_status_codes"] == [503]  # not in the patch
    assert replaced["route"]["retry_policy"]["retry_on"] == "reset"


def test_applier_reports_a_patch_that_matches_nothing(rendered, tmp_path):
    manifests, patch = rendered
    (ef,) = ist.of_kind(manifests, "EnvoyFilter")
    ef = copy.deepcopy(ef)
    for p in ef["spec"]["configPatches"]:
        if p["applyTo"] == "VIRTUAL_HOST":
            p["match"]["routeConfiguration"]["vhost"]["name"] = "*:8080"   # a wrong name
    bootstrap = ist.gateway_bootstrap(
        manifests, listen_port=1, admin_port=0,
        endpoints={h: (HOST, 1) for h in HOSTS.values()}, ca_file="/dev/null", workdir=tmp_path,
        stats_inclusion_regexps=[])
    unapplied = ist.Applier(bootstrap, tmp_path, ist.module_path()).apply([ef])
    assert unapplied == [f"configPatches[{i}] VIRTUAL_HOST MERGE" for i, p in
                         enumerate(ef["spec"]["configPatches"]) if p["applyTo"] == "VIRTUAL_HOST"]


def test_both_roles_share_one_vm_fail_closed_and_carry_no_key(rendered):
    """Both extension configs name the module URL, one vm_id, fail closed, and only the names
    of the credential variables."""
    manifests, _ = rendered
    (ef,) = ist.of_kind(manifests, "EnvoyFilter")
    ecs = [p["patch"]["value"] for p in ef["spec"]["configPatches"] if p["applyTo"] == "EXTENSION_CONFIG"]
    assert [e["name"] for e in ecs] == ["llm-failover-downstream", "llm-failover-upstream"]
    for e in ecs:
        cfg = e["typed_config"]["config"]
        assert cfg["vm_config"]["vm_id"] == "llm_failover"
        assert cfg["vm_config"]["code"]["remote"]["http_uri"]["uri"] == "oci://registry.test/llm-failover:test"
        assert cfg["failure_policy"] == "FAIL_CLOSED"
        assert cfg["vm_config"]["environment_variables"]["host_env_keys"] == list(SECRET)
        assert "sk-" not in json.dumps(e)


