"""The fleet acts as one (docs/behaviour.md section 15, docs/operations.md "Several gateways"):
three real Envoys (two workers each) share one token budget, one team's budget and one breaker
count through the
real rate-limit service on a real Redis (the ``fleet_store`` fixture); a store without the
domain is a loud error, and the store failing (the service killed and restarted, Redis
restarted) fails no request and loses no spend.

Each answer costs 12 tokens (8 input + 4 output). Windows are an hour long (the service's
unit), so a test never straddles one unless it starts in the hour's last minute (it waits).
"""
import json
import os
import socket
import threading
import time
import types

import pytest

import harness
from harness import Envoy, LocalMock, free_port, http_request, render_config, wait_until

if harness.external_mode():
    # Before the gRPC client's import: the compose harness's image has no grpc module.
    pytest.skip("needs its own gateways and store", allow_module_level=True)

import grpc  # noqa: E402

from ratelimit_client import Descriptor, RateLimitClient  # noqa: E402
if os.environ.get("ENVOY_VERSION") == "1.36":
    # The sync is the same code in both modes (CI runs this file on 1.40 with both builds);
    # grouping mode's fleet is the same on 1.36 as on 1.38, where it runs by hand.
    pytest.skip("grouping mode's fleet runs on Envoy 1.38 (ENVOY_VERSION=1.38)",
                allow_module_level=True)

STATUS = "/llm-failover/status"
USAGE = {"prompt_tokens": 8, "completion_tokens": 4, "total_tokens": 12}
SYNC_S = 0.2
CONFIG = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
status_path: /llm-failover/status
status_listen: {address: 127.0.0.1, port: "${STATUS_PORT}"}
fleet: {address: "${RATELIMIT_HOST}:${RATELIMIT_PORT}", sync: 200ms, timeout: 100ms,
        domain: "${DOMAIN}"}
breaker: {failures: 100, fleet_failures: 6, fleet_window: 1h, cooldown: 30s}
caller_header: x-team
callers:
  - {name: team-a, budget: {tokens: ${TEAM_BUDGET}, window: 1h}}
  - {name: team-b}
providers:
  - {name: a, endpoint: "127.0.0.1:${A_PORT}", budget: {tokens: ${BUDGET}, window: 1h}}
  - {name: b, endpoint: "127.0.0.1:${B_PORT}"}
chains:
  - {name: c, models: ["*"], providers: [a, b]}
"""


class Fleet:
    """Three Envoys (two workers each) in front of mocks a and b, on one store."""

    def __init__(self, tmp, store, budget: int, replicas: int = 3, domain: str = "llm-failover",
                 team_budget: int = 1_000_000):
        if time.time() % 3600 > 3540:  # the hour's last minute: wait for the next window
            time.sleep(3600 - time.time() % 3600 + 0.5)
        self.store = store
        self.a, self.b = LocalMock("a"), LocalMock("b")
        for m in (self.a, self.b):
            m.set_default(usage=USAGE)
        self.envoys, self.status_ports = [], []
        try:
            for r in range(replicas):
                env = {"LISTEN_PORT": free_port(), "ADMIN_PORT": free_port(),
                       "STATUS_PORT": free_port(), "A_PORT": self.a.port, "B_PORT": self.b.port,
                       "BUDGET": budget, "TEAM_BUDGET": team_budget, "DOMAIN": domain,
                       **store.env}
                env = {k: str(v) for k, v in env.items()}
                config = render_config(CONFIG, env, out_dir=tmp / f"r{r}")
                self.envoys.append(Envoy(config, tmp / f"envoy{r}", concurrency=2).start())
                self.status_ports.append(int(env["STATUS_PORT"]))
        except BaseException:
            self.stop()
            raise
        self.urls = [e.listener_url() for e in self.envoys]
        self.n = 0

    def chat(self, team: str | None = None):
        """One request (from caller `team`, if given), round-robin over the replicas: (status,
        provider that answered)."""
        url = self.urls[self.n % len(self.urls)]
        self.n += 1
        r = http_request(url, "POST", "/v1/chat/completions", timeout=10,
                         headers={"x-team": team} if team else {},
                         json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        return r.status, r.header("x-llm-provider")

    def status(self, r: int) -> dict:
        body = http_request(f"http://127.0.0.1:{self.status_ports[r]}", "GET", STATUS).body
        return json.loads(body)

    def fleet(self, r: int) -> dict:
        return self.status(r)["fleet"]

    def syncs(self, result: str) -> float:
        def text(e):  # the native build's names as the wasm build prints them
            raw = e.prometheus()
            return harness.native_prometheus(raw) if harness.runtime() == "native" else raw
        return sum(v for e in self.envoys for labels, v in harness.prometheus_samples(
            text(e), "llm_failover_fleet_sync_total") if labels.get("result") == result)

    def stored_left(self, budget: int, counter: str = "a") -> int:
        """The store's own figure for a budget counter, a's by default (a read: hits 0).
        Asked again for up to 5 s: after Redis restarts, the service's first call on a pooled
        connection may fail ("response returned from Conn: EOF") while the next succeeds."""
        deadline = time.monotonic() + 5
        while True:
            try:
                with RateLimitClient(self.store.service.grpc_address) as rl:
                    s = rl.should_rate_limit("llm-failover", [
                        Descriptor([("budget", counter)], limit=budget, unit="HOUR",
                                   hits=0)]).statuses[0]
                return s.limit_remaining
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self):
        for e in self.envoys:
            e.stop()
        self.a.stop()
        self.b.stop()


@pytest.fixture
def fleet_of(tmp_path, fleet_store):
    made = []

    def make(budget: int, **kw) -> Fleet:
        made.append(Fleet(tmp_path, fleet_store, budget, **kw))
        return made[-1]

    yield make
    for f in made:
        f.stop()


def test_a_budget_spent_across_replicas_stops_every_replica(fleet_of):
    f = fleet_of(120)  # ten answers for the whole fleet
    wait_until(lambda: all(f.fleet(r)["state"] == "ok" for r in range(3)), 10, "first syncs")
    # 20 requests/s round-robin: about four answers per sync interval across the fleet.
    served = []
    for _ in range(36):
        code, provider = f.chat()
        assert code == 200
        served.append(provider)
        time.sleep(0.05)
    # Overshoot: at most one sync interval's answers of the other replicas (docs/operations.md).
    per_interval = int(SYNC_S / 0.05) + 1
    print(f"budget of 10 answers: {served.count('a')} served by a")  # docs/operations.md's figure
    assert 10 <= served.count("a") <= 10 + per_interval, served
    assert f.a.request_count() == served.count("a")
    # The tail went to b on every replica.
    assert served[-9:] == ["b"] * 9, served
    for r in range(3):
        fleet = f.fleet(r)
        assert fleet["budgets"][0]["name"] == "a" and fleet["budgets"][0]["left"] == 0, fleet
        assert f.status(r)["providers"][0]["budget"]["exhausted"]
    assert f.stored_left(120) == 0
    # Every sync answered, but for the odd one a loaded machine (CI runs three Envoys, the
    # service and Redis beside another test worker) lets pass its 100 ms timeout.
    ok, unavailable = f.syncs("ok"), f.syncs("unavailable")
    assert ok > 0 and unavailable <= ok / 20, (ok, unavailable)


def test_a_team_budget_spent_across_replicas_stops_that_team_on_every_replica(fleet_of):
    f = fleet_of(1_000_000, team_budget=120)  # ten answers for team-a, whichever replica
    wait_until(lambda: all(f.fleet(r)["state"] == "ok" for r in range(3)), 10, "first syncs")
    codes = []
    for _ in range(30):
        code, _ = f.chat("team-a")
        assert code in (200, 429), code
        codes.append(code)
        time.sleep(0.05)
    per_interval = int(SYNC_S / 0.05) + 1
    print(f"team budget of 10 answers: {codes.count(200)} served")
    assert 10 <= codes.count(200) <= 10 + per_interval, codes
    assert codes[-9:] == [429] * 9, codes
    assert f.a.request_count() + f.b.request_count() == codes.count(200), "a 429 is no attempt"
    # Every replica refuses team-a and answers team-b.
    for r in range(3):
        assert f.chat("team-a")[0] == 429
    for r in range(3):
        assert f.chat("team-b") == (200, "a")
    for r in range(3):
        team_a = f.status(r)["callers"][0]
        assert team_a["name"] == "team-a" and team_a["budget"]["exhausted"], team_a
        budgets = {b["name"]: b for b in f.fleet(r)["budgets"]}
        assert budgets["caller:team-a"]["left"] == 0, budgets
    assert f.stored_left(120, "caller:team-a") == 0


def test_a_failing_provider_opens_on_every_replica_at_the_fleets_threshold(fleet_of):
    f = fleet_of(1_000_000)
    wait_until(lambda: all(f.fleet(r)["state"] == "ok" for r in range(3)), 10, "first syncs")
    f.a.set_default(status=500)
    for _ in range(30):
        assert f.chat()[0] == 200  # b answers each failed-over request
        if all(f.status(r)["providers"][0]["state"] == "open" for r in range(3)):
            break
        time.sleep(0.05)
    # Each replica alone (failures: 100) would never have opened.
    assert [f.status(r)["providers"][0]["state"] for r in range(3)] == ["open"] * 3
    hits = f.a.request_count()
    print(f"fleet_failures 6: {hits} failed attempts before every replica opened")
    assert 6 <= hits <= 6 + int(SYNC_S / 0.05) + 2, hits
    for _ in range(6):
        assert f.chat() == (200, "b")
    assert f.a.request_count() == hits


def test_the_store_failing_fails_no_request_and_its_held_spend_is_reported(fleet_of):
    budget = 1_000_000
    f = fleet_of(budget)
    wait_until(lambda: all(f.fleet(r)["state"] == "ok" for r in range(3)), 10, "first syncs")

    def traffic(n):
        for _ in range(n):
            assert f.chat() == (200, "a")

    traffic(6)
    # The service killed mid-run: every request still answered, spend held.
    f.store.service.kill()
    traffic(9)
    wait_until(lambda: all(f.fleet(r)["state"] == "unavailable" for r in range(3)), 5,
               "every replica sees the store unavailable")
    held = sum(f.fleet(r)["budgets"][0]["held"] for r in range(3))
    assert held > 0
    assert f.syncs("unavailable") > 0
    f.store.service.start()
    wait_until(lambda: all(f.fleet(r)["state"] == "ok" and f.fleet(r)["budgets"][0]["held"] == 0
                           for r in range(3)), 10, "held spend reported")
    # Nothing lost; a sync that timed out after the store counted it is counted again (at
    # least once: docs/operations.md), so on a loaded machine a little more.
    assert 15 * 12 <= budget - f.stored_left(budget) <= (15 + 9) * 12
    assert all("fleet store" in e.log() and "answers again" in e.log() for e in f.envoys)
    # Redis restarted (no persistence: it counts from zero): the spend of its outage is reported.
    f.store.redis.kill()
    traffic(6)
    wait_until(lambda: all(f.fleet(r)["state"] == "unavailable" for r in range(3)), 5,
               "the service fails without its Redis")
    f.store.redis.start()
    traffic(3)
    wait_until(lambda: all(f.fleet(r)["state"] == "ok" and f.fleet(r)["budgets"][0]["held"] == 0
                           for r in range(3)), 15, "held spend reported after Redis")
    assert 9 * 12 <= budget - f.stored_left(budget) <= (9 + 6) * 12
    assert f.a.request_count() == 24


def test_a_store_that_does_not_know_the_domain_is_a_loud_error_and_counts_nothing(fleet_of):
    f = fleet_of(120, replicas=1, domain="not-configured")
    wait_until(lambda: f.fleet(0)["state"] == "refused", 10, "the store refusing the domain")
    for _ in range(12):  # past the budget: each replica counts alone meanwhile
        assert f.chat()[0] == 200
    assert f.fleet(0)["budgets"][0]["held"] == 120
    assert f.status(0)["providers"][0]["budget"]["exhausted"]
    assert f.syncs("refused") > 0
    assert "refuses domain \"not-configured\"" in f.envoys[0].log()
    assert "add `domain: not-configured`" in f.envoys[0].log()


def test_a_store_that_takes_the_call_and_never_answers_times_out_and_fails_no_request(tmp_path):
    """Past fleet.timeout (100 ms here) a sync ends as the store unavailable, whichever build
    (the native one gets Envoy's own gRPC error then: docs/internals.md "The native build"):
    every request is answered, and the spend is held for a later report."""
    silent = socket.create_server(("127.0.0.1", 0))
    held_open = []

    def take_and_hold():
        try:
            while True:
                held_open.append(silent.accept())
        except OSError:  # closed at the end
            pass

    threading.Thread(target=take_and_hold, daemon=True).start()
    store = types.SimpleNamespace(env={"RATELIMIT_HOST": "127.0.0.1",
                                       "RATELIMIT_PORT": silent.getsockname()[1]})
    f = Fleet(tmp_path, store, 1_000_000, replicas=1)
    try:
        wait_until(lambda: f.fleet(0)["state"] == "unavailable", 5, "the store timing out")
        for _ in range(3):
            assert f.chat() == (200, "a")
        wait_until(lambda: f.fleet(0)["budgets"][0]["held"] == 3 * 12, 5, "the spend held")
        assert f.syncs("unavailable") > 0 and f.syncs("ok") == 0
        assert held_open, "no sync reached the store"
        assert "fleet store (cluster llm_failover_fleet) does not answer" in f.envoys[0].log()
    finally:
        f.stop()
        silent.close()
        for conn, _ in held_open:
            conn.close()
