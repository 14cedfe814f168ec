"""Observability through a real Envoy: the docs/behaviour.md section 8 metrics read from the admin
endpoint's Prometheus text with exact values, the status endpoint (docs/behaviour.md section 10), the
per-request attempt record in the access log, and log levels.

Scenarios need a fresh gateway per test (counters start at zero) and the demo config's knobs,
so they do not run against an external gateway."""
import json
import re
import threading
import time

import pytest

import harness
from harness import http_request, prometheus_samples, runtime, wait_until

DEMO = "envoy/demo.failover.yaml"
STATUS = "/llm-failover/status"


def status_endpoint(gateway, method, path, **kw):
    """The status endpoint, on its own loopback listener (STATUS_PORT)."""
    env = getattr(gateway, "gateway", gateway).env
    return http_request(f"http://127.0.0.1:{env['STATUS_PORT']}", method, path, **kw)

pytestmark = pytest.mark.skipif(
    harness.external_mode(), reason="needs a fresh gateway with scripted knobs")


def metric(gw, name):
    """{labels as a sorted tuple of (key, value): value} for one metric."""
    return {tuple(sorted(labels.items())): value
            for labels, value in prometheus_samples(gw.prometheus(), name)}


def labels(**kw):
    return tuple(sorted(kw.items()))


def attempts(gw):
    return {(dict(k)["provider"], dict(k)["outcome"]): v
            for k, v in metric(gw, "llm_failover_attempts_total").items()}


def fallbacks(gw):
    return {(dict(k)["from"], dict(k)["to"]): v
            for k, v in metric(gw, "llm_failover_fallbacks_total").items()}


def skipped(gw):
    return {(dict(k)["provider"], dict(k)["reason"]): v
            for k, v in metric(gw, "llm_failover_skipped_total").items()}


def exhausted(gw):
    return {dict(k)["chain"]: v for k, v in metric(gw, "llm_failover_exhausted_total").items()}


def breaker(gw):
    return {dict(k)["provider"]: v for k, v in metric(gw, "llm_failover_breaker_state").items()}


def access_line(gw, request_id, timeout=5.0):
    """The access log line of one request (matched by its x-request-id)."""
    def find():
        for line in gw.log().splitlines():
            if f"request_id={request_id}" in line:
                return line
        return None
    return wait_until(find, timeout, f"access log line of {request_id}")


def walk(line):
    """The llm_failover=... field of an access log line, durations replaced by 'N'."""
    m = re.search(r" llm_failover=(\S+)", line)
    assert m, line
    return re.sub(r":\d+ms", ":Nms", m.group(1))


class Setup:
    """The gateway fixture, starting Envoy with access logs flushed every 50 ms (Envoy's default
    is 10 s) so scenarios can read their requests' lines at once."""

    def __init__(self, gateway):
        self.gateway = gateway

    def start(self, source, env=None, **envoy_kw):
        return self.gateway.start(source, env=env,
                                  extra_args=["--file-flush-interval-msec", "50"], **envoy_kw)


@pytest.fixture
def demo(gateway):
    primary, secondary, tertiary = gateway.mocks("primary", "secondary", "tertiary")
    return Setup(gateway), primary, secondary, tertiary


# ----------------------------------------------------------------------------------- metrics

def test_prometheus_prints_the_fixed_names_with_labels(demo):
    gateway, primary, _, _ = demo
    primary.set_default(status=500)
    gw = gateway.start(DEMO, env={"BREAKER_FAILURES": "1000"})
    assert gw.chat("gpt-4o").status == 200
    text = gw.prometheus()
    lines = [l for l in text.splitlines() if "llm_failover_" in l and not l.startswith("envoy_")]
    assert 'llm_failover_attempts_total{provider="primary",outcome="server_error"} 1' in lines
    assert 'llm_failover_attempts_total{provider="secondary",outcome="ok"} 1' in lines
    assert 'llm_failover_fallbacks_total{from="primary",to="secondary"} 1' in lines
    assert "# TYPE llm_failover_attempts_total counter" in lines
    assert "# TYPE llm_failover_breaker_state gauge" in lines
    for p in ("primary", "secondary", "tertiary"):
        assert f'llm_failover_breaker_state{{provider="{p}"}} 0' in lines
    # Nothing of ours leaks out unlabelled or under Envoy's prefix.
    assert not [l for l in lines if "provider=" in l.split("{")[0] or "wasmcustom" in l]


def test_attempts_fallbacks_and_exhausted_chains_are_counted_exactly(demo):
    gateway, primary, secondary, tertiary = demo
    primary.set_default(status=500)
    secondary.set_default(status=503)
    gw = gateway.start(DEMO, env={"BREAKER_FAILURES": "1000"})
    for _ in range(4):  # on both workers: Envoy adds every worker's counts up
        r = gw.chat("gpt-4o")
        assert r.status == 200 and r.header("x-llm-provider") == "tertiary"
    assert exhausted(gw) == {}
    tertiary.set_default(status=429)
    assert gw.chat("gpt-4o").status == 429
    tertiary.down()
    assert gw.chat("gpt-4o").status == 503  # Envoy's own reply after a refused connection

    assert attempts(gw) == {
        ("primary", "server_error"): 6,
        ("secondary", "overloaded"): 6,
        ("tertiary", "ok"): 4,
        ("tertiary", "rate_limited"): 1,
        ("tertiary", "connection_error"): 1,
    }
    assert fallbacks(gw) == {("primary", "secondary"): 6, ("secondary", "tertiary"): 6}
    assert exhausted(gw) == {"default": 2}
    assert skipped(gw) == {}


def test_max_attempts_caps_the_walk_and_the_last_failure_exhausts_the_chain(demo):
    gateway, primary, secondary, tertiary = demo
    primary.set_default(status=502)
    secondary.set_default(status=502)
    gw = gateway.start(DEMO, env={"MAX_ATTEMPTS": "2", "FALLBACKS_EXHAUSTED": "true"})
    r = gw.chat("gpt-4o")
    assert r.status == 503 and r.json()["error"]["code"] == "fallbacks_exhausted"
    assert attempts(gw) == {("primary", "server_error"): 1, ("secondary", "server_error"): 1}
    assert fallbacks(gw) == {("primary", "secondary"): 1}
    assert exhausted(gw) == {"default": 1}
    assert tertiary.request_count() == 0


def test_timeouts_and_refused_connections_exhaust_the_chain_too(demo):
    """No response means no marker header: Envoy answers itself, and the filter still counts the
    chain as exhausted (and answers fallbacks_exhausted when asked to)."""
    gateway, primary, secondary, _ = demo
    primary.down()
    secondary.set_default(action="hang")
    gw = gateway.start(DEMO, env={"MAX_ATTEMPTS": "2", "ATTEMPT_TIMEOUT": "1s",
                                  "FALLBACKS_EXHAUSTED": "true"})
    r = gw.chat("gpt-4o", timeout=20)
    assert r.status == 503, r.text
    assert r.json()["error"]["code"] == "fallbacks_exhausted"
    assert r.header("x-llm-attempts") == "2"
    assert attempts(gw) == {("primary", "connection_error"): 1, ("secondary", "timeout"): 1}
    assert fallbacks(gw) == {("primary", "secondary"): 1}
    assert exhausted(gw) == {"default": 1}


def test_skips_are_counted_by_reason(demo):
    gateway, primary, secondary, tertiary = demo
    primary.set_default(status=500)     # one failure opens its breaker
    secondary.set_default(status=404)   # marks gpt-4o dead on secondary
    gw = gateway.start(DEMO, env={"BREAKER_FAILURES": "1", "BREAKER_COOLDOWN": "60s"})
    r = gw.chat("gpt-4o")
    assert r.header("x-llm-provider") == "tertiary"
    assert skipped(gw) == {}
    for _ in range(3):
        r = gw.chat("gpt-4o")
        assert r.header("x-llm-provider") == "tertiary"
        assert r.header("x-llm-attempts") == "1"
    assert skipped(gw) == {("primary", "breaker_open"): 3, ("secondary", "dead"): 3}
    # Another model is not dead on secondary: only the open breaker skips.
    secondary.set_default(status=200)
    assert gw.chat("gpt-4o-mini").header("x-llm-provider") == "secondary"
    assert skipped(gw) == {("primary", "breaker_open"): 4, ("secondary", "dead"): 3}
    assert attempts(gw) == {
        ("primary", "server_error"): 1, ("secondary", "model_not_found"): 1,
        ("tertiary", "ok"): 4, ("secondary", "ok"): 1,
    }
    assert exhausted(gw) == {}


def test_circuit_open_counts_every_provider_skipped(demo):
    gateway, primary, secondary, tertiary = demo
    for m in (primary, secondary, tertiary):
        m.set_default(status=500)
    gw = gateway.start(DEMO, env={"BREAKER_FAILURES": "1", "BREAKER_COOLDOWN": "60s"})
    assert gw.chat("gpt-4o").status == 500
    assert exhausted(gw) == {"default": 1}
    r = gw.chat("gpt-4o", headers={"x-request-id": "obs-circuit-open"})
    assert r.status == 503 and r.json()["error"]["code"] == "circuit_open"
    assert skipped(gw) == {("primary", "breaker_open"): 1, ("secondary", "breaker_open"): 1,
                           ("tertiary", "breaker_open"): 1}
    assert exhausted(gw) == {"default": 1}, "no attempt was made: nothing more to exhaust"
    assert breaker(gw) == {"primary": 1, "secondary": 1, "tertiary": 1}
    assert walk(access_line(gw, "obs-circuit-open")) == (
        "primary:skipped:breaker_open,secondary:skipped:breaker_open,"
        "tertiary:skipped:breaker_open")


MODEL_AND_BUDGET = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
providers:
  - {name: gpt-only, endpoint: "127.0.0.1:${PRIMARY_PORT}", models: ["gpt-*"]}
  - {name: slow, endpoint: "127.0.0.1:${SECONDARY_PORT}"}
  - {name: backup.eu, endpoint: "127.0.0.1:${TERTIARY_PORT}"}
timeouts: {budget: 3s, min_remaining: 2s}
chains:
  - {name: main, providers: [gpt-only, slow, backup.eu]}
"""


def test_model_and_budget_skips_and_dotted_provider_names(demo):
    gateway, primary, secondary, tertiary = demo
    gw = gateway.start(MODEL_AND_BUDGET)
    # claude-x: gpt-only cannot serve it (skip: model); slow answers.
    assert gw.chat("claude-x").header("x-llm-provider") == "slow"
    # slow fails after 1.5 s: with 3 s of budget and 2 s kept in reserve no attempt follows.
    secondary.set_default(status=500, delay_ms=1500)
    r = gw.chat("claude-x", headers={"x-request-id": "obs-budget"})
    assert r.status == 500
    assert tertiary.request_count() == 0
    assert skipped(gw) == {("gpt-only", "model"): 2, ("backup.eu", "budget"): 1}
    assert walk(access_line(gw, "obs-budget")) == (
        "gpt-only:skipped:model,slow:server_error:Nms,backup.eu:skipped:budget")
    # A dotted provider name keeps its dots in the labels.
    secondary.set_default(status=503)
    assert gw.chat("claude-x").header("x-llm-provider") == "backup.eu"
    assert fallbacks(gw) == {("slow", "backup.eu"): 1}
    assert attempts(gw)[("backup.eu", "ok")] == 1
    assert 'llm_failover_breaker_state{provider="backup.eu"} 0' in gw.prometheus()


def test_breaker_state_gauge_moves_closed_open_half_open_closed(demo):
    gateway, primary, secondary, _ = demo
    primary.set_default(status=500)
    gw = gateway.start(DEMO, env={"BREAKER_FAILURES": "2", "BREAKER_COOLDOWN": "3s",
                                  "STATUS_PATH": STATUS})
    assert breaker(gw) == {"primary": 0, "secondary": 0, "tertiary": 0}
    gw.chat("gpt-4o")
    assert breaker(gw)["primary"] == 0, "one failure of two: still closed"
    gw.chat("gpt-4o")
    opened = time.monotonic()
    assert breaker(gw) == {"primary": 1, "secondary": 0, "tertiary": 0}
    assert gw.chat("gpt-4o").header("x-llm-fallback-reason") == "breaker_open"
    assert breaker(gw)["primary"] == 1

    # After the cooldown one slow probe goes through: half-open while it is in flight.
    time.sleep(max(0.0, 3.2 - (time.monotonic() - opened)))
    primary.set_default(status=200, delay_ms=1500)
    result = {}
    probe = threading.Thread(target=lambda: result.setdefault("r", gw.chat("gpt-4o")))
    probe.start()
    primary.wait_requests(3)
    assert breaker(gw)["primary"] == 2
    status = json.loads(status_endpoint(gateway, "GET", STATUS).text)
    p = status["providers"][0]
    assert (p["state"], p["state_value"], p["probe_in_flight"]) == ("half_open", 2, True)
    probe.join(10)
    assert result["r"].header("x-llm-provider") == "primary"
    assert breaker(gw)["primary"] == 0
    # The refresh tick reads the same shared state: the gauge stays where it is.
    time.sleep(1.2)
    assert breaker(gw) == {"primary": 0, "secondary": 0, "tertiary": 0}


def test_breaker_gauge_follows_a_cooldown_ending_with_no_traffic(demo):
    gateway, primary, _, _ = demo
    primary.set_default(status=500)
    gw = gateway.start(DEMO, env={"BREAKER_FAILURES": "1", "BREAKER_COOLDOWN": "1s"})
    gw.chat("gpt-4o")
    assert breaker(gw)["primary"] == 1
    # Nobody reports anything: the root's tick moves the gauge to half-open (next request probes).
    wait_until(lambda: breaker(gw)["primary"] == 2, 4.0, "gauge at half-open")


# ------------------------------------------------------------------------------- status endpoint

def test_status_endpoint_reports_breakers_failures_and_dead_marks(demo):
    gateway, primary, secondary, tertiary = demo
    primary.set_default(status=503)
    secondary.set_default(status=404)
    gw = gateway.start(DEMO, env={"BREAKER_FAILURES": "2", "BREAKER_COOLDOWN": "60s",
                                  "STATUS_PATH": STATUS})
    before = int(time.time() * 1000)
    for _ in range(2):
        assert gw.chat("gpt-4o").header("x-llm-provider") == "tertiary"
    requests_seen = [m.request_count() for m in (primary, secondary, tertiary)]

    r = status_endpoint(gateway, "GET", STATUS)
    assert r.status == 200
    assert r.header("content-type") == "application/json"
    assert r.header("cache-control") == "no-store"
    body = r.json()
    now = body["now_ms"]
    assert before <= now <= int(time.time() * 1000) + 1000
    by_name = {p["name"]: p for p in body["providers"]}
    assert list(by_name) == ["primary", "secondary", "tertiary"]

    p = by_name["primary"]
    assert (p["state"], p["state_value"]) == ("open", 1)
    assert (p["failures_in_window"], p["failure_threshold"]) == (2, 2)
    assert p["last_failure"]["class"] == "overloaded"
    assert before <= p["last_failure"]["at_ms"] <= now
    assert p["open_until_ms"] == pytest.approx(p["last_failure"]["at_ms"] + 60_000, abs=5)
    assert p["probe_in_flight"] is False
    assert p["dead_until_ms"] is None and p["dead_models"] == []

    s = by_name["secondary"]
    assert s["state"] == "closed" and s["open_until_ms"] is None
    assert s["failures_in_window"] == 0, "model_not_found does not count toward the breaker"
    assert s["last_failure"]["class"] == "model_not_found"
    [mark] = s["dead_models"]
    assert (mark["model"], mark["class"]) == ("gpt-4o", "model_not_found")
    assert mark["until_ms"] == pytest.approx(s["last_failure"]["at_ms"] + 6 * 3_600_000, abs=5)

    t = by_name["tertiary"]
    assert (t["state"], t["last_failure"], t["failures_in_window"]) == ("closed", None, 0)

    # Query strings are ignored; only GET and HEAD are answered; providers never see any of it.
    assert status_endpoint(gateway, "GET", STATUS + "?pretty=1").json()["providers"][0]["name"] == "primary"
    head = status_endpoint(gateway, "HEAD", STATUS)
    assert head.status == 200 and head.body == b""
    post = status_endpoint(gateway, "POST", STATUS, json={"model": "gpt-4o"})
    assert post.status == 405 and post.header("allow") == "GET, HEAD"
    assert [m.request_count() for m in (primary, secondary, tertiary)] == requests_seen


def test_status_endpoint_is_off_by_default(demo):
    gateway, primary, _, _ = demo
    gw = gateway.start(DEMO)
    r = gw.request("GET", STATUS)
    # Not answered by the filter: planned like any request and sent to a provider.
    assert r.header("x-mock-provider") == "primary"
    assert primary.request_count() == 1
    assert "providers" not in r.text


# ------------------------------------------------------------------------------------ access log

def test_access_log_lists_each_requests_walk(demo):
    gateway, primary, secondary, tertiary = demo
    gw = gateway.start(DEMO, env={"BREAKER_FAILURES": "1", "BREAKER_COOLDOWN": "60s"})
    gw.chat("gpt-4o", headers={"x-request-id": "obs-healthy"})
    line = access_line(gw, "obs-healthy")
    # The mocks report usage: the serving attempt's entry carries it.
    assert walk(line) == "primary:ok:Nms:in=5/out=7/cached=0"
    assert '"POST /v1/chat/completions HTTP/1.1" 200 ' in line
    # On Envoy 1.36-1.38 the route's cluster is the plan's grouping cluster (docs/older-envoys.md).
    group = "llm_failover~primary~secondary~tertiary"
    assert f" attempts=1 cluster={group if harness.grouping_mode() else 'primary'} " in line

    primary.set_default(status=503)
    secondary.set_default(status=500)
    gw.chat("gpt-4o", headers={"x-request-id": "obs-failover"})
    line = access_line(gw, "obs-failover")
    assert walk(line) == ("primary:overloaded:Nms,secondary:server_error:Nms,"
                          "tertiary:ok:Nms:in=5/out=7/cached=0")
    assert f" attempts=3 cluster={group if harness.grouping_mode() else 'tertiary'} " in line

    # Both breakers are open now: they are skipped, and the log says so.
    tertiary.set_default(status=502)
    r = gw.chat("gpt-4o", headers={"x-request-id": "obs-skip-exhausted"})
    assert r.status == 502
    line = access_line(gw, "obs-skip-exhausted")
    assert walk(line) == (
        "primary:skipped:breaker_open,secondary:skipped:breaker_open,tertiary:server_error:Nms")
    assert '" 502 ' in line
    # One line per request.
    assert sum("request_id=obs-" in l for l in gw.log().splitlines()) == 3


def test_access_log_durations_are_the_attempts_own(demo):
    gateway, primary, secondary, _ = demo
    primary.set_default(status=500, delay_ms=400)
    secondary.set_default(delay_ms=200)
    gw = gateway.start(DEMO)
    gw.chat("gpt-4o", headers={"x-request-id": "obs-durations"})
    m = re.search(r"llm_failover=primary:server_error:(\d+)ms,secondary:ok:(\d+)ms",
                  access_line(gw, "obs-durations"))
    assert m, access_line(gw, "obs-durations")
    first, second = int(m.group(1)), int(m.group(2))
    assert 380 <= first < 2000 and 180 <= second < 2000, (first, second)


# ------------------------------------------------------------------------------------ log levels

def wasm_log_lines(text):
    """The filter's own log lines: Envoy's `wasm` logger's, or `dynamic_modules`' for the native
    module (docs/native.md)."""
    mark = "[dynamic_modules]" if runtime() == "native" else "wasm log"
    return [l for l in text.splitlines() if mark in l]


def test_at_info_level_traffic_logs_nothing_per_request_even_failing_over(demo):
    gateway, primary, _, _ = demo
    gw = gateway.start(DEMO)
    start = len(gw.log())
    for i in range(20):
        assert gw.chat("gpt-4o").status == 200
    primary.set_default(status=503)
    for i in range(5):
        assert gw.chat("gpt-4o").header("x-llm-provider") == "secondary"
    # During an outage a line per failover would cost most when the gateway is busiest;
    # metrics and access logs carry every failover.
    assert wasm_log_lines(gw.log()[start:]) == []


def test_at_debug_level_a_failover_logs_its_provider_and_class(demo):
    gateway, primary, _, _ = demo
    primary.set_default(status=503)
    gw = gateway.start(DEMO, log_level="debug")
    start = len(gw.log())
    assert gw.chat("gpt-4o").header("x-llm-provider") == "secondary"
    lines = [l for l in wasm_log_lines(gw.log()[start:]) if "falling over" in l]
    assert len(lines) == 1, lines
    assert "[debug]" in lines[0]
    assert "primary answered overloaded; falling over to secondary" in lines[0]


def test_configuration_errors_are_logged_at_error_level_naming_the_field(gateway, render, tmp_path):
    import subprocess
    path = render(DEMO, {**gateway.env, "PRIMARY_PORT": "1", "SECONDARY_PORT": "2",
                         "TERTIARY_PORT": "3"})
    text = path.read_text()
    # A bad limit, and a chain entry's misspelt field (Envoy refuses it as the CLI
    # does, instead of sending the caller's model).
    for was, broken_as, field in [('"max_attempts":3', '"max_attempts":0', "chains[0].max_attempts"),
                                  ('"model":"tertiary-model"', '"modle":"tertiary-model"',
                                   "chains[0].providers[2].modle: unknown field `modle`")]:
        broken = text.replace(was, broken_as)
        assert broken != text
        bad = tmp_path / "bad.yaml"
        bad.write_text(broken)
        out = subprocess.run([harness.envoy_bin(), "--mode", "validate", "-c", str(bad)],
                             cwd=harness.REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode != 0
        lines = [l for l in (out.stdout + out.stderr).splitlines()
                 if "invalid plugin configuration" in l]
        assert lines, out.stdout + out.stderr
        assert all("[error]" in l for l in lines), lines
        assert any(field in l for l in lines), lines
