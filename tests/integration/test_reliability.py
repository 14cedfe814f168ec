"""Holding under faults (issue 17): the total time budget for attempts Envoy starts by itself,
provider-bound headers, the status endpoint's listener. Real Envoy, mock providers on real
sockets; each scenario writes its own small failover file."""
import json
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
