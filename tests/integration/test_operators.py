"""What clients and operators read, through a real Envoy with real mock providers:
`x-should-retry` on every error answer (behaviour.md 6), the liveness answer on `GET /` (behaviour.md 10),
and each provider's health over time in the status endpoint, exact under two workers and
concurrent traffic (behaviour.md 4 and 10)."""
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import harness
from harness import REPO_ROOT, http_request, prometheus_samples

CONFIG = "tests/integration/configs/operators.failover.yaml"
STATUS = "/llm-failover/status"
DASHBOARD = REPO_ROOT / "examples" / "grafana" / "llm-failover.json"

pytestmark = pytest.mark.skipif(
    harness.external_mode(), reason="needs a fresh gateway with scripted knobs")


@pytest.fixture
def two(gateway):
    primary, secondary = gateway.mocks("primary", "secondary")
    return gateway, primary, secondary


def status_of(gateway):
    r = http_request(f"http://127.0.0.1:{gateway.env['STATUS_PORT']}", "GET", STATUS)
    assert r.status == 200, r.text
    return {p["name"]: p for p in r.json()["providers"]}


# ------------------------------------------------------------------------------ x-should-retry

def test_every_error_answer_carries_x_should_retry_a_providers_own_included(two):
    gateway, primary, secondary = two
    gw = gateway.start(CONFIG)  # falls over on server_error only
    # A provider's 400 is not failed over: it reaches the caller with the gateway's advice,
    # whatever the provider said.
    primary.set_default(status=400, headers={"x-should-retry": "true"})
    r = gw.chat("gpt-4o")
    assert (r.status, r.header("x-mock-provider")) == (400, "primary")
    assert r.header("x-should-retry") == "false"
    for code, advice in [(408, "true"), (429, "true"), (404, "false"), (422, "false")]:
        primary.set_default(status=code)
        r = gw.chat("gpt-4o")
        assert (r.status, r.header("x-mock-provider")) == (code, "primary"), code
        assert r.header("x-should-retry") == advice, code
    assert secondary.request_count() == 0, "none of these fell over"
    # An exhausted chain's last 5xx: retriable.
    primary.set_default(status=500)
    secondary.set_default(status=503)
    r = gw.chat("gpt-4o")
    assert (r.status, r.header("x-should-retry")) == (503, "true")
    # Successes carry none of the gateway's.
    primary.set_default(status=200)
    r = gw.chat("gpt-4o")
    assert r.status == 200 and r.header("x-should-retry") is None


def test_a_spent_budget_says_do_not_retry(two):
    gateway, primary, secondary = two
    gw = gateway.start(CONFIG, env={"BUDGET": "2s", "MIN_REMAINING": "1s"})
    # primary's 500 comes after 1.2 s: 0.8 s left, less than an attempt needs.
    primary.set_default(status=500, delay_ms=1200)
    r = gw.chat("gpt-4o")
    assert (r.status, r.header("x-mock-provider")) == (500, "primary")
    assert r.header("x-should-retry") == "false"
    assert secondary.request_count() == 0
    # The same 500 in time falls over; the exhausted chain's answer is retriable.
    primary.set_default(status=500)
    secondary.set_default(status=500)
    r = gw.chat("gpt-4o")
    assert (r.status, r.header("x-llm-attempts"), r.header("x-should-retry")) == (500, "2", "true")


# ------------------------------------------------------------------------------------ liveness

def test_get_slash_answers_serving_with_no_key_and_no_provider(two):
    gateway, primary, secondary = two
    gw = gateway.start(CONFIG)
    r = gw.request("GET", "/")
    assert (r.status, r.body) == (200, b"serving\n")
    assert r.header("content-type") == "text/plain"
    assert r.header("x-llm-provider") is None
    head = gw.request("HEAD", "/")
    assert (head.status, head.body) == (200, b"")
    assert primary.request_count() == secondary.request_count() == 0
    # A POST to / is not the liveness check: planned like any request (this chain has no
    # `paths`: it takes every path).
    post = gw.chat("gpt-4o", path="/")
    assert post.header("x-mock-provider") == "primary"
    # The whole gateway down (every provider failing) still answers serving.
    primary.down()
    secondary.down()
    assert gw.request("GET", "/").body == b"serving\n"


def test_the_liveness_path_moves_and_turns_off(two):
    gateway, primary, _ = two
    gw = gateway.start(CONFIG, env={"LIVENESS_PATH": "/healthz"})
    assert gw.request("GET", "/healthz").body == b"serving\n"
    assert primary.request_count() == 0
    # "/" is no longer answered: planned like any request, as it is with the answer off.
    assert gw.request("GET", "/").header("x-mock-provider") == "primary"
    gw.envoy.stop()
    gw = gateway.start(CONFIG, env={"LIVENESS_PATH": '""'})
    assert gw.request("GET", "/").header("x-mock-provider") == "primary"
    assert primary.request_count() == 2


def test_liveness_never_shadows_a_users_route(two, render):
    """A hand-merged configuration: the user's own route for `/` (their web app) comes before
    the gateway's route. The filter leaves it alone; the gateway's route still answers."""
    yaml = pytest.importorskip("yaml")  # not in the docker-compose run's test image
    gateway, primary, _ = two
    path = render(CONFIG, gateway.env)
    config = yaml.safe_load(path.read_text())
    [api] = [listener for listener in config["static_resources"]["listeners"]
             if listener["name"] == "llm_failover"]
    hcm = api["filter_chains"][0]["filters"][0]["typed_config"]
    routes = hcm["route_config"]["virtual_hosts"][0]["routes"]
    routes.insert(0, {"name": "web", "match": {"path": "/"},
                      "direct_response": {"status": 200, "body": {"inline_string": "web app\n"}}})
    path.write_text(yaml.safe_dump(config))
    gw = gateway.start_bootstrap(path)
    assert gw.request("GET", "/").body == b"web app\n"
    assert gw.request("GET", "/?x=1").body == b"web app\n"
    assert gw.chat("gpt-4o").header("x-mock-provider") == "primary"
    assert primary.request_count() == 1


def test_envoys_api_key_auth_in_front_authenticates_callers(two, render):
    """docs/operations.md "Authenticating callers": its api_key_auth snippet, as written, put
    first in the rendered listener's http_filters. Unknown or missing keys get Envoy's 401 and
    reach no provider; a listed key passes, as Bearer or x-api-key, and the provider sees only
    its own credential."""
    yaml = pytest.importorskip("yaml")  # not in the docker-compose run's test image
    gateway, primary, _ = two
    doc = (REPO_ROOT / "docs" / "operations.md").read_text()
    section = doc[doc.index("## Authenticating callers"):]
    snippet = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    [auth] = yaml.safe_load(snippet)
    path = render(CONFIG, gateway.env)
    config = yaml.safe_load(path.read_text())
    [api] = [listener for listener in config["static_resources"]["listeners"]
             if listener["name"] == "llm_failover"]
    hcm = api["filter_chains"][0]["filters"][0]["typed_config"]
    hcm["http_filters"].insert(0, auth)
    path.write_text(yaml.safe_dump(config))
    gw = gateway.start_bootstrap(path)
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    for headers in ({}, {"authorization": "Bearer wrong-key"}, {"x-api-key": "wrong-key"}):
        r = gw.post("/v1/chat/completions", json=body, headers=headers)
        assert r.status == 401, (headers, r.status, r.text)
    assert primary.request_count() == 0, "an unauthenticated request reaches no provider"
    for headers in ({"authorization": "Bearer team-a-secret-key"},
                    {"x-api-key": "team-b-secret-key"}):
        r = gw.post("/v1/chat/completions", json=body, headers=headers)
        assert r.status == 200 and r.header("x-llm-provider") == "primary", (headers, r.text)
    seen = [dict((k.lower(), v) for k, v in rec["headers"]) for rec in primary.requests()]
    assert [h["authorization"] for h in seen] == ["Bearer sk-primary"] * 2
    assert [h.get("x-api-key") for h in seen] == [None, None], "the caller's key is removed"


# ------------------------------------------------------------------------ health over time

def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_health_windows_are_exact_under_two_workers_and_concurrent_traffic(two):
    gateway, primary, secondary = two
    gw = gateway.start(CONFIG)  # two workers (the harness's --concurrency 2)
    before = status_of(gateway)
    assert before["primary"]["health"] == {
        "state": "idle", "state_value": 3, "attempts": 0, "failed": 0, "window_ms": 900_000,
        "answered_last_5m": False, "last_answer_ms": None}
    requests, failures = 400, 100
    primary.enqueue(*[{"status": 500}] * failures)  # then its default: 200
    t0 = int(time.time() * 1000)
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: gw.chat("gpt-4o"), range(requests)))
    assert all(r.status == 200 for r in answers)
    served = [r.header("x-mock-provider") for r in answers]
    assert served.count("secondary") == failures
    # Both workers took traffic (each request is its own connection).
    port = gateway.env["LISTEN_PORT"]
    per_worker = [v for k, v in gw.stats("worker_").items()
                  if k.endswith("downstream_cx_total") and f"_{port}." in k]
    assert len([v for v in per_worker if v > 0]) == 2, per_worker

    # Successes reach the shared record within a tick (a second) of each worker.
    def settled():
        s = status_of(gateway)
        return s if s["primary"]["health"]["attempts"] == requests else None
    s = wait_for(settled, 5, "every attempt in the status endpoint")
    p, q = s["primary"]["health"], s["secondary"]["health"]
    assert (p["attempts"], p["failed"], p["state"]) == (requests, failures, "degraded")
    assert (q["attempts"], q["failed"], q["state"]) == (failures, 0, "healthy")
    assert p["answered_last_5m"] and t0 <= p["last_answer_ms"] <= int(time.time() * 1000)
    time.sleep(1.5)
    assert status_of(gateway)["primary"]["health"]["attempts"] == requests, "nothing counted twice"
    prom = gw.prometheus()
    assert 'llm_failover_health_state{provider="primary"} 1' in prom
    assert 'llm_failover_health_state{provider="secondary"} 0' in prom
    # Past half failed: failing.
    primary.set_default(status=500)
    for _ in range(requests):
        gw.chat("gpt-4o")
    s = wait_for(lambda: (x := status_of(gateway))["primary"]["health"]["failed"] == 500 and x,
                 5, "the failures")
    assert (s["primary"]["health"]["attempts"], s["primary"]["health"]["state"]) == (800, "failing")


# ---------------------------------------------------------------------------------- dashboard

def dashboard_queries():
    d = json.loads(DASHBOARD.read_text())
    queries = [(p["title"], t["expr"], t.get("legendFormat", ""))
               for p in d["panels"] for t in p["targets"]]
    queries += [(v["name"], v["query"]["query"], "") for v in d["templating"]["list"]
                if isinstance(v.get("query"), dict)]
    return queries


def test_every_dashboard_query_names_a_metric_and_labels_the_filter_exports(two):
    """The dashboard users import (examples/grafana/llm-failover.json) against the real
    /stats/prometheus of a gateway that saw every kind of event: each query's metrics and
    labels exist, and every llm_failover metric the filter exports has a panel. A metric
    defined only where a chain hedges (HEDGING_ONLY) is checked against a second gateway whose
    chain hedges and raced once (router mode only: elsewhere no gateway can export it, and its
    panels are the only ones not checked)."""
    gateway, primary, secondary = two
    hedged = hedged_families(gateway, primary, secondary)
    gw = gateway.start(CONFIG, env={"BREAKER_FAILURES": "1"})
    primary.set_default(status=500)
    assert gw.chat("gpt-4o").header("x-mock-provider") == "secondary"  # fallback; opens
    assert gw.chat("gpt-4o").header("x-llm-fallback-reason") == "breaker_open"  # a skip
    secondary.set_default(status=500)
    assert gw.chat("gpt-4o").status == 500  # exhausted
    # The gauges and (native build) the tokens' series come with a tick.
    prom = wait_for(lambda: all(f in (t := gw.prometheus()) for f in (
        "llm_failover_health_state", "llm_failover_tokens_total")) and t, 5,
        "the gauges and the tokens' counter")
    families = set(re.findall(r"^# TYPE (llm_failover_\w+) ", prom, re.M))
    assert families >= {"llm_failover_attempts_total", "llm_failover_fallbacks_total",
                        "llm_failover_skipped_total", "llm_failover_exhausted_total",
                        "llm_failover_breaker_state", "llm_failover_health_state"}, families
    labels = {f: set().union(*[set(ls) for ls, _ in prometheus_samples(prom, f)]) for f in families}
    assert not families & HEDGING_ONLY, "defined without a hedging chain"
    if hedged is not None:
        hedged_prom, hedged_families_ = hedged
        assert hedged_families_ >= HEDGING_ONLY, hedged_families_
        for f in HEDGING_ONLY:
            labels[f] = set().union(*[set(ls) for ls, _ in prometheus_samples(hedged_prom, f)])
        families |= HEDGING_ONLY
    used = set()
    for title, expr, legend in dashboard_queries():
        names = set(re.findall(r"\bllm_failover_\w+", expr))
        assert names, f"{title}: {expr} names no metric of the filter"
        if hedged is None and names <= HEDGING_ONLY:
            used |= names
            continue
        assert names <= families, f"{title}: {names - families} not exported"
        used |= names
        wanted = set(re.findall(r"by \(([^)]*)\)", expr))
        wanted = {w.strip() for group in wanted for w in group.split(",")}
        wanted |= set(re.findall(r"[{,]\s*(\w+)\s*(?:=~|!=|=)", expr))
        wanted |= set(re.findall(r"\{\{(\w+)\}\}", legend))
        wanted |= set(re.findall(r"label_values\(\w+, (\w+)\)", expr))
        for name in names:
            assert wanted <= labels[name], f"{title}: {name} has no {wanted - labels[name]}"
    assert used >= families, f"exported but on no panel: {families - used}"
    assert used <= families | HEDGING_ONLY


# Metrics the filter defines only when a chain of its file has hedge_after (docs/behaviour.md
# section 5, hedging).
HEDGING_ONLY = {"llm_failover_hedges_total"}

HEDGED = harness.GATEWAY_HEAD + """providers:
  - {name: primary, endpoint: "127.0.0.1:${PRIMARY_PORT}", credential: {header: authorization, value: sk-primary}}
  - {name: secondary, endpoint: "127.0.0.1:${SECONDARY_PORT}", credential: {header: authorization, value: sk-secondary}}
timeouts: {first_token: 8s}
chains: [{name: main, hedge_after: 300ms, providers: [primary, secondary]}]
"""


def hedged_families(gateway, primary, secondary):
    """(/stats/prometheus, its llm_failover families) of a gateway whose chain hedges, after one
    race (primary's first token at 2 s loses to secondary's); None where hedging cannot run
    (grouping mode, Envoy 1.36)."""
    if harness.grouping_mode() or not harness.holds_answers():
        return None
    primary.set_default(stream=True, first_chunk_delay_ms=2000)
    gw = gateway.start(HEDGED, env={"LISTEN_PORT": harness.free_port(),
                                    "ADMIN_PORT": harness.free_port()})
    r = gw.chat("gpt-4o", stream=True)
    assert (r.status, r.header("x-llm-provider")) == (200, "secondary"), r.text
    prom = wait_for(lambda: 'outcome="lost"' in (t := gw.prometheus()) and t, 5, "the race")
    gw.envoy.stop()
    primary.reset()
    secondary.reset()
    return prom, set(re.findall(r"^# TYPE (llm_failover_\w+) ", prom, re.M))
