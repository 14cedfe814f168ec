"""Groups of equal deployments through a real Envoy with two workers (docs/behaviour.md 2.10,
docs/configuration.md "Groups of equal deployments"): a weighted group splits requests by its
weights and, when one member fails, keeps answering from the others with no request lost, the
failing member's calls bounded by its breaker; a `least_busy` group sends new requests away
from a member holding slow streams, counted across both workers, and back once they end."""
import threading

import pytest

import harness
from harness import free_port, wait_until

if harness.external_mode():
    pytest.skip("needs its own gateway: its groups and mocks are its own", allow_module_level=True)

CONFIG = harness.STATUS_HEAD + """breaker: {failures: 3, window: 30s, cooldown: 60s}
providers:
  - {name: east, endpoint: "127.0.0.1:${EAST_PORT}"}
  - {name: west, endpoint: "127.0.0.1:${WEST_PORT}"}
  - {name: spare, endpoint: "127.0.0.1:${SPARE_PORT}"}
  - {name: fallback, endpoint: "127.0.0.1:${FALLBACK_PORT}"}
  - {name: slow, endpoint: "127.0.0.1:${SLOW_PORT}"}
  - {name: quick, endpoint: "127.0.0.1:${QUICK_PORT}"}
chains:
  - name: weighted
    models: ["gpt-weighted"]
    providers:
      - {group: [east, west, spare], weights: [2, 1, 1]}
      - fallback
  - name: busy
    models: ["gpt-busy"]
    providers:
      - {group: [slow, quick], policy: least_busy}
"""
NAMES = ["east", "west", "spare", "fallback", "slow", "quick"]


class Module(harness.MockedGateway):
    def __init__(self, tmp):
        self.status_port = free_port()
        super().__init__(CONFIG, tmp, NAMES, env={"STATUS_PORT": str(self.status_port)},
                         concurrency=2)

    def status(self):
        r = harness.http_request(f"http://127.0.0.1:{self.status_port}", "GET",
                                 "/llm-failover/status")
        return harness.jsonlib.loads(r.body)

    def counts(self):
        return {n: self.mocks[n].request_count() for n in NAMES}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    m = Module(tmp_path_factory.mktemp("groups"))
    yield m
    m.stop()


def split(setup, n, model="gpt-weighted"):
    """`n` requests, one after another: {provider that answered: count}; every one a 200."""
    served = {}
    for _ in range(n):
        r = setup.gw.chat(model)
        assert r.status == 200, r.text()
        p = r.header("x-llm-provider")
        served[p] = served.get(p, 0) + 1
    return served


def test_a_group_splits_by_weight_and_keeps_answering_when_a_member_fails(setup):
    before = setup.counts()
    served = split(setup, 40)
    # 2:1:1 over 40 requests: east about 20, the others about 10 each (bounds at about four
    # standard deviations, so the test fails on a broken pick, not on chance).
    assert set(served) <= {"east", "west", "spare"}, served
    assert 10 <= served.get("east", 0) <= 30, served
    assert 2 <= served.get("west", 0) <= 20 and 2 <= served.get("spare", 0) <= 20, served
    after = setup.counts()
    assert sum(after[n] - before[n] for n in ("east", "west", "spare")) == 40
    assert after["fallback"] == before["fallback"]
    # The status endpoint shows the group and each member's share.
    group = next(g for g in setup.status()["groups"] if g["chain"] == "weighted")
    assert group["policy"] == "weighted" and group["position"] == 0
    assert [(m["provider"], m["weight"], m["share_percent"]) for m in group["members"]] == [
        ("east", 2, 50.0), ("west", 1, 25.0), ("spare", 1, 25.0)]

    # west fails every call: no request is lost, and west's breaker (3 failures) stops its
    # calls; its share goes to east and spare by their weights. 120 requests: east about 80,
    # spare about 40, so "east more than spare" fails on chance about once in 10,000 runs
    # (at 40 requests it did about once in 70: seen in CI).
    setup.mocks["west"].set_default(status=500)
    west_before = setup.mocks["west"].request_count()
    served = split(setup, 120)
    assert set(served) <= {"east", "spare"}, served
    assert sum(served.values()) == 120
    assert setup.mocks["west"].request_count() - west_before <= 3
    assert served.get("east", 0) > served.get("spare", 0) > 0, served
    providers = {p["name"]: p for p in setup.status()["providers"]}
    assert providers["west"]["state"] == "open"
    assert providers["east"]["state"] == "closed"
    setup.mocks["west"].set_default(status=200)


def in_flight(setup):
    group = next(g for g in setup.status()["groups"] if g["chain"] == "busy")
    assert group["policy"] == "least_busy"
    return {m["provider"]: m["in_flight"] for m in group["members"]}


def test_least_busy_sends_new_requests_away_from_a_member_holding_slow_streams(setup):
    slow, quick = setup.mocks["slow"], setup.mocks["quick"]
    # slow's streams take about 4 s; quick answers at once.
    slow.set_default(status=200, stream=True, chunks=4, chunk_interval_ms=1000)
    quick.set_default(status=200, stream=True, chunks=2)
    held = []

    def stream():
        r = setup.gw.chat("gpt-busy", stream=True, timeout=20)
        held.append(r.header("x-llm-provider"))

    # Both idle: ties go either way. Streams are started until one is held by slow.
    threads = []
    for _ in range(20):
        sent = slow.request_count()
        t = threading.Thread(target=stream)
        t.start()
        threads.append(t)
        if wait_until(lambda: slow.request_count() > sent or not t.is_alive(), 5,
                      "the stream to reach a provider") and slow.request_count() > sent:
            break
    else:
        pytest.fail("no stream reached slow in 20 tries")
    # (An attempt's count drops when Envoy ends its stream, a moment after the caller's answer.)
    wait_until(lambda: in_flight(setup) == {"slow": 1, "quick": 0}, 3,
               f"slow holding one stream, quick none: {in_flight(setup)}")
    # While slow holds its stream, every new request (on either worker) goes to quick.
    slow_sent = slow.request_count()
    for _ in range(12):
        r = setup.gw.chat("gpt-busy", stream=True)
        assert r.status == 200 and r.header("x-llm-provider") == "quick"
    assert slow.request_count() == slow_sent
    for t in threads:
        t.join(timeout=20)
    assert "slow" in held
    # Its stream over, slow is counted idle again and takes requests again.
    wait_until(lambda: in_flight(setup) == {"slow": 0, "quick": 0}, 3,
               f"nothing in flight: {in_flight(setup)}")
    slow.set_default(status=200, stream=True, chunks=2)
    served = split(setup, 20, model="gpt-busy")
    assert served.get("slow", 0) > 0 and served.get("quick", 0) > 0, served
