"""Self-tests of the mock provider and the raw HTTP client, over real sockets."""
from __future__ import annotations

import hashlib
import http.client
import json
import socket
import time

import pytest

import mock_api_rules
from harness import (HarnessError, NoResponse, ResponseTimeout, http_request, wait_until)

CHAT = "/v1/chat/completions"


def chat_body(model="gpt-4o-mini", stream=False, **extra):
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}
    if stream:
        body["stream"] = True
    return body


@pytest.fixture
def local_mocks(mock_factory):
    """These tests exercise the mock itself: always local, even in external mode."""
    return lambda *names, mode=None: mock_factory(*names, mode=mode, local=True)


@pytest.fixture
def mock(local_mocks):
    return local_mocks("alpha")


def test_default_json_answer(mock):
    r = http_request(mock.url, "POST", CHAT, json=chat_body("claude-3-haiku"))
    assert r.status == 200 and r.complete
    assert r.header("content-length") == str(len(r.body))
    assert r.header("transfer-encoding") is None
    assert r.header("x-mock-provider") == "alpha"
    doc = r.json()
    assert doc["object"] == "chat.completion"
    assert doc["model"] == "claude-3-haiku"
    assert doc["choices"][0]["message"]["content"] == "Hello from alpha (model claude-3-haiku)"


def test_keep_alive_connection_reuse(mock):
    conn = http.client.HTTPConnection("127.0.0.1", mock.port, timeout=5)
    try:
        for i in range(3):
            conn.request("POST", f"/v1/any/{i}", body=json.dumps(chat_body()),
                         headers={"content-type": "application/json"})
            resp = conn.getresponse()
            assert resp.status == 200
            resp.read()
    finally:
        conn.close()
    recs = mock.requests()
    assert [r["path"] for r in recs] == ["/v1/any/0", "/v1/any/1", "/v1/any/2"]
    assert len({r["connection"] for r in recs}) == 1


def test_status_headers_and_error_body(mock):
    mock.enqueue(status=429, headers={"Retry-After": "7", "x-ratelimit-reset-requests": "1h"})
    r = http_request(mock.url, "POST", CHAT, json=chat_body())
    assert r.status == 429
    assert r.header("retry-after") == "7"
    assert r.header("x-ratelimit-reset-requests") == "1h"
    err = r.json()["error"]
    assert err["type"] == "rate_limit_error" and err["code"] == "rate_limit_exceeded"
    # queue consumed: next request gets the default answer
    assert http_request(mock.url, "POST", CHAT, json=chat_body()).status == 200


def test_custom_body_error_override_and_repeated_headers(mock):
    mock.enqueue({"status": 503, "body": "upstream busy", "content_type": "text/plain",
                  "headers": [["x-a", "1"], ["x-a", "2"]]},
                 {"status": 529, "error": {"message": "try later", "code": "custom"}},
                 {"status": 200, "body": {"ok": True}})
    r = http_request(mock.url, "POST", CHAT, json=chat_body())
    assert (r.status, r.text, r.header("content-type"), r.header("x-a")) == \
        (503, "upstream busy", "text/plain", "1, 2")
    r = http_request(mock.url, "POST", CHAT, json=chat_body())
    assert r.status == 529 and r.json()["error"]["message"] == "try later"
    assert r.json()["error"]["code"] == "custom"
    assert http_request(mock.url, "POST", CHAT, json=chat_body()).json() == {"ok": True}


def test_queue_before_default_and_times(mock):
    mock.set_default(status=503)
    assert mock.enqueue(status=200, times=2) == 2
    got = [http_request(mock.url, "POST", CHAT, json=chat_body()).status for _ in range(4)]
    assert got == [200, 200, 503, 503]
    assert [r["behaviour"].get("status") for r in mock.requests()] == [200, 200, 503, 503]


def test_delay_before_headers(mock):
    mock.enqueue(delay_ms=300)
    r = http_request(mock.url, "POST", CHAT, json=chat_body())
    assert r.status == 200 and r.t_headers >= 0.29
    fast = http_request(mock.url, "POST", CHAT, json=chat_body())
    assert fast.t_headers < 0.2


def test_hang_until_client_goes_away(mock):
    mock.enqueue(action="hang")
    with pytest.raises(ResponseTimeout) as ei:
        http_request(mock.url, "POST", CHAT, json=chat_body(), timeout=0.5)
    assert ei.value.partial is None
    (rec,) = mock.wait_settled()
    assert rec["client_gone"] and rec["outcome"] == "client_gone"
    assert rec["completed_time"] - rec["time"] >= 0.45


def test_delay_noticing_client_gone(mock):
    mock.enqueue(delay_ms=5000)
    with pytest.raises(ResponseTimeout):
        http_request(mock.url, "POST", CHAT, json=chat_body(), timeout=0.3)
    (rec,) = mock.wait_settled(timeout=2)
    assert rec["client_gone"]


@pytest.mark.parametrize("action", ["close", "reset"])
def test_close_or_reset_without_answer(mock, action):
    mock.enqueue(action=action)
    with pytest.raises(NoResponse):
        http_request(mock.url, "POST", CHAT, json=chat_body())
    assert mock.wait_settled()[0]["outcome"] == ("closed" if action == "close" else "reset")
    assert http_request(mock.url, "POST", CHAT, json=chat_body()).status == 200


def test_sse_stream_timing(mock):
    mock.enqueue(chunks=4, chunk_interval_ms=100)
    r = http_request(mock.url, "POST", CHAT, json=chat_body("m1", stream=True))
    assert r.status == 200 and r.complete
    assert r.header("content-type") == "text/event-stream"
    assert r.header("transfer-encoding") == "chunked" and r.header("content-length") is None
    events = r.sse_events()
    assert [d for _, d in events][-1] == "[DONE]"
    data = r.sse_data()[:-1]
    assert len(data) == 4
    assert all(d["object"] == "chat.completion.chunk" and d["model"] == "m1" for d in data)
    assert data[0]["choices"][0]["delta"]["role"] == "assistant"
    assert data[-1]["choices"][0]["finish_reason"] == "stop"
    assert r.sse_content() == "alpha:0 alpha:1 alpha:2 alpha:3 "
    times = [t for t, _ in events[:4]]
    assert times[0] < 0.09  # first chunk right after the headers
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(0.08 <= g <= 0.3 for g in gaps), gaps


def test_sse_first_chunk_delay(mock):
    mock.enqueue(chunks=1, first_chunk_delay_ms=250)
    r = http_request(mock.url, "POST", CHAT, json=chat_body(stream=True))
    assert r.t_headers < 0.15 and r.sse_events()[0][0] >= 0.24


@pytest.mark.parametrize("abort,error", [("reset", {"reset", "eof"}), ("close", {"eof"})])
def test_sse_abort_after_n_chunks(mock, abort, error):
    mock.enqueue(chunks=5, chunk_interval_ms=20, abort_after_chunks=2, abort=abort)
    r = http_request(mock.url, "POST", CHAT, json=chat_body(stream=True))
    assert r.status == 200 and not r.complete and r.error in error
    assert r.sse_content() == "alpha:0 alpha:1 "
    assert "[DONE]" not in r.text
    assert mock.wait_settled()[0]["outcome"] == "aborted"


def test_sse_abort_right_after_headers(mock):
    mock.enqueue(abort_after_chunks=0)
    r = http_request(mock.url, "POST", CHAT, json=chat_body(stream=True))
    assert r.status == 200 and not r.complete and r.body == b""


def test_sse_stall_hang(mock):
    mock.enqueue(chunks=5, abort_after_chunks=1, abort="hang")
    with pytest.raises(ResponseTimeout) as ei:
        http_request(mock.url, "POST", CHAT, json=chat_body(stream=True), timeout=0.5)
    part = ei.value.partial
    assert part is not None and part.status == 200 and part.sse_content() == "alpha:0 "
    assert mock.wait_settled()[0]["client_gone"]


def test_stream_overrides(mock):
    mock.enqueue({"stream": False}, {"stream": True, "chunks": 2}, {"status": 429})
    assert http_request(mock.url, "POST", CHAT, json=chat_body(stream=True)).json()["object"] \
        == "chat.completion"
    assert http_request(mock.url, "POST", CHAT, json=chat_body()).sse_content() == \
        "alpha:0 alpha:1 "
    r = http_request(mock.url, "POST", CHAT, json=chat_body(stream=True))
    assert r.status == 429 and r.header("content-type") == "application/json"  # like OpenAI


def test_listener_down_refuses_then_up_again(mock):
    conn = http.client.HTTPConnection("127.0.0.1", mock.port, timeout=5)
    conn.request("POST", CHAT, body=json.dumps(chat_body()))
    conn.getresponse().read()
    assert mock.health()["open_connections"] == 1
    h = mock.down()
    assert h["listener_up"] is False
    with pytest.raises(ConnectionRefusedError):
        http_request(mock.url, "POST", CHAT, json=chat_body(), timeout=2)
    # the pooled keep-alive connection was shut as well
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        conn.request("POST", CHAT, body=json.dumps(chat_body()))
        conn.getresponse().read()
    conn.close()
    assert mock.up()["listener_up"] is True
    assert http_request(mock.url, "POST", CHAT, json=chat_body()).status == 200
    assert mock.health()["port"] == mock.port


def test_request_recording(mock):
    t0 = time.time()
    http_request(mock.url, "POST", CHAT, json=chat_body("rec-model"),
                 headers=[("Authorization", "Bearer k1"), ("X-Dup", "a"), ("X-Dup", "b")])
    binary = bytes(range(256)) * 4
    http_request(mock.url, "PUT", "/bin?q=1", body=binary,
                 headers={"content-type": "application/octet-stream"})
    r1, r2 = mock.requests()
    assert (r1["id"], r1["method"], r1["path"], r1["provider"]) == (1, "POST", CHAT, "alpha")
    assert ["Authorization", "Bearer k1"] in r1["headers"]
    assert [v for k, v in r1["headers"] if k.lower() == "x-dup"] == ["a", "b"]
    assert json.loads(r1["body"])["model"] == "rec-model"
    assert t0 - 1 <= r1["time"] <= r1["completed_time"] <= time.time()
    assert r1["outcome"] == "responded" and r1["client_gone"] is False
    assert r2["path"] == "/bin?q=1" and "body" not in r2
    assert r2["body_size"] == len(binary)
    assert r2["body_sha256"] == hashlib.sha256(binary).hexdigest()
    import base64
    assert base64.b64decode(r2["body_b64"]) == binary
    assert [r["id"] for r in mock.requests(since=1)] == [2]
    assert "body_b64" not in mock.requests(bodies=False)[1]


def test_chunked_and_large_request_bodies(mock):
    big = b"x" * (3 * 1024 * 1024 + 17)
    http_request(mock.url, "POST", CHAT, body=big)
    with socket.create_connection(("127.0.0.1", mock.port), timeout=5) as s:
        s.sendall(b"POST /chunked HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n"
                  b"connection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 200 OK")
    r_big, r_chunked = mock.wait_requests(2)
    assert r_big["body_size"] == len(big)
    assert mock.requests()[1]["body"] == "hello world"


def test_reset_clears_everything(mock):
    mock.set_default(status=500)
    mock.enqueue(status=404)
    mock.down()
    h = mock.reset()
    assert h["listener_up"] and h["queue_length"] == 0 and h["request_count"] == 0
    r = http_request(mock.url, "POST", CHAT, json=chat_body())
    assert r.status == 200 and mock.requests()[0]["id"] == 1


def test_control_api_rejects_bad_input(mock):
    with pytest.raises(HarnessError, match="unknown behaviour field"):
        mock.enqueue(stauts=500)
    with pytest.raises(HarnessError, match="status"):
        mock.set_default(status=99)
    with pytest.raises(HarnessError, match="times"):
        mock.set_default(times=2)
    with pytest.raises(HarnessError, match="action"):
        mock.enqueue(action="explode")
    assert mock.health()["queue_length"] == 0


def test_mocks_are_independent(local_mocks):
    a, b = local_mocks("a", "b")
    a.set_default(status=502)
    assert http_request(a.url, "POST", CHAT, json=chat_body()).status == 502
    r = http_request(b.url, "POST", CHAT, json=chat_body())
    assert r.status == 200 and r.header("x-mock-provider") == "b"
    assert a.request_count() == 1 and b.request_count() == 1


def test_standalone_process(local_mocks):
    m = local_mocks("proc", mode="process")
    m.enqueue(status=418)
    assert http_request(m.url, "POST", CHAT, json=chat_body()).status == 418
    r = http_request(m.url, "POST", CHAT, json=chat_body("x"))
    assert r.json()["choices"][0]["message"]["content"] == "Hello from proc (model x)"
    assert m.request_count() == 2
    m.stop()
    with pytest.raises(OSError):
        http_request(m.url, "POST", CHAT, json=chat_body(), timeout=1)


# ------------------------------------------------- the two APIs, as the translation tests need

MESSAGES = "/v1/messages"
AV = {"anthropic-version": "2023-06-01"}
TOOL = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}


def messages_body(**extra):
    return {"model": "claude-x", "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}], **extra}


@pytest.mark.parametrize("body,headers,says", [
    ({"model": "c", "messages": [{"role": "user", "content": "hi"}]}, AV,
     "max_tokens: Field required"),
    (messages_body(n=1), AV, "n: Extra inputs are not permitted"),
    (messages_body(stream_options={"include_usage": True}), AV,
     "stream_options: Extra inputs are not permitted"),
    (messages_body(messages=[{"role": "system", "content": "be brief"},
                             {"role": "user", "content": "hi"}]), AV, 'Unexpected role "system"'),
    (messages_body(messages=[{"role": "tool", "tool_call_id": "x", "content": "1"}]), AV,
     "messages.0.role: Input should be 'user' or 'assistant'"),
    (messages_body(messages=[
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call.1", "name": "f",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call.1",
                                      "content": "1"}]}]), AV,
     "messages.1.content.0.tool_use.id: String should match pattern"),
    (messages_body(messages=[
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f",
                                           "input": {}}]},
        {"role": "user", "content": "and?"}]), AV,
     "`tool_use` ids were found without `tool_result` blocks"),
    (messages_body(messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]), AV,
     "Input tag 'image_url'"),
    (messages_body(temperature=1.5), AV, "temperature: Input should be less than or equal to 1"),
    (messages_body(), {}, "anthropic-version: header is required"),
])
def test_strict_anthropic_refuses_what_messages_refuses(mock, body, headers, says):
    mock.set_default(strict=True)
    r = http_request(mock.url, "POST", MESSAGES, json=body, headers=headers)
    assert r.status == 400, r.text
    doc = r.json()
    assert doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error"
    assert says in doc["error"]["message"]
    assert says in mock.last_request()["rejected"]


def test_strict_anthropic_takes_a_valid_tool_round_trip(mock):
    mock.set_default(strict=True)
    body = messages_body(system="be brief", stop_sequences=["END"], temperature=0.5,
                         tools=[{"name": "f", "input_schema": {"type": "object"}}],
                         tool_choice={"type": "auto"}, messages=[
        {"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBORw0KGgo="}}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1-a", "name": "f",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1-a",
                                      "content": "1"}]}])
    r = http_request(mock.url, "POST", MESSAGES, json=body, headers=AV)
    assert r.status == 200 and r.json()["type"] == "message", r.text
    assert mock.last_request()["rejected"] is None


@pytest.mark.parametrize("body,says", [
    (chat_body(system="be brief"), "Unrecognized request argument supplied: system"),
    (chat_body(top_k=5), "Unrecognized request argument supplied: top_k"),
    (chat_body(stop_sequences=["x"]), "Unrecognized request argument supplied: stop_sequences"),
    (chat_body(messages=[{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "1"}]}]),
     "Invalid value: 'tool_result'"),
    (chat_body(messages=[{"role": "user", "content": "hi"},
                         {"role": "tool", "tool_call_id": "t1", "content": "1"}]),
     "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'"),
    (chat_body(messages=[{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "t1", "type": "function",
                              "function": {"name": "f", "arguments": {}}}]},
                         {"role": "tool", "tool_call_id": "t1", "content": "1"}]),
     "expected a string, but got an object"),
    (chat_body(stream_options={"include_usage": True}), "only allowed when 'stream' is enabled"),
    (chat_body(messages=[{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "call_1__thought__" + "A" * 24, "type": "function",
                              "function": {"name": "f", "arguments": "{}"}}]}]),
     "Invalid 'messages[1].tool_calls[0].id': string too long. Expected a string with maximum "
     "length 40, but got a string with length 41 instead."),
])
def test_strict_openai_refuses_anthropic_shapes(mock, body, says):
    mock.set_default(strict=True)
    r = http_request(mock.url, "POST", CHAT, json=body)
    assert r.status == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and says in err["message"]


def _with_reasoning(**item):
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    return {"model": "gpt-5", "store": False, "input": [
        {"role": "user", "content": "hi"}, {"type": "reasoning", **item}, call,
        {"type": "function_call_output", "call_id": "c1", "output": "1"}]}


RS = {"id": "rs_1", "summary": [{"type": "summary_text", "text": "t"}]}


@pytest.mark.parametrize("body,says", [
    (_with_reasoning(summary=[], encrypted_content="x"),
     "Missing required parameter: 'input[1].id'"),
    (_with_reasoning(id="rs_1", encrypted_content=mock_api_rules.encrypted("rs_1")),
     "Missing required parameter: 'input[1].summary'"),
    (_with_reasoning(**RS), "Item with id 'rs_1' not found. Items are not persisted when "
                            "`store` is set to false"),
    (_with_reasoning(**RS, encrypted_content="llm-failover:anthropic:EqQB"),
     "The encrypted content for item rs_1 could not be verified."),
    ({"model": "gpt-5", "input": [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", **RS, "encrypted_content": mock_api_rules.encrypted("rs_1")},
        {"role": "user", "content": "and?"}]},
     "Item 'rs_1' of type 'reasoning' was provided without its required following item."),
])
def test_strict_responses_refuses_a_reasoning_item_it_cannot_read(mock, body, says):
    mock.set_default(strict=True)
    r = http_request(mock.url, "POST", "/v1/responses", json=body)
    assert r.status == 400, r.text
    assert says in r.json()["error"]["message"]
    good = _with_reasoning(**RS, encrypted_content=mock_api_rules.encrypted("rs_1"))
    assert http_request(mock.url, "POST", "/v1/responses", json=good).status == 200


def test_strict_is_off_by_default(mock):
    r = http_request(mock.url, "POST", MESSAGES, json={"model": "c", "messages": []})
    assert r.status == 200 and mock.last_request()["rejected"] is None


def test_tool_call_answers_in_both_apis(mock):
    mock.set_default(tool_calls=[{"id": "call_9", **TOOL}],
                     usage={"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34,
                            "prompt_tokens_details": {"cached_tokens": 20}})
    doc = http_request(mock.url, "POST", CHAT, json=chat_body()).json()
    choice = doc["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    call = choice["message"]["tool_calls"][0]
    assert call["id"] == "call_9" and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == TOOL["arguments"]
    assert doc["usage"]["prompt_tokens_details"]["cached_tokens"] == 20
    mock.set_default(tool_calls=[{"id": "toolu_9", **TOOL}], content="Let me look.")
    doc = http_request(mock.url, "POST", MESSAGES, json=messages_body(), headers=AV).json()
    assert doc["stop_reason"] == "tool_use"
    assert doc["content"] == [{"type": "text", "text": "Let me look."},
                              {"type": "tool_use", "id": "toolu_9", "name": "get_weather",
                               "input": TOOL["arguments"]}]


def test_streamed_openai_tool_call_split_across_deltas_and_usage_when_asked(mock):
    mock.set_default(tool_calls=[TOOL])
    r = http_request(mock.url, "POST", CHAT, json=chat_body(
        stream=True, stream_options={"include_usage": True}))
    data = r.sse_data()
    assert data[-1] == "[DONE]"
    deltas = [c["choices"][0]["delta"] for c in data[:-1] if c["choices"]]
    pieces = [d["tool_calls"][0]["function"]["arguments"] for d in deltas if "tool_calls" in d]
    assert len([p for p in pieces if p]) == 3
    assert json.loads("".join(pieces)) == TOOL["arguments"]
    assert deltas[0]["tool_calls"][0]["id"] == "call_mock_0"
    assert [c["choices"][0]["finish_reason"] for c in data[:-1] if c["choices"]][-1] \
        == "tool_calls"
    assert data[-2]["choices"] == [] and data[-2]["usage"]["total_tokens"] == 12
    # Not asked: no usage chunk, as OpenAI.
    r = http_request(mock.url, "POST", CHAT, json=chat_body(stream=True))
    assert all("usage" not in c for c in r.sse_data()[:-1])


@pytest.mark.parametrize("where", ["start", "delta", "both"])
def test_streamed_anthropic_tool_use_and_usage_events(mock, where):
    usage = {"input_tokens": 11, "cache_read_input_tokens": 40,
             "cache_creation_input_tokens": 3, "output_tokens": 9}
    mock.set_default(tool_calls=[TOOL], chunks=1, usage=usage, usage_events=where)
    r = http_request(mock.url, "POST", MESSAGES, json=messages_body(stream=True), headers=AV)
    data = r.sse_data()
    kinds = [d["type"] for d in data]
    assert kinds == ["message_start", "content_block_start", "content_block_delta",
                     "content_block_stop", "content_block_start", "content_block_delta",
                     "content_block_delta", "content_block_delta", "content_block_stop",
                     "message_delta", "message_stop"]
    assert data[4]["content_block"]["type"] == "tool_use" and data[4]["index"] == 1
    assert json.loads("".join(d["delta"]["partial_json"] for d in data[5:8])) \
        == TOOL["arguments"]
    assert data[-2]["delta"]["stop_reason"] == "tool_use"
    start, end = data[0]["message"]["usage"], data[-2]["usage"]
    if where == "start":
        assert start["cache_read_input_tokens"] == 40 and end == {"output_tokens": 9}
    elif where == "delta":
        assert start == {"input_tokens": 0, "output_tokens": 0} and end == usage
    else:
        assert start["input_tokens"] == 11 and end == usage


def test_chunk_bytes_cuts_events_anywhere(mock):
    whole = http_request(mock.url, "POST", MESSAGES, json=messages_body(stream=True))
    mock.set_default(chunk_bytes=7, chunk_interval_ms=2)
    cut = http_request(mock.url, "POST", MESSAGES, json=messages_body(stream=True))
    assert len(cut.chunks) >= len(cut.body) // 7 // 2  # the client saw them apart (mostly)
    assert [d["type"] for d in cut.sse_data()] == [d["type"] for d in whole.sse_data()]
    assert cut.body.replace(b"_2", b"_1") == whole.body


def test_records_keep_the_usage_an_answer_sent_whole_and_a_request_may_choose_its_behaviour(mock):
    usage = {"input_tokens": 3, "output_tokens": 4, "cache_read_input_tokens": 5}
    mock.enqueue({"usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}},
                 {"abort_after_chunks": 1}, {"status": 500})
    assert http_request(mock.url, "POST", CHAT, json=chat_body()).status == 200
    assert not http_request(mock.url, "POST", CHAT, json=chat_body(stream=True)).complete
    assert http_request(mock.url, "POST", CHAT, json=chat_body()).status == 500
    # A stream that did not ask for usage carries none; one that asked does.
    http_request(mock.url, "POST", CHAT, json=chat_body(stream=True))
    http_request(mock.url, "POST", CHAT, json=chat_body(
        stream=True, stream_options={"include_usage": True}))
    # x-mock-behaviour: this request's own behaviour, the queue left alone.
    mock.enqueue({"status": 503})
    own = json.dumps({"usage": usage, "chunks": 1})
    r = http_request(mock.url, "POST", "/v1/messages", json=chat_body(stream=True),
                     headers={"x-mock-behaviour": own})
    assert r.status == 200 and b"message_stop" in r.body
    assert http_request(mock.url, "POST", CHAT, json=chat_body()).status == 503
    want = [
        {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}, None, None, None,
        {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}, usage, None]
    # A stream's usage is recorded once its last chunk is written, which on a loaded machine
    # may come after the client read message_stop: poll the records (seen failing in a run).
    got = []

    def recorded():
        got[:] = [r["usage"] for r in mock.requests()]
        return got == want
    try:
        wait_until(recorded, 5, "the records' usage")
    except HarnessError:
        pass
    assert got == want


# ------------------------------------------------- Gemini's native API, as README's mock runs

def _standalone(*args: str):
    """The mock as README starts it (its own process, its command line): the process and the
    ports it printed."""
    import subprocess
    import sys

    from harness import REPO_ROOT, _spawn
    p = _spawn([sys.executable, str(REPO_ROOT / "tests/integration/mock_provider.py"), *args],
               stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line, "the mock printed its ports"
    return p, json.loads(line)


def test_a_google_genai_stream_from_the_mock_is_a_real_sse_stream_and_a_wrong_key_a_400():
    genai = pytest.importorskip("google.genai")  # not in the compose harness's image
    from google.genai import errors, types

    from harness import _terminate
    p, ports = _standalone("--name", "gemini", "--gemini-key", "k-good")
    try:
        def client(key):
            return genai.Client(api_key=key, http_options=types.HttpOptions(
                base_url=f"http://127.0.0.1:{ports['port']}", api_version="v1beta",
                retry_options=types.HttpRetryOptions(attempts=1)))
        good = client("k-good")
        chunks = list(good.models.generate_content_stream(
            model="gemini-2.5-flash", contents="hi"))
        assert len(chunks) == 3, chunks
        assert "".join(c.text for c in chunks) == "gemini:0 gemini:1 gemini:2 "
        assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
        whole = good.models.generate_content(model="gemini-2.5-flash", contents="hi")
        assert whole.text == "Hello from gemini (model gemini-2.5-flash)"
        wrong = client("k-wrong")  # kept: the client closes when collected
        with pytest.raises(errors.ClientError) as e:
            wrong.models.generate_content(model="gemini-2.5-flash", contents="hi")
        assert e.value.code == 400 and e.value.status == "INVALID_ARGUMENT"
        assert e.value.details["error"]["details"][0]["reason"] == "API_KEY_INVALID"
    finally:
        _terminate(p)


def test_a_gemini_stream_path_streams_without_the_key_option(mock):
    # Without --gemini-key the mock answers any key, still as Gemini's API: the path says stream.
    r = http_request(mock.url, "POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
                     "?alt=sse", json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    assert r.status == 200 and r.header("content-type") == "text/event-stream"
    events = [json.loads(e[len("data: "):]) for e in r.text.split("\r\n\r\n") if e]
    assert [e["modelVersion"] for e in events] == ["gemini-2.5-flash"] * 3
    assert events[-1]["candidates"][0]["finishReason"] == "STOP"
