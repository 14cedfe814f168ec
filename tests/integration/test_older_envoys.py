"""What only grouping mode (Envoy 1.36-1.38, docs/older-envoys.md) has: attempts carried by an
aggregate cluster per provider order, the upstream role confirming each attempt's provider from
the chosen host's metadata, and metrics in a cluster's stats scope. Every other scenario of the
suite runs unchanged on those versions (ENVOY_VERSION=1.36 ./scripts/test.sh); these run there
only, and are skipped with the reason on Envoy 1.39 and later."""
import re
import subprocess

import pytest

import harness

DEMO = "envoy/demo.failover.yaml"

pytestmark = [
    pytest.mark.skipif(not harness.grouping_mode(),
                       reason="grouping clusters are rendered for Envoy 1.36-1.38 only "
                              "(ENVOY_VERSION=1.36 or 1.38)"),
    pytest.mark.skipif(harness.external_mode(), reason="patches the rendered bootstrap"),
]


def header(record, name):
    return [v for k, v in record["headers"] if k.lower() == name.lower()]


@pytest.fixture
def demo(gateway):
    primary, secondary, tertiary = gateway.mocks("primary", "secondary", "tertiary")
    return gateway, primary, secondary, tertiary


def start_patched(gateway, tmp_path, patch):
    """Renders the demo for the Envoy under test, applies `patch` to the bootstrap text, starts
    Envoy on it."""
    path = harness.render_config(DEMO, gateway.env, out_dir=tmp_path / "rendered")
    text = patch(path.read_text())
    return gateway.start_bootstrap(text, extra_args=["--file-flush-interval-msec", "50"])


def test_each_order_has_its_own_grouping_cluster_and_single_attempts_go_direct(demo, tmp_path):
    gateway, primary, secondary, tertiary = demo
    primary.set_default(status=503)
    gw = gateway.start(DEMO, extra_args=["--file-flush-interval-msec", "50"])
    r = gw.chat("gpt-4o", headers={"x-request-id": "grp-failover"})
    assert r.status == 200 and r.header("x-llm-provider") == "secondary"
    r = gw.chat("gpt-4o", headers={"x-request-id": "grp-single", "x-llm-fallback": "off"})
    assert r.status == 503 and r.header("x-llm-provider") == "primary"

    def line(rid):
        return harness.wait_until(
            lambda: next((l for l in gw.log().splitlines() if f"request_id={rid}" in l), None),
            5, f"access log line of {rid}")
    assert " attempts=2 cluster=llm_failover~primary~secondary~tertiary " in line("grp-failover")
    assert " attempts=1 cluster=primary " in line("grp-single")
    # Each attempt carried its own provider's key and model, never another's.
    assert header(secondary.requests()[-1], "authorization") == ["Bearer sk-secondary"]
    assert [header(q, "authorization") for q in primary.requests()] == [["Bearer sk-primary"]] * 2


def test_a_spill_to_the_next_sub_cluster_is_refused_not_sent_with_the_wrong_key(demo, tmp_path):
    """The trap docs/older-envoys.md names: an aggregate sends an attempt to its next sub-cluster when one
    has no healthy host. The upstream role reads the chosen host's provider from its metadata
    and refuses the attempt (docs/behaviour.md section 7, fail closed)."""
    gateway, primary, secondary, tertiary = demo
    marker = ("          metadata:\n            filter_metadata:\n              llm_failover:\n"
              "                provider: primary\n")

    def primary_unhealthy(text):
        assert marker in text, "the rendered primary endpoint carries its provider"
        return text.replace(marker, marker + "          health_status: UNHEALTHY\n", 1)

    gw = start_patched(gateway, tmp_path, primary_unhealthy)
    r = gw.chat("gpt-4o")
    assert r.status == 502, r.text
    assert "primary" in r.text and "secondary" in r.text, r.text
    assert secondary.request_count() == 0, "the attempt was sent with primary's key"
    assert primary.request_count() == 0 and tertiary.request_count() == 0


def test_metrics_keep_their_names_with_the_scope_labels(demo):
    gateway, primary, _, _ = demo
    primary.set_default(status=500)
    gw = gateway.start(DEMO, env={"BREAKER_FAILURES": "1000"})
    assert gw.chat("gpt-4o").status == 200
    raw = [l for l in gw.prometheus_raw().splitlines() if l.startswith("llm_failover_")]
    assert raw, "no llm_failover_* series"
    pat = re.compile(r'^llm_failover_[a-z_]+\{llm_failover_scope="",.*,envoy_cluster_name="[^"]+"\} ')
    assert all(pat.match(l) for l in raw), raw
    # The same values as router mode once the two scope labels are set aside.
    assert ('llm_failover_attempts_total{provider="primary",outcome="server_error"} 1'
            in gw.prometheus().splitlines())
    # Admin's /stats shows where they live.
    stats = gw.stats("wasmcustom")
    assert any(re.match(r"^cluster\.[^.]+\.wasmcustom\.llm_failover_attempts_total\.", k)
               for k in stats), list(stats)[:5]


def test_the_renderer_reports_the_groups_it_wrote(gateway, tmp_path):
    major, minor = harness.envoy_version()
    r = subprocess.run(
        [str(harness.cli_bin()), "validate", "--no-env", "--envoy-version", f"{major}.{minor}",
         str(harness.REPO_ROOT / DEMO)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # The demo's chain of three: three orders of two providers and one of three.
    assert f"Envoy {major}.{minor}: grouping mode, 4 grouping clusters" in r.stdout, r.stdout


def test_a_route_without_its_retry_priority_sends_no_key_to_the_wrong_provider(demo, tmp_path):
    """Without `previous_priorities` (a hand-merged config) every retry stays on the aggregate's
    first sub-cluster: the retry, planned for the secondary, reaches the primary's host and is
    refused before the secondary's key is attached."""
    gateway, primary, secondary, tertiary = demo
    primary.set_default(status=503)

    def no_retry_priority(text):
        out = re.sub(r"\n( *)retry_priority:\n(\1 .*\n)+", "\n", text)
        assert "previous_priorities" not in out and out != text
        return out

    gw = start_patched(gateway, tmp_path, no_retry_priority)
    r = gw.chat("gpt-4o")
    assert r.status == 502, r.text
    assert r.json()["error"]["code"] == "misrouted_attempt"
    assert [header(q, "authorization") for q in primary.requests()] == [["Bearer sk-primary"]]
    assert secondary.request_count() == 0 and tertiary.request_count() == 0
