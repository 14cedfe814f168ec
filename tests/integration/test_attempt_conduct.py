"""Attempt conduct (behaviour.md 3 and 5) through a real Envoy running the built filter:
unreadable answers, in-place retry, the first-token timeout, every wait within the budget,
and honest ends of streams that break after bytes reached the caller."""
import json
import time

import pytest
import harness
from harness import prometheus_samples

CONFIG = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
providers:
  - {name: primary, endpoint: "127.0.0.1:${PRIMARY_PORT}",
     credential: {header: authorization, prefix: "Bearer ", value: sk-primary}}
  - {name: secondary, endpoint: "127.0.0.1:${SECONDARY_PORT}",
     credential: {header: authorization, prefix: "Bearer ", value: sk-secondary}}
  - {name: tertiary, endpoint: "127.0.0.1:${TERTIARY_PORT}",
     credential: {header: x-api-key, value: sk-tertiary}}
timeouts: TIMEOUTS
chains:
  - name: main
    providers: [primary, secondary, tertiary]
CHAIN_OPTIONS
"""


def config(timeouts="{}", chain=""):
    return CONFIG.replace("TIMEOUTS", timeouts).replace("CHAIN_OPTIONS", chain)


@pytest.fixture
def three(gateway):
    return (gateway, *gateway.mocks("primary", "secondary", "tertiary"))


def attempts(gw):
    return {tuple(sorted(k.items())): v for k, v in
            prometheus_samples(gw.prometheus(), "llm_failover_attempts_total")}


# ---------------------------------------------------------------------------------------------
# Unreadable answers (behaviour.md 3: a 200 that is empty or not JSON / an event stream).

@pytest.mark.parametrize("behaviour", [
    {"content_type": "text/html; charset=utf-8",
     "body": "<html><body><h1>502 Bad Gateway</h1>nginx</body></html>"},
    {"content_type": "application/json", "body": ""},
], ids=["html-page", "empty-200"])
def test_an_unreadable_200_falls_over_as_a_server_error(three, behaviour):
    gateway, primary, secondary, tertiary = three
    primary.set_default(status=200, **behaviour)
    gw = gateway.start(config())
    r = gw.chat("gpt-4o")
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-fallback-reason") == "server_error"
    assert r.json()["choices"][0]["message"]["content"].startswith("Hello from secondary")
    assert attempts(gw).get((("outcome", "server_error"), ("provider", "primary"))) == 1


def test_a_streamed_requests_html_200_falls_over_too(three):
    gateway, primary, secondary, _ = three
    primary.set_default(status=200, stream=False, content_type="text/html",
                        body="<html>Service Unavailable</html>")
    gw = gateway.start(config())
    r = gw.chat("gpt-4o", stream=True)
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "secondary"
    assert "data: [DONE]" in r.text


# ---------------------------------------------------------------------------------------------
# In-place retry (behaviour.md 5: opt-in per chain, once per provider, an attempt like any other).

IN_PLACE = "    retry_in_place: {}\n"
needs_router = pytest.mark.skipif(
    harness.grouping_mode(),
    reason="in-place retry needs Envoy 1.39+ (refused at render for Envoy 1.36-1.38)")


def request_gap(mock):
    """Seconds between the mock's first two requests."""
    first, second = mock.requests()[:2]
    return second["time"] - first["time"]


@needs_router
@pytest.mark.parametrize("status,reason", [(500, "server_error"), (503, "overloaded")])
def test_a_5xx_once_is_retried_on_the_same_provider_after_a_back_off(three, status, reason):
    gateway, primary, secondary, tertiary = three
    primary.enqueue(status=status)
    gw = gateway.start(config(chain=IN_PLACE))
    r = gw.chat("gpt-4o")
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "primary"
    assert r.header("x-llm-attempts") == "2"
    assert (primary.request_count(), secondary.request_count()) == (2, 0)
    assert 0.4 <= request_gap(primary) < 2.0, "about 0.5 s back-off"
    assert attempts(gw).get((("outcome", reason), ("provider", "primary"))) == 1
    assert attempts(gw).get((("outcome", "ok"), ("provider", "primary"))) == 1
    # A retry in place is no fallback: the header agrees with the fallback metric.
    assert r.header("x-llm-fallback-count") is None
    assert r.header("x-llm-fallback-reason") is None
    assert not prometheus_samples(gw.prometheus(), "llm_failover_fallbacks_total")
    # Both attempts carried the primary's key only.
    for rec in primary.requests():
        assert [v for k, v in rec["headers"] if k.lower() == "authorization"] == ["Bearer sk-primary"]


@needs_router
def test_a_429_asking_for_a_short_wait_is_retried_in_place_after_it(three):
    gateway, primary, secondary, _ = three
    primary.enqueue(status=429, headers={"Retry-After": "1"})
    gw = gateway.start(config(chain=IN_PLACE))
    r = gw.chat("gpt-4o")
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "primary"
    assert (primary.request_count(), secondary.request_count()) == (2, 0)
    assert 0.9 <= request_gap(primary) < 2.0, "the wait Retry-After asked for"


@needs_router
def test_a_429_asking_for_a_long_wait_moves_on_at_once(three):
    gateway, primary, secondary, _ = three
    primary.enqueue(status=429, headers={"Retry-After": "30"})
    gw = gateway.start(config(chain=IN_PLACE))
    started = time.monotonic()
    r = gw.chat("gpt-4o")
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-fallback-reason") == "rate_limited"
    assert (primary.request_count(), secondary.request_count()) == (1, 1)
    assert time.monotonic() - started < 1.0


@needs_router
def test_a_failure_repeated_in_place_moves_on_and_counts_toward_max_attempts(three):
    gateway, primary, secondary, tertiary = three
    primary.set_default(status=500)
    secondary.set_default(status=500)
    gw = gateway.start(config(chain=IN_PLACE))
    r = gw.chat("gpt-4o")
    # primary, primary again, secondary: max_attempts (3) reached, tertiary never tried.
    assert r.status == 500, r.text
    assert r.header("x-llm-attempts") == "3"
    assert (primary.request_count(), secondary.request_count(), tertiary.request_count()) == (2, 1, 0)
    # One fallback (primary to secondary), as the metric counts it.
    assert r.header("x-llm-fallback-count") == "1"
    assert r.header("x-llm-fallback-reason") == "server_error"
    assert [v for _, v in prometheus_samples(gw.prometheus(),
                                             "llm_failover_fallbacks_total")] == [1]


@needs_router
def test_a_refused_connection_is_retried_in_place_then_moves_on(three):
    # Envoy opens the retry's connection as it starts the attempt: a refused connection is
    # retried in place at once (README "Time limits").
    gateway, primary, secondary, _ = three
    primary.down()
    gw = gateway.start(config(chain=IN_PLACE))
    r = gw.chat("gpt-4o")
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-attempts") == "3"
    assert attempts(gw).get((("outcome", "connection_error"), ("provider", "primary"))) == 2


@needs_router
def test_a_timeout_is_never_retried_in_place(three):
    gateway, primary, secondary, _ = three
    primary.set_default(action="hang")
    gw = gateway.start(config(timeouts="{attempt: 1s}", chain=IN_PLACE))
    r = gw.chat("gpt-4o")
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-fallback-reason") == "timeout"
    assert primary.request_count() == 1


# ---------------------------------------------------------------------------------------------
# First-token timeout (behaviour.md 5: streamed attempts only; output, not the role chunk).

FIRST_TOKEN = "{first_token: 1s}"
needs_hold = pytest.mark.skipif(
    not harness.holds_answers(),
    reason="Envoy 1.36 never holds an answer (1.36.4 crashes retrying a held answer): only "
           "the headers part of the first-token timeout applies there")


def chunk(delta, finish=None):
    return "data: " + json.dumps({
        "id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n\n"


@needs_hold
def test_a_stream_with_no_output_in_time_falls_over_as_a_timeout(three):
    gateway, primary, secondary, _ = three
    # The role chunk comes at once, the first token only after 3 s.
    primary.set_default(status=200, stream=True, chunk_interval_ms=3000, events=[
        chunk({"role": "assistant", "content": ""}), chunk({"content": "late"}, "stop"),
        "data: [DONE]\n\n"])
    gw = gateway.start(config(timeouts=FIRST_TOKEN))
    started = time.monotonic()
    r = gw.chat("gpt-4o", stream=True)
    took = time.monotonic() - started
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-fallback-reason") == "timeout"
    assert "secondary:0" in r.text and "late" not in r.text
    assert took < 2.5, took
    assert attempts(gw).get((("outcome", "timeout"), ("provider", "primary"))) == 1


def test_a_stream_whose_headers_do_not_come_in_time_falls_over(three):
    gateway, primary, secondary, _ = three
    primary.set_default(delay_ms=4000)
    gw = gateway.start(config(timeouts=FIRST_TOKEN))
    started = time.monotonic()
    r = gw.chat("gpt-4o", stream=True)
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-fallback-reason") == "timeout"
    assert time.monotonic() - started < 2.5
    assert attempts(gw).get((("outcome", "timeout"), ("provider", "primary"))) == 1


@needs_hold
def test_the_first_token_timeout_cuts_a_non_streamed_request_whose_answer_does_not_start(three):
    # A request that did not ask for a stream is streamed from the provider under
    # first_token (it used to wait for the attempt timeout), and answered as one JSON answer.
    gateway, primary, secondary, _ = three
    primary.set_default(delay_ms=2000)
    gw = gateway.start(config(timeouts=FIRST_TOKEN))
    r = gw.chat("gpt-4o")
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "secondary"
    assert r.header("x-llm-fallback-reason") == "timeout"
    assert r.json()["choices"][0]["message"]["content"].startswith("secondary:0 ")


def test_the_first_token_timeout_never_cuts_a_stream_that_started(three):
    gateway, primary, secondary, _ = three
    primary.set_default(status=200, stream=True, chunks=3, chunk_interval_ms=1500)
    gw = gateway.start(config(timeouts=FIRST_TOKEN))
    r = gw.chat("gpt-4o", stream=True)
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "primary"
    assert "primary:2" in r.text and "data: [DONE]" in r.text
    assert secondary.request_count() == 0


# ---------------------------------------------------------------------------------------------
# Every wait within the budget (behaviour.md 5).

def test_an_attempt_waits_at_most_what_is_left_of_the_budget(three):
    gateway, primary, secondary, tertiary = three
    primary.set_default(action="hang")
    secondary.set_default(action="hang")
    gw = gateway.start(config(timeouts="{attempt: 2s, budget: 3s, min_remaining: 500ms}"))
    started = time.monotonic()
    r = gw.chat("gpt-4o")
    took = time.monotonic() - started
    assert r.status == 504, r.text
    assert r.json()["error"]["code"] == "budget_exhausted" or "budget" in r.text
    assert took < 3.5, f"the caller waited {took:.2f} s for a 3 s budget"
    assert tertiary.request_count() == 0
    assert (primary.request_count(), secondary.request_count()) == (1, 1)


# ---------------------------------------------------------------------------------------------
# Honest ends (behaviour.md 5): a stream that breaks after bytes reached the caller never looks complete.

def test_a_stream_cut_short_ends_with_an_error_frame_for_openai_callers(three):
    gateway, primary, secondary, _ = three
    primary.set_default(status=200, stream=True, events=[
        chunk({"role": "assistant", "content": ""}), chunk({"content": "half an ans"})])
    gw = gateway.start(config())
    r = gw.chat("gpt-4o", stream=True)
    assert r.status == 200, r.text
    assert "half an ans" in r.text
    last = [e for e in r.text.split("\n\n") if e.strip()][-1]
    assert last.startswith("data: ")
    assert json.loads(last[len("data: "):])["error"]["code"] == "stream_cut_short"
    # The OpenAI SDK raises on it instead of returning a truncated answer.
    openai = pytest.importorskip("openai")  # not in the docker-compose run's test image
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-caller", max_retries=0)
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True):
            pass
    assert secondary.request_count() == 0, "bytes reached the caller: no failover"


def test_a_stream_cut_short_ends_with_an_error_event_for_messages_callers(three):
    gateway, primary, _, _ = three
    start = ('event: message_start\ndata: {"type": "message_start", "message": {"id": "msg_1", '
             '"type": "message", "role": "assistant", "content": [], "model": "m", '
             '"stop_reason": null, "usage": {"input_tokens": 5, "output_tokens": 1}}}\n\n')
    delta = ('event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
             '"delta": {"type": "text_delta", "text": "half"}}\n\n')
    primary.set_default(status=200, stream=True, events=[start, delta])
    gw = gateway.start(config())
    r = gw.post("/v1/messages", json={"model": "claude-x", "max_tokens": 10, "stream": True,
                                      "messages": [{"role": "user", "content": "hi"}]})
    assert r.status == 200, r.text
    last = [e for e in r.text.split("\n\n") if e.strip()][-1]
    assert last.startswith("event: error\n"), r.text
    assert json.loads(last.split("data: ", 1)[1])["type"] == "error"


def test_a_stream_ended_with_its_final_chunk_but_no_done_passes_unchanged(three):
    gateway, primary, _, _ = three
    events = [chunk({"role": "assistant", "content": ""}), chunk({"content": "whole"}, "stop")]
    primary.set_default(status=200, stream=True, events=events)
    gw = gateway.start(config())
    r = gw.chat("gpt-4o", stream=True)
    assert r.status == 200, r.text
    assert r.text == "".join(events)


@pytest.mark.parametrize("abort", ["reset", "close"])
def test_a_stream_broken_after_bytes_reached_the_caller_raises_in_the_client(three, abort):
    # Envoy resets the caller's stream: the filter gets no callback to write in (README).
    gateway, primary, secondary, _ = three
    primary.set_default(status=200, stream=True, chunks=5, chunk_interval_ms=100,
                        abort_after_chunks=2, abort=abort)
    gw = gateway.start(config())
    openai = pytest.importorskip("openai")  # not in the docker-compose run's test image
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-caller", max_retries=0)
    with pytest.raises(Exception):
        for _ in client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True):
            pass
    assert secondary.request_count() == 0


def test_a_stream_stalled_after_bytes_reached_the_caller_raises_in_the_client(three):
    gateway, primary, secondary, _ = three
    primary.set_default(status=200, stream=True, chunks=5, chunk_interval_ms=100,
                        abort_after_chunks=2, abort="hang")
    gw = gateway.start(config(timeouts="{stall: 1s}"))
    openai = pytest.importorskip("openai")  # not in the docker-compose run's test image
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-caller", max_retries=0,
                           timeout=10)
    started = time.monotonic()
    with pytest.raises(Exception):
        for _ in client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True):
            pass
    assert time.monotonic() - started < 5
