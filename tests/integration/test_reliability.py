"""Holding under faults: the total time budget for attempts Envoy starts by itself,
provider-bound headers, the status endpoint's listener. Real Envoy, mock providers on real
sockets; each scenario writes its own small failover file."""
import json
import os
import threading
import time

import pytest

CHAIN_OF_THREE = """
listen: {{address: 127.0.0.1, port: "${{LISTEN_PORT}}"}}
admin: {{address: 127.0.0.1, port: "${{ADMIN_PORT}}"}}
providers:
  - name: primary
    endpoint: "127.0.0.1:${{PRIMARY_PORT}}"
    credential: {{header: authorization, prefix: "Bearer ", value: sk-primary}}
  - name: secondary
    endpoint: "127.0.0.1:${{SECONDARY_PORT}}"
    credential: {{header: authorization, prefix: "Bearer ", value: sk-secondary}}
  - name: tertiary
    endpoint: "127.0.0.1:${{TERTIARY_PORT}}"
    credential: {{header: x-api-key, value: sk-tertiary}}
{extra}
chains:
  - name: default
    providers: [primary, secondary, tertiary]
{chain_extra}
"""


def failover_file(tmp_path, extra="", chain_extra="", name="gateway.failover.yaml"):
    path = tmp_path / name
    path.write_text(CHAIN_OF_THREE.format(extra=extra, chain_extra=chain_extra))
    return path


@pytest.fixture
def three(gateway):
    return (gateway,) + tuple(gateway.mocks("primary", "secondary", "tertiary"))


# ------------------------------------------------------------------ the total budget
BUDGET = "timeouts: {attempt: 1s, budget: 2500ms, min_remaining: 1s}"


@pytest.mark.parametrize("exhausted", [False, True])
def test_no_attempt_envoy_starts_itself_begins_past_the_budget(three, tmp_path, exhausted):
    """Attempt timeout 1 s, budget 2.5 s, min_remaining 1 s: two hanging providers take 2 s,
    leaving 0.5 s, so the third attempt (Envoy's own retry after a per-try timeout) must not
    start: the healthy third provider is never called and the caller gets the last failure at
    about 2 s (or 503 fallbacks_exhausted), not the third provider's answer later."""
    gateway, primary, secondary, tertiary = three
    primary.set_default(action="hang")
    secondary.set_default(action="hang")
    chain_extra = "    fallbacks_exhausted: true" if exhausted else ""
    gw = gateway.start(failover_file(tmp_path, BUDGET, chain_extra))
    t0 = time.monotonic()
    r = gw.chat("gpt-4o", timeout=10)
    took = time.monotonic() - t0
    assert tertiary.request_count() == 0, "an attempt started with less than min_remaining left"
    assert took < 2.45, f"the caller waited {took:.2f}s"
    assert (primary.request_count(), secondary.request_count()) == (1, 1)
    if exhausted:
        assert r.status == 503, r.text
        assert r.json()["error"]["code"] == "fallbacks_exhausted"
    else:
        assert r.status == 504, r.text
        assert r.json()["error"]["code"] == "timeout"
        assert "budget" in r.json()["error"]["message"]
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-attempts") == "2"
    assert r.header("x-llm-fallback-reason") == "timeout"
    assert r.header("x-llm-failover-budget") is None, "internal headers never reach the caller"

    def logged():
        return "tertiary:skipped:budget" in gw.log()
    deadline = time.monotonic() + 15
    while not logged() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert logged(), gw.log()[-2000:]
    assert "primary:timeout:" in gw.log() and "secondary:timeout:" in gw.log()
    samples = gw.prometheus()
    assert 'llm_failover_skipped_total{provider="tertiary",reason="budget"} 1' in samples


def test_a_budget_with_room_left_still_falls_over(three, tmp_path):
    """The same chain with a budget that leaves room: the third provider answers."""
    gateway, primary, secondary, tertiary = three
    primary.set_default(action="hang")
    secondary.set_default(action="hang")
    gw = gateway.start(failover_file(tmp_path, "timeouts: {attempt: 1s, budget: 10s, min_remaining: 1s}"))
    r = gw.chat("gpt-4o", timeout=10)
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "tertiary"
    assert r.header("x-llm-attempts") == "3"


# ------------------------------------------------------------------ provider-bound headers
PRIVATE = {
    "cookie": "session=s3cret",
    "x-client-secret": "internal-only",
    "x-tenant": "acme",
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "x-b3-traceid": "80f198ee56343ba864fe8b2a57d3eff7",
    "x-internal-user": "alice@example.com",
}
PUBLIC = {
    "user-agent": "OpenAI/Python 3.57.0",
    "accept": "application/json",
    "openai-organization": "org-123",
    "openai-project": "proj-9",
    "anthropic-beta": "tools-2024-05-16",
    "x-stainless-lang": "python",
    "x-stainless-retry-count": "0",
    "idempotency-key": "idem-42",
    "x-client-request-id": "req-7",
}
TENANT_FOR_TERTIARY = """
  - name: spare
    endpoint: "127.0.0.1:${TERTIARY_PORT}"
"""


def names(record):
    return {k.lower() for k, _ in record["headers"]}


def value(record, name):
    got = [v for k, v in record["headers"] if k.lower() == name]
    return got[0] if len(got) == 1 else got


def test_only_the_api_headers_reach_providers_fallbacks_included(three, tmp_path):
    """Cookies, internal secrets, tenant and tracing headers reach no provider, on the first
    attempt or the fallbacks; the API headers SDKs send reach every one unchanged. A provider
    that lists x-tenant in forward_headers gets that one too, and only it."""
    gateway, primary, secondary, tertiary = three
    primary.set_default(status=503)
    secondary.set_default(status=500)
    path = tmp_path / "gateway.failover.yaml"
    path.write_text(CHAIN_OF_THREE.format(extra="", chain_extra="").replace(
        "    credential: {header: x-api-key, value: sk-tertiary}",
        "    credential: {header: x-api-key, value: sk-tertiary}\n"
        "    forward_headers: [x-tenant, \"x-b3-*\"]"))
    gw = gateway.start(path)
    r = gw.chat("gpt-4o", headers={**PRIVATE, **PUBLIC, "authorization": "Bearer gw-caller-key"})
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "tertiary"
    recs = [primary.last_request(), secondary.last_request(), tertiary.last_request()]
    for rec in recs:
        for name, v in PUBLIC.items():
            assert value(rec, name) == v, (rec["provider"], name, rec["headers"])
        assert value(rec, "content-type") == "application/json"
        for leaked in ("cookie", "x-client-secret", "traceparent", "x-internal-user",
                       "x-forwarded-for", "x-llm-fallback"):
            assert leaked not in names(rec), (rec["provider"], leaked)
    for rec in recs[:2]:
        assert "x-tenant" not in names(rec) and "x-b3-traceid" not in names(rec), rec["provider"]
    assert value(recs[2], "x-tenant") == "acme"
    assert value(recs[2], "x-b3-traceid") == PRIVATE["x-b3-traceid"]
    # Each provider's own credential, never the caller's.
    assert value(recs[0], "authorization") == "Bearer sk-primary"
    assert value(recs[1], "authorization") == "Bearer sk-secondary"
    assert "authorization" not in names(recs[2]) and value(recs[2], "x-api-key") == "sk-tertiary"


def test_forward_headers_all_opens_a_provider(three, tmp_path):
    gateway, primary, secondary, _ = three
    primary.set_default(status=503)
    path = tmp_path / "gateway.failover.yaml"
    path.write_text(CHAIN_OF_THREE.format(extra="", chain_extra="").replace(
        "    credential: {header: authorization, prefix: \"Bearer \", value: sk-secondary}",
        "    credential: {header: authorization, prefix: \"Bearer \", value: sk-secondary}\n"
        "    forward_headers: all"))
    gw = gateway.start(path)
    r = gw.chat("gpt-4o", headers={**PRIVATE, "authorization": "Bearer gw-caller-key"})
    assert r.status == 200, r.text
    first, second = primary.last_request(), secondary.last_request()
    assert not names(first) & set(PRIVATE)
    for name, v in PRIVATE.items():
        assert value(second, name) == v
    assert value(second, "authorization") == "Bearer sk-secondary", "never the caller's key"


def test_the_openai_sdk_loses_nothing_it_sends(three, tmp_path):
    """The real openai SDK, pointed once at a mock directly and once at the gateway (whose
    first provider fails): every header it sends reaches the providers unchanged, except the
    caller's key (replaced by the provider's), accept-encoding (not forwarded: see docs/configuration.md) and
    what the connection itself carries."""
    openai = pytest.importorskip("openai")
    gateway, primary, secondary, tertiary = three
    primary.set_default(status=503)
    gw = gateway.start(failover_file(tmp_path))
    extra = {"cookie": "session=s3cret", "x-client-secret": "internal-only"}

    def ask(base_url):
        client = openai.OpenAI(base_url=base_url + "/v1", api_key="gw-caller-key",
                               max_retries=0, default_headers=extra)
        out = client.chat.completions.create(model="gpt-4o",
                                             messages=[{"role": "user", "content": "hi"}])
        assert out.choices[0].message.content
        stream = client.chat.completions.create(model="gpt-4o", stream=True,
                                                messages=[{"role": "user", "content": "hi"}])
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    ask(tertiary.url)
    direct = tertiary.requests()[-2:]
    assert {"x-stainless-lang", "user-agent", "accept"} <= names(direct[0]), direct[0]["headers"]
    ask(gw.url)
    pairs = list(zip(direct * 2, primary.requests()[-2:] + secondary.requests()[-2:]))
    transport = {"host", "content-length", "connection", "transfer-encoding"}
    not_forwarded = {"authorization", "accept-encoding"} | set(extra)
    for sent, got in pairs:
        for name in names(sent) - transport - not_forwarded:
            if name in ("x-stainless-read-timeout", "x-stainless-timeout"):
                assert name in names(got), (got["provider"], name)
            else:
                assert value(got, name) == value(sent, name), (got["provider"], name)
        assert not names(got) & set(extra)
        assert value(got, "authorization") == f"Bearer sk-{got['provider']}"


# ------------------------------------------------------------------ the status endpoint's listener
STATUS = "/llm-failover/status"


def test_the_status_endpoint_is_on_its_own_loopback_listener_by_default(three, tmp_path):
    """status_path alone: the API listener does not answer it (the request is an ordinary one),
    the status listener answers it and nothing else (other paths 404, no provider contacted)."""
    from harness import http_request
    gateway, primary, secondary, tertiary = three
    path = failover_file(tmp_path, f"status_path: {STATUS}\n"
                                   'status_listen: {address: 127.0.0.1, port: "${STATUS_PORT}"}')
    gw = gateway.start(path)
    status_url = f"http://127.0.0.1:{gateway.env['STATUS_PORT']}"
    r = http_request(status_url, "GET", STATUS)
    assert r.status == 200, r.text
    assert [p["name"] for p in r.json()["providers"]] == ["primary", "secondary", "tertiary"]
    for other in ("/", "/v1/chat/completions", STATUS + "/x"):
        assert http_request(status_url, "GET", other).status == 404
    assert http_request(status_url, "POST", "/v1/chat/completions",
                        json={"model": "gpt-4o", "messages": []}).status == 404
    assert primary.request_count() == 0, "the status listener never routes to a provider"
    api = gw.request("GET", STATUS)
    assert "providers" not in api.text, "the API listener must not serve the status endpoint"
    assert api.header("x-mock-provider") == "primary"


def test_the_status_endpoint_on_the_api_listener_when_asked(three, tmp_path):
    gateway, primary, _, _ = three
    gw = gateway.start(failover_file(tmp_path, f"status_path: {STATUS}\nstatus_listen: api"))
    r = gw.request("GET", STATUS)
    assert r.status == 200 and r.json()["providers"][0]["name"] == "primary"
    assert primary.request_count() == 0
    listeners = json.loads(gw.envoy.admin("/listeners?format=json"))["listener_statuses"]
    assert [l["name"] for l in listeners] == ["llm_failover"]


# ------------------------------------------------------------------ configuration changes under traffic
RELOADABLE = """
listen: {{address: 127.0.0.1, port: "${{LISTEN_PORT}}"}}
admin: {{address: 127.0.0.1, port: "${{ADMIN_PORT}}"}}
providers:
  - {{name: primary, endpoint: "127.0.0.1:${{PRIMARY_PORT}}", credential: {{header: authorization, prefix: "Bearer ", value: sk-primary}}}}
  - {{name: secondary, endpoint: "127.0.0.1:${{SECONDARY_PORT}}", credential: {{header: authorization, prefix: "Bearer ", value: sk-secondary}}}}
  - {{name: tertiary, endpoint: "127.0.0.1:${{TERTIARY_PORT}}", credential: {{header: x-api-key, value: sk-tertiary}}}}
breaker: {{failures: 2, window: 30s, cooldown: 60s}}
status_path: /llm-failover/status
status_listen: {{address: 127.0.0.1, port: "${{STATUS_PORT}}"}}
chains:
  - name: default
    providers: [{order}]
"""


def render_reloadable(gateway, tmp_path, order, ecds):
    import subprocess
    from harness import cli_bin
    src = tmp_path / "gateway.failover.yaml"
    src.write_text(RELOADABLE.format(order=order))
    out = tmp_path / "envoy.yaml"
    subprocess.run([str(cli_bin()), "render", str(src), "--reloadable", str(ecds),
                    "--out", str(out)], check=True, env={**os.environ, **gateway.env},
                   capture_output=True, timeout=30)
    return out


@pytest.mark.skipif(
    __import__("harness").grouping_mode(),
    reason="renders its own --reloadable config for router mode (Envoy 1.39+); not run on "
           "Envoy 1.36-1.38")
def test_a_changed_chain_takes_effect_under_traffic_with_no_request_lost(three, tmp_path):
    """Both roles' configuration comes from files Envoy watches (render --reloadable DIR).
    Under steady traffic the chain changes from [primary, secondary, tertiary] to [tertiary,
    secondary, primary]: no request fails, including those planned under the old chain whose
    fallback starts after the change (secondary answers 429 slowly, so many are in flight
    then), the new order takes effect, and the breaker that was open stays open (same
    provider, same shared state)."""
    from concurrent.futures import ThreadPoolExecutor
    from harness import http_request, wait_until
    gateway, primary, secondary, tertiary = three
    if gateway.external:
        pytest.skip("Envoy must watch files this test writes: not in another container")
    ecds = tmp_path / "ecds"
    bootstrap = render_reloadable(gateway, tmp_path, "primary, secondary, tertiary", ecds)
    gw = gateway.start_bootstrap(bootstrap)
    status_url = f"http://127.0.0.1:{gateway.env['STATUS_PORT']}"

    def primary_state():
        body = http_request(status_url, "GET", "/llm-failover/status").json()
        return body["providers"][0]["state"]

    primary.set_default(status=500)
    for _ in range(2):
        assert gw.chat("gpt-4o").header("x-llm-provider") == "secondary"
    assert primary_state() == "open"
    primary.set_default(status=200)
    secondary.set_default(status=429, delay_ms=300)  # falls over, never opens its breaker

    results, stop = [], threading.Event()

    def traffic(i):
        n = 0
        while not stop.is_set() and n < 2000:  # bounded; paced so it lasts the whole test
            n += 1
            time.sleep(0.02)
            try:
                r = gw.chat("gpt-4o", timeout=20, headers={"x-request-id": f"reload-{i}-{n}"})
                results.append((time.monotonic(), r.status, r.header("x-llm-provider"),
                                r.header("x-llm-attempts"), r.text[:200]))
            except Exception as e:  # noqa: BLE001 - a lost request is what this test looks for
                results.append((time.monotonic(), 0, None, None, repr(e)))

    with ThreadPoolExecutor(8) as pool:
        for i in range(8):
            pool.submit(traffic, i)
        time.sleep(2.0)
        changed_at = time.monotonic()
        render_reloadable(gateway, tmp_path, "tertiary, secondary, primary", ecds)
        wait_until(lambda: gw.chat("gpt-4o").header("x-llm-attempts") == "1", 10,
                   "the new chain order")
        time.sleep(1.5)
        stop.set()
    lost = [r for r in results if r[1] != 200]
    assert not lost, f"{len(lost)} of {len(results)} requests failed across the change: {lost[:3]}"
    before = [r for r in results if r[0] < changed_at]
    after = [r for r in results if r[0] > changed_at + 1.0]
    assert before and after, [(round(r[0] - changed_at, 2), r[3]) for r in results][-40:]
    assert all(r[2] == "tertiary" and r[3] == "2" for r in before), \
        [r[1:4] for r in before if not (r[2] == "tertiary" and r[3] == "2")][:5]
    assert all(r[2] == "tertiary" and r[3] == "1" for r in after[-5:]), \
        [(round(r[0] - changed_at, 2), r[3]) for r in results]
    assert primary_state() == "open", "the breaker state survives the change"
    assert "config_mismatch" not in gw.log()
    # Each provider still got only its own key.
    for rec in tertiary.requests(bodies=False):
        assert value(rec, "x-api-key") == "sk-tertiary" and "authorization" not in names(rec)
