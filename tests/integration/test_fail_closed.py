"""Fail closed (docs/behaviour.md section 7): an attempt carries a provider's key only when Envoy really sends
it to that provider, under the configuration it was planned with; the caller's own gateway key
never leaves the gateway. Each scenario runs a real Envoy on a deliberately broken rendering of
envoy/demo.failover.yaml: the configs a hand merge, a control plane dropping a field, or two
roles updated one at a time produce."""
import re

import pytest
import harness
from harness import prometheus_samples

DEMO = "envoy/demo.failover.yaml"
KEYS = {"primary": "Bearer sk-primary", "secondary": "Bearer sk-secondary",
        "tertiary": "sk-tertiary"}


def credentials_seen(mock):
    """Every credential value a mock received, across all its requests."""
    seen = []
    for record in mock.requests():
        for name, value in record["headers"]:
            if name.lower() in ("authorization", "x-api-key", "api-key"):
                seen.append(value)
    return seen


def rendered(gateway, render, edit):
    """The demo config rendered for this scenario's ports, then edited (as text)."""
    path = render(DEMO, gateway.env)
    text = path.read_text()
    edited = edit(text)
    assert edited != text, "the edit changed nothing: the rendered config changed shape"
    path.write_text(edited)
    return path


@pytest.fixture
def demo(gateway):
    if gateway.external:
        pytest.skip("needs a broken rendering of its own")
    return gateway, *gateway.mocks("primary", "secondary", "tertiary")


@pytest.mark.skipif(harness.grouping_mode(),
                    reason="router mode's route; Envoy 1.36-1.38 refuse the field, and grouping "
                           "mode's equivalent is test_older_envoys (retry priority removed)")
def test_a_route_without_refresh_cluster_on_retry_sends_no_key_to_the_wrong_provider(demo, render):
    # What Istio 1.30's istiod (or a hand-merged config) makes of the route: every retry goes
    # to the first attempt's cluster. Today's module sent the secondary's key and model there.
    gateway, primary, secondary, tertiary = demo
    primary.set_default(status=503)
    config = rendered(gateway, render,
                      lambda t: re.sub(r"\n *refresh_cluster_on_retry: true", "", t))
    gw = gateway.start_bootstrap(config)

    r = gw.chat("gpt-4o")

    assert r.status == 502, r.text
    error = r.json()["error"]
    assert error["code"] == "misrouted_attempt"
    assert "refresh_cluster_on_retry" in error["message"]
    assert r.header("x-should-retry") == "false"
    # The refused attempt made no provider call: the provider tried last is the primary.
    assert (r.header("x-llm-provider"), r.header("x-llm-attempts")) == ("primary", "1")
    assert credentials_seen(primary) == [KEYS["primary"]]
    assert (secondary.request_count(), tertiary.request_count()) == (0, 0)
    # It counts toward no provider's health, and says why once in the log.
    attempts = prometheus_samples(gw.prometheus(), "llm_failover_attempts_total")
    assert {labels["provider"] for labels, _ in attempts} == {"primary"}
    assert gw.log().count("attempt refused") == 1


def drift(text):
    """Only the upstream role got the new chain order (ECDS updates land one at a time)."""
    return "\n".join(
        line.replace('"providers":["primary","secondary",',
                     '"providers":["secondary","primary",')
        if '"role":"upstream"' in line else line
        for line in text.split("\n"))


def test_roles_running_different_configurations_act_under_the_planned_one(demo, render):
    # The module before the fingerprint resolved the plan's indices against the upstream
    # role's chain: the primary got the secondary's key. Both roles share one VM here, so the
    # upstream role resolves the attempt under the configuration the plan was made under.
    gateway, primary, secondary, tertiary = demo
    gw = gateway.start_bootstrap(rendered(gateway, render, drift))

    r = gw.chat("gpt-4o")

    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "primary"
    assert credentials_seen(primary) == ["Bearer sk-primary"]
    assert (secondary.request_count(), tertiary.request_count()) == (0, 0)
    assert "config_mismatch" not in gw.log()


@pytest.mark.skipif(harness.runtime() == "native",
                    reason="the native module has no VMs (no vm_id to split the roles over): both "
                    "roles' configurations load in the one process and each worker parses the "
                    "ones its requests use, so the upstream role always finds the plan's "
                    "configuration (docs/internals.md, \"The native build\")")
def test_a_plan_from_a_configuration_the_vm_does_not_have_is_refused(demo, render):
    # The upstream role runs in another VM (another vm_id) with another configuration: the
    # plan's configuration is nowhere there, so the attempt is refused, fail closed.
    gateway, primary, secondary, tertiary = demo

    def other_vm(text):
        out, upstream = [], False
        for line in text.split("\n"):
            if "name: llm_failover_upstream" in line:
                upstream = True
            if upstream and "vm_id: llm_failover" in line:
                line = line.replace("vm_id: llm_failover", "vm_id: llm_failover_other")
                upstream = False
            out.append(line)
        return drift("\n".join(out))

    gw = gateway.start_bootstrap(rendered(gateway, render, other_vm))

    r = gw.chat("gpt-4o")

    assert r.status == 502, r.text
    assert r.json()["error"]["code"] == "config_mismatch"
    assert r.header("x-llm-attempts") == "0"
    assert r.header("x-llm-provider") is None
    assert (primary.request_count(), secondary.request_count(), tertiary.request_count()) == \
        (0, 0, 0)


def test_the_callers_gateway_key_is_removed_even_without_the_upstream_role(demo, render):
    # The provider clusters lost their upstream role (a mesh agent substituting an allow-all
    # filter for a module it could not fetch, or a hand merge that dropped it): the caller's
    # own key must still never reach a provider.
    gateway, primary, _, _ = demo
    without_upstream_role = re.compile(
        r"(\n( *)http_filters:\n)\2- name: llm_failover\n(?:\2 .*\n)+?(\2- name: "
        r"envoy\.filters\.http\.upstream_codec)")
    config = rendered(gateway, render, lambda t: without_upstream_role.sub(r"\1\3", t))
    assert "llm_failover_upstream" not in config.read_text()
    gw = gateway.start_bootstrap(config)

    r = gw.chat("gpt-4o", headers={"authorization": "Bearer caller-gateway-key",
                                   "x-api-key": "caller-key-2", "api-key": "caller-key-3"})

    assert r.status == 200, r.text
    assert credentials_seen(primary) == []
