"""Token budgets per provider and per caller through a real Envoy with two workers
(docs/behaviour.md section 15, docs/configuration.md "Token budgets" and "Token budgets per
caller"): counted exactly across workers from the answers' usage, a spent provider skipped
without an attempt (metrics, access log, fallback reason, status), every provider spent
answered 429 budget_exhausted in the caller's dialect with Retry-After and x-should-retry, and
the provider back when its window rolls over. A named caller's answers spend its own budget
whichever provider served them; spent, its requests get 429 budget_exhausted in their own API's
shape with Retry-After and no attempt, while other callers are answered;
llm_failover_tokens_total's caller label shows the spend per team (`other` for callers the file
does not name, no label without a caller), and the access log's `caller=` names it the same way
(never the header's raw value; `-` without a caller or without `caller_header`). Run it with
LLM_FAILOVER_RUNTIME=native too: the native build writes the same access-log properties.

One Envoy per fixture (--concurrency 2, the harness's default); each answer costs 12 tokens
(8 input + 4 output)."""
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import harness
from harness import free_port, prometheus_samples, wait_until

if harness.external_mode():
    pytest.skip("needs its own gateway with its own budgets", allow_module_level=True)

STATUS = "/llm-failover/status"
CONFIG = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
status_path: /llm-failover/status
status_listen: {address: 127.0.0.1, port: "${STATUS_PORT}"}
providers:
  - {name: a, endpoint: "127.0.0.1:${A_PORT}", budget: {tokens: 20, window: 2s}}
  - {name: b, endpoint: "127.0.0.1:${B_PORT}", budget: {tokens: 24, window: 2s}}
  - {name: c, endpoint: "127.0.0.1:${C_PORT}", budget: {tokens: 1000000, window: 24h}}
  - {name: d, endpoint: "127.0.0.1:${D_PORT}", budget: {tokens: 30, window: 24h}}
  - {name: e, endpoint: "127.0.0.1:${E_PORT}"}
chains:
  - {name: spend, models: ["gpt-b"], providers: [a, b]}
  - {name: many, models: ["gpt-c"], providers: [c]}
  - {name: cross, models: ["gpt-d"], providers: [d, e]}
"""
USAGE = {"prompt_tokens": 8, "completion_tokens": 4, "total_tokens": 12}


class Module(harness.MockedGateway):
    """One Envoy (two workers) and five mocks for the whole module."""

    def __init__(self, tmp):
        self.status_port = free_port()
        super().__init__(CONFIG, tmp, "abcde", env={"STATUS_PORT": str(self.status_port)},
                         concurrency=2, extra_args=["--file-flush-interval-msec", "50"])

    def mocks_started(self):
        for m in self.mocks.values():
            m.set_default(usage=USAGE)

    def status(self):
        return self.provider_status(self.status_port, STATUS)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    m = Module(tmp_path_factory.mktemp("budgets"))
    yield m
    m.stop()


def test_budgets_count_exactly_across_workers_and_never_overspend_beyond_running_requests(setup):
    gw, m = setup.gw, setup.mocks
    # 24 answers at once from c, on both workers: each counted once.
    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda _: gw.chat("gpt-c").status, range(24)))
    assert codes == [200] * 24
    assert setup.status()["c"]["budget"]["spent"] == 24 * 12 == m["c"].request_count() * 12
    # d (30 tokens) crossed by 16 requests, 8 at a time: what d answered is what it spent,
    # and past its budget only by requests that were already running when it was crossed.
    m["d"].set_default(usage=USAGE, delay_ms=50)
    with ThreadPoolExecutor(8) as pool:
        served = list(pool.map(lambda _: gw.chat("gpt-d").header("x-llm-provider"), range(16)))
    d = setup.status()["d"]["budget"]
    assert d["spent"] == 12 * served.count("d") == 12 * m["d"].request_count()
    assert 3 <= served.count("d") <= 3 + 7, served  # ceil(30 / 12), plus 7 others in flight
    assert served.count("e") == 16 - served.count("d") and d["exhausted"] and d["left"] == 0


def test_a_spent_provider_is_skipped_then_every_provider_spent_is_429_until_the_window_rolls_over(
        setup):
    gw, m = setup.gw, setup.mocks
    # Start at the beginning of a 2 s window, so the walk below stays in one window.
    wait_until(lambda: time.time() * 1000 % 2000 < 200, 3, "the start of a budget window")
    served = [gw.chat("gpt-b", headers={"x-request-id": f"budget-{k}"}) for k in range(4)]
    # a: 12, then 24 (the request that started with 8 left finishes); b: 12, then 24.
    assert [r.header("x-llm-provider") for r in served] == ["a", "a", "b", "b"]
    assert served[2].header("x-llm-fallback-reason") == "budget_exhausted"
    for path, body in [("/v1/chat/completions", None),
                       ("/v1/messages", {"model": "gpt-b", "max_tokens": 8,
                                         "messages": [{"role": "user", "content": "hi"}]})]:
        r = gw.post(path, json=body or {"model": "gpt-b",
                                        "messages": [{"role": "user", "content": "hi"}]},
                    headers={"x-request-id": f"budget-429{path.replace('/', '-')}"})
        assert r.status == 429, r.body
        err = json.loads(r.body)
        assert err["error"]["code"] == "budget_exhausted" and err["error"]["type"] == \
            "rate_limit_error", err
        assert (err.get("type") == "error") == (path == "/v1/messages"), err
        assert r.header("x-should-retry") == "true"
        assert 1 <= int(r.header("retry-after")) <= 2
    s = setup.status()
    for name, spent in [("a", 24), ("b", 24)]:
        budget = s[name]["budget"]
        assert (budget["spent"], budget["left"], budget["exhausted"]) == (spent, 0, True)
        assert budget["resets_at_ms"] % 2000 == 0 and budget["window_ms"] == 2000
    assert setup.skipped()[("a", "budget_exhausted")] == 4
    assert setup.skipped()[("b", "budget_exhausted")] == 2
    assert m["a"].request_count() == 2 and m["b"].request_count() == 2
    # The serving entry carries the tokens it spent (the mock reports 8 in, 4 out).
    assert setup.walk("budget-2") == "a:skipped:budget_exhausted,b:ok:Nms:in=8/out=4/cached=0"
    assert setup.walk("budget-429-v1-messages") == \
        "a:skipped:budget_exhausted,b:skipped:budget_exhausted"

    # The window rolls over: a is back.
    resets = s["a"]["budget"]["resets_at_ms"]
    wait_until(lambda: time.time() * 1000 > resets + 20, 3, "the budget window's end")
    r = gw.chat("gpt-b")
    assert r.status == 200 and r.header("x-llm-provider") == "a"


TEAMS_CONFIG = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
status_path: /llm-failover/status
status_listen: {address: 127.0.0.1, port: "${STATUS_PORT}"}
caller_header: x-team
providers:
  - {name: a, endpoint: "127.0.0.1:${A_PORT}"}
  - {name: b, endpoint: "127.0.0.1:${B_PORT}"}
chains:
  - {name: main, models: ["*"], providers: [a, b]}
callers:
  - {name: team-a, budget: {tokens: 36, window: 24h}}
  - {name: team-b}
"""
MESSAGES = {"model": "gpt-4o", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


class Teams(harness.MockedGateway):
    """One Envoy (two workers) and two mocks, whose callers have budgets."""

    def __init__(self, tmp):
        self.status_port = free_port()
        super().__init__(TEAMS_CONFIG, tmp, "ab", env={"STATUS_PORT": str(self.status_port)},
                         concurrency=2, extra_args=["--file-flush-interval-msec", "50"])

    def mocks_started(self):
        for m in self.mocks.values():
            m.set_default(usage=USAGE)

    def status(self):
        r = harness.http_request(f"http://127.0.0.1:{self.status_port}", "GET", STATUS)
        return json.loads(r.body)

    def tokens(self):
        """{(caller label or None, kind): tokens} of llm_failover_tokens_total."""
        out = {}
        for labels, value in prometheus_samples(self.gw.prometheus(),
                                                "llm_failover_tokens_total"):
            key = (labels.get("caller"), labels["kind"])
            out[key] = out.get(key, 0) + value
        return out


@pytest.fixture(scope="module")
def teams(tmp_path_factory):
    m = Teams(tmp_path_factory.mktemp("caller_budgets"))
    yield m
    m.stop()


def as_team(team):
    return {"x-team": team} if team else {}


def test_a_spent_team_gets_429_in_its_own_api_while_other_teams_are_answered(teams):
    gw, m = teams.gw, teams.mocks
    # Three answers at once, on both workers: 36 tokens, team-a's whole budget, each counted.
    with ThreadPoolExecutor(3) as pool:
        codes = list(pool.map(lambda _: gw.chat("gpt-4o", headers=as_team("team-a")).status,
                              range(3)))
    assert codes == [200] * 3
    served = m["a"].request_count() + m["b"].request_count()
    assert served == 3
    team_a = teams.status()["callers"][0]
    assert team_a["name"] == "team-a"
    budget = team_a["budget"]
    assert (budget["spent"], budget["left"], budget["exhausted"]) == (36, 0, True)
    assert budget["window_ms"] == 86_400_000 and budget["resets_at_ms"] % 86_400_000 == 0

    # Spent: refused in the caller's own API, no provider contacted.
    for path, body in [("/v1/chat/completions", None), ("/v1/messages", MESSAGES)]:
        r = gw.post(path, json=body or {"model": "gpt-4o",
                                        "messages": [{"role": "user", "content": "hi"}]},
                    headers=as_team("team-a"))
        assert r.status == 429, r.body
        err = json.loads(r.body)
        assert err["error"]["code"] == "budget_exhausted", err
        assert err["error"]["type"] == "rate_limit_error", err
        assert (err.get("type") == "error") == (path == "/v1/messages"), err
        assert "team-a" in err["error"]["message"], err
        assert r.header("x-should-retry") == "true"
        assert 1 <= int(r.header("retry-after")) <= 86_400
        assert r.header("x-llm-attempts") == "0" and r.header("x-llm-provider") is None
    assert m["a"].request_count() + m["b"].request_count() == served, "no attempt"

    # Another team, a caller the file does not name and no caller at all are answered.
    for team in ["team-b", "team-z", None]:
        r = gw.chat("gpt-4o", headers=as_team(team))
        assert r.status == 200 and r.header("x-llm-provider") == "a", (team, r.body)
    assert teams.status()["callers"][1] == {"name": "team-b", "budget": None}

    # Spend per team is one query: llm_failover_tokens_total by caller.
    want = {("team-a", "input"): 24, ("team-a", "output"): 12,
            ("team-b", "input"): 8, ("team-b", "output"): 4,
            ("other", "input"): 8, ("other", "output"): 4,
            (None, "input"): 8, (None, "output"): 4}

    def counted():
        got = teams.tokens()
        return all(got.get(k) == v for k, v in want.items()) and got
    got = wait_until(counted, 10, "the tokens per caller in the metrics")
    assert set(k for k in got if got[k]) == set(want), got


def test_the_access_log_names_the_team_as_the_metric_does_never_the_raw_header(teams, setup):
    gw = teams.gw
    # team-a may be spent by now (the test above): its 429 names it as well as a 200 would.
    for team, rid in [("team-a", "caller-a"), ("team-b", "caller-b"),
                      ("sk-live-not-a-team", "caller-other"), (None, "caller-none")]:
        r = gw.chat("gpt-4o", headers={"x-request-id": rid, **as_team(team)})
        assert r.status in (200, 429) and (r.status == 200 or team == "team-a"), (team, r.body)
    fields = {rid: re.search(r" caller=(\S+) ", teams.access_line(rid)).group(1)
              for rid in ["caller-a", "caller-b", "caller-other", "caller-none"]}
    assert fields == {"caller-a": "team-a", "caller-b": "team-b", "caller-other": "other",
                      "caller-none": "-"}, fields
    assert "sk-live-not-a-team" not in gw.log()
    # A file without caller_header writes nothing: Envoy prints `-`.
    r = setup.gw.chat("gpt-c", headers={"x-request-id": "caller-plain", "x-team": "team-a"})
    assert r.status == 200, r.body
    assert " caller=- " in setup.access_line("caller-plain")
