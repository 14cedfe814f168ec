#!/usr/bin/env python3
"""Programmable mock LLM provider (OpenAI Chat and Anthropic Messages, and more), stdlib only.

Two listeners per mock, both bound to 127.0.0.1 by default:

* the **provider port** speaks HTTP/1.1 (keep-alive, Content-Length for JSON,
  chunked transfer-encoding for SSE) and answers every request, whatever the
  method or path (``POST /v1/chat/completions`` is the one that matters);
* the **control port** is a small HTTP/JSON API that programs behaviours and
  reads back what the provider received.

Standalone::

    python mock_provider.py --port 18001 --control-port 19001 --name primary

prints one JSON line ``{"name": ..., "port": ..., "control_port": ..., "tls": ...}``
on stdout once both listeners are bound (port 0 = pick a free one), then serves
until SIGTERM/SIGINT.  In-process::

    m = MockProvider("primary").start()      # threads, ports picked at bind time
    m.enqueue({"status": 429, "headers": {"Retry-After": "5"}})
    ...
    m.stop()

Clouds (optional): ``MockProvider(name, cloud={"kind": "bedrock" | "vertex" | "azure", ...})``
checks each request's path, body and credentials the way that cloud does and answers Bedrock's
streams as AWS event streams (see ``cloud_mock.py``); a refused request's record gets
``rejected``.

TLS (optional): ``MockProvider(name, tls_cert=PEM, tls_key=PEM)`` or
``--tls-cert PEM --tls-key PEM`` serves the provider port over TLS (server side
of Python's ``ssl``; the control port stays plain HTTP).  ALPN offers
``http/1.1`` only (the mock never speaks h2).  Each request record then carries
``tls``: ``{"sni", "alpn", "version"}`` — the server name the client sent (null
without SNI), the negotiated ALPN protocol (null when none) and the TLS version;
plain connections have ``tls: null``.  Handshakes that fail (e.g. the client
rejects the certificate) are counted in ``/health`` ``tls_handshake_failures``
and the last few are listed in ``tls_handshake_errors`` (``{"sni", "error"}``).

Default answer
--------------
``200`` with an OpenAI ``chat.completion`` whose ``model`` echoes the request's
``model`` and whose message content is ``"Hello from <name> (model <model>)"``.
When the request JSON has ``"stream": true`` the answer is SSE instead:
``chunks`` events ``data: {chat.completion.chunk}\\n\\n`` (event *i* carries the
delta content ``"<name>:<i> "``; the first also carries ``role``, the last has
``finish_reason: "stop"``), then ``data: [DONE]\\n\\n``; one HTTP chunk per event.
The shape follows the request path's API: ``.../messages`` answers as Anthropic
(a ``message``; SSE ``message_start`` ... ``message_stop``; errors
``{"type": "error", "error": {...}}``), ``.../responses`` as the Responses API (a
``response``; typed SSE events ``response.created``, ``response.output_text.delta``,
``response.completed``), ``...:generateContent`` as Gemini's native API (a
``GenerateContentResponse``; ``...:streamGenerateContent`` streams, whatever the body says,
one ``data:`` chunk per event, as Google does with ``alt=sse``; ``--gemini-key KEY`` checks
the key, the path and the body as Google AI does), ``.../embeddings`` and ``.../completions``
as OpenAI's; anything else as chat completions. Streamed content event *i* always carries ``"<name>:<i> "``.
Every answer carries ``x-mock-provider: <name>`` and ``x-mock-request-id: <id>``.
Error statuses (>= 400) get an OpenAI error body
``{"error": {"message", "type", "code", "param": null}}`` (JSON even when the
request asked for a stream, as OpenAI does).

Behaviour objects (JSON; every field optional, unknown fields are refused)
-----------------------------------------------------------------------------
==========================  ==================================================
``status``                  HTTP status (default 200); any 100-599 code, 529 too
``headers``                 extra response headers: ``{"Retry-After": "5"}`` or
                            ``[["name", "value"], ...]`` (repeatable names)
``body``                    exact body: a string is sent as is, any other JSON
                            value is JSON-encoded; sent with Content-Length
``content_type``            Content-Type override
``error``                   fields merged into the generated error object
``content``                 assistant content override (JSON answer only)
``delay_ms``                wait before sending response headers
``action``                  ``respond`` (default) | ``hang`` (never answer, until
                            the client goes away) | ``close`` (FIN, no answer) |
                            ``reset`` (RST, no answer)
``stream``                  ``null`` follow the request's ``stream`` field;
                            ``true``/``false`` force SSE / JSON
``chunks``                  number of SSE chunk events (default 3)
``first_chunk_delay_ms``    wait after SSE headers before the first event
``chunk_interval_ms``       wait between two SSE events
``abort_after_chunks``      stop the stream after N events (0 = right after
                            the headers) and do ``abort`` instead of finishing
``abort``                   ``reset`` (default, RST) | ``close`` (FIN without the
                            last chunk) | ``hang`` (stall until client leaves)
``close_connection``        answer with ``Connection: close`` and close after
``events``                  SSE: send these raw strings as the events (one HTTP
                            chunk each, ``chunk_interval_ms`` apart) instead of
                            the generated chunks and ``[DONE]``
``preset``                  a provider's real error answer by name (see
                            ``PRESETS``: ``openai_context_length``,
                            ``azure_content_filter``, Bedrock's
                            ``bedrock_throttling``, ...); fields given next to
                            it override the preset's
``strict``                  answer ``400 invalid_request_error`` (in the API's
                            own error shape and wording) to a request the real
                            API refuses (``mock_api_rules.py``): on
                            ``.../messages`` no ``max_tokens``, a field Messages
                            does not take (OpenAI's ``n``, ``stream_options``,
                            ...), a ``system``/``tool`` role message, a tool id
                            outside ``^[a-zA-Z0-9_-]+$``, an unanswered
                            ``tool_use``, no ``anthropic-version`` header; on
                            ``.../chat/completions`` Anthropic-only fields and
                            blocks (``system``, ``top_k``, ``tool_result``), a
                            ``tool`` message answering no call, arguments that
                            are not a string; on ``.../responses`` a member the
                            Responses API does not take (a Chat body's
                            ``messages``), an unknown item or part type, a
                            ``function_call_output`` answering no call, a tool
                            not written flat. The record's ``rejected`` says why
``tool_calls``              ``[{"id"?, "name", "arguments"?, "signature"?}]``: the answer calls
                            these tools in the path's API (JSON: OpenAI
                            ``tool_calls`` / Anthropic ``tool_use`` blocks; SSE:
                            each call's arguments cut in three deltas); no text
                            unless ``content`` or ``chunks`` is given
``thinking``                Messages: the answer starts with a thinking block of
                            this text, signed (``mock_api_rules.signature``;
                            SSE: two ``thinking_delta`` and a ``signature_delta``).
                            Responses: with a ``reasoning`` item, this text its
                            summary, its ``encrypted_content``
                            (``mock_api_rules.encrypted``) only when the request
                            asks ``include: ["reasoning.encrypted_content"]``
                            (SSE: the summary in two deltas, as OpenAI's order)
``usage``                   the answer's usage object, in the path's API's own
                            field names (cache tokens included). OpenAI streams
                            carry it in a last chunk only when the request asks
                            ``stream_options.include_usage`` (as OpenAI does)
``usage_events``            Anthropic SSE: ``start`` (default: input and cache
                            tokens in ``message_start``, output tokens in
                            ``message_delta``), ``delta`` (all in
                            ``message_delta``), ``both`` (both, cumulative)
``stop_reason``             the answer's ``finish_reason`` / ``stop_reason``
``chunk_bytes``             SSE: cut the whole stream every N bytes, whatever the
                            event boundaries (one HTTP chunk each,
                            ``chunk_interval_ms`` apart)
``trailers``                SSE: end the chunked body with these HTTP trailers
                            (a dict; Envoy forwards them when the cluster's
                            ``http_protocol_options.enable_trailers`` is on)
``rate_limits``             the rate-limit headers a provider announces its quota
                            with: ``{"style": "openai" | "azure" | "anthropic",
                            "requests": N, "tokens": N, "reset_s": S}``
                            (``rate_limit_headers``): OpenAI's
                            ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``
                            with Go-duration resets (``1.5s``, ``6m0s``), Azure's
                            names with resets in whole seconds, Anthropic's
                            ``anthropic-ratelimit-{requests,tokens,input-tokens}-*``
                            with RFC 3339 resets (``reset_s`` from now)
``times``                   (``/enqueue`` only) repeat this behaviour N times
==========================  ==================================================

Each request consumes the head of the one-shot queue if any, else uses the
default behaviour (initially ``{}`` = the default answer). A request carrying a
header ``x-mock-behaviour`` (a behaviour object as JSON) gets that behaviour
instead and leaves the queue alone (a soak's callers choose their own answer so).

Control API (JSON in, JSON out)
-------------------------------
``GET  /health``     ``{"name", "port", "control_port", "listener_up",
                     "queue_length", "open_connections", "request_count",
                     "tls", "tls_handshake_failures", "tls_handshake_errors"}``
``GET  /requests``   ``{"name", "requests": [record, ...]}``; query
                     ``since=<id>`` (records with id > since), ``bodies=0``
                     (omit body fields)
``POST /reset``      clear records, queue and default behaviour, ids restart
                     at 1, listener brought up; answers ``/health``
``GET  /behaviour``  the default behaviour
``POST /behaviour``  set the default behaviour (body: behaviour object)
``POST /enqueue``    append a behaviour or a list of behaviours to the queue;
                     answers ``{"queue_length": n}``
``POST /listener``   ``{"up": false}`` closes the listening socket (connections
                     refused) and, unless ``"drop_connections": false``, shuts
                     every open connection; ``{"up": true}`` re-binds the same
                     port.  Answers ``/health``
Bad input answers 400 ``{"error": "..."}``.

Request record
--------------
``id`` (1, 2, ... per mock), ``provider``, ``connection`` (connection number:
equal numbers = a reused keep-alive connection), ``method``, ``path``,
``version``, ``headers`` (``[[name, value], ...]`` as received), ``body``
(text, when UTF-8) or ``body_b64`` (otherwise), ``body_size``,
``body_sha256``, ``time`` (epoch seconds when the request head arrived),
``completed_time`` (when the mock finished with it, or null while in flight),
``client_gone`` (the client went away while the mock delayed, hung or
streamed), ``tls`` (see TLS above), ``rejected`` (why ``strict`` refused it, else
null), ``usage`` (the usage object the answer reported, in its API's own
field names, once the whole answer was sent; null for an error, an answer cut
or an answer carrying none, such as an OpenAI stream not asking
``stream_options.include_usage``), ``outcome`` (``in_progress`` | ``responded`` | ``streamed`` | ``closed`` |
``reset`` | ``aborted`` | ``client_gone`` | ``dropped`` (listener taken down) |
``shutdown``), ``behaviour`` (the behaviour applied).
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import http
import http.server
import json
import select
import signal
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.parse
from itertools import count as itertools_count
from typing import Any

import cloud_mock
import converse_mock
import gemini_mock
import mock_api_rules

__all__ = ["MockProvider", "BehaviourError", "BEHAVIOUR_FIELDS"]

BEHAVIOUR_FIELDS = {
    "status", "headers", "body", "content_type", "error", "content", "delay_ms",
    "action", "stream", "chunks", "first_chunk_delay_ms", "chunk_interval_ms",
    "abort_after_chunks", "abort", "close_connection", "times", "events", "preset",
    "strict", "tool_calls", "usage", "usage_events", "stop_reason", "chunk_bytes",
    "trailers", "thinking", "rate_limits",
}
RATE_LIMIT_STYLES = {"openai", "azure", "anthropic"}
USAGE_EVENTS = {"start", "delta", "both"}
ACTIONS = {"respond", "hang", "close", "reset"}
ABORTS = {"reset", "close", "hang"}
MAX_HEAD = 64 * 1024
POLL = 0.05

ERROR_DEFAULTS = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("authentication_error", "invalid_api_key"),
    402: ("insufficient_quota", "insufficient_quota"),
    403: ("permission_error", "permission_denied"),
    404: ("invalid_request_error", "model_not_found"),
    408: ("timeout_error", "timeout"),
    413: ("invalid_request_error", "request_too_large"),
    422: ("invalid_request_error", "unprocessable_entity"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    500: ("server_error", "internal_error"),
    502: ("server_error", "bad_gateway"),
    503: ("server_error", "overloaded"),
    504: ("server_error", "gateway_timeout"),
    529: ("overloaded_error", "overloaded"),
}


# Providers' own error answers, as their APIs send them (behaviour.md 3): the gateway must recognise
# these by their bodies. Azure's message carries a typographic apostrophe (U+2019).
PRESETS: dict[str, dict] = {
    "openai_context_length": {"status": 400, "body": {"error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages "
                   "resulted in 8215 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "param": "messages",
        "code": "context_length_exceeded"}}},
    "anthropic_prompt_too_long": {"status": 400, "body": {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 208310 tokens > 200000 maximum"}}},
    "azure_content_filter": {"status": 400, "body": json.dumps({"error": {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI\u2019s "
                   "content management policy. Please modify your prompt and retry.",
        "type": None, "param": "prompt", "code": "content_filter", "status": 400,
        "innererror": {"code": "ResponsibleAIPolicyViolation", "content_filter_result": {
            "violence": {"filtered": True, "severity": "medium"}}}}}, ensure_ascii=False)},
    "openai_insufficient_quota": {"status": 429, "body": {"error": {
        "message": "You exceeded your current quota, please check your plan and billing "
                   "details.", "type": "insufficient_quota", "param": None,
        "code": "insufficient_quota"}}},
    "anthropic_overloaded_stream": {"status": 200, "stream": True, "events": [
        'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", '
        '"message": "Overloaded"}}\n\n']},
    "openai_error_stream": {"status": 200, "stream": True, "events": [
        'data: {"error": {"message": "The server had an error while processing your request.",'
        ' "type": "server_error", "param": null, "code": null}}\n\n']},
    **cloud_mock.bedrock_presets(),
}


class BehaviourError(ValueError):
    """A behaviour object that cannot be applied."""


def validate_behaviour(b: Any, allow_times: bool = False) -> dict:
    if not isinstance(b, dict):
        raise BehaviourError("a behaviour must be a JSON object")
    unknown = set(b) - BEHAVIOUR_FIELDS
    if unknown:
        raise BehaviourError(f"unknown behaviour field(s): {sorted(unknown)}")
    if "times" in b and not allow_times:
        raise BehaviourError("'times' is only valid in /enqueue")
    status = b.get("status", 200)
    if not isinstance(status, int) or not 100 <= status <= 599:
        raise BehaviourError("status must be an integer in 100-599")
    if b.get("action", "respond") not in ACTIONS:
        raise BehaviourError(f"action must be one of {sorted(ACTIONS)}")
    if b.get("abort", "reset") not in ABORTS:
        raise BehaviourError(f"abort must be one of {sorted(ABORTS)}")
    for k in ("delay_ms", "chunks", "first_chunk_delay_ms", "chunk_interval_ms", "times"):
        v = b.get(k)
        if v is not None and (not isinstance(v, (int, float)) or v < 0):
            raise BehaviourError(f"{k} must be a non-negative number")
    a = b.get("abort_after_chunks")
    if a is not None and (not isinstance(a, int) or a < 0):
        raise BehaviourError("abort_after_chunks must be a non-negative integer or null")
    if b.get("stream") not in (None, True, False):
        raise BehaviourError("stream must be true, false or null")
    if "error" in b and not isinstance(b["error"], dict):
        raise BehaviourError("error must be an object")
    if "preset" in b and b["preset"] not in PRESETS:
        raise BehaviourError(f"preset must be one of {sorted(PRESETS)}")
    ev = b.get("events")
    if ev is not None and not (isinstance(ev, list) and all(isinstance(e, str) for e in ev)):
        raise BehaviourError("events must be a list of strings")
    calls = b.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list) or not all(
                isinstance(c, dict) and isinstance(c.get("name"), str)
                and set(c) <= {"id", "name", "arguments", "signature"} for c in calls):
            raise BehaviourError(
                "tool_calls must be a list of {id?, name, arguments?, signature? (Gemini)}")
    if "usage" in b and not isinstance(b["usage"], dict):
        raise BehaviourError("usage must be an object")
    if "thinking" in b and not isinstance(b["thinking"], str):
        raise BehaviourError("thinking must be a string")
    if b.get("usage_events", "start") not in USAGE_EVENTS:
        raise BehaviourError(f"usage_events must be one of {sorted(USAGE_EVENTS)}")
    if "stop_reason" in b and not isinstance(b["stop_reason"], str):
        raise BehaviourError("stop_reason must be a string")
    cb = b.get("chunk_bytes")
    if cb is not None and (not isinstance(cb, int) or cb < 1):
        raise BehaviourError("chunk_bytes must be a positive integer")
    if b.get("strict") not in (None, True, False):
        raise BehaviourError("strict must be true or false")
    tr = b.get("trailers")
    if tr is not None and not (isinstance(tr, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in tr.items())):
        raise BehaviourError("trailers must be an object of strings")
    rl = b.get("rate_limits")
    if rl is not None:
        if not isinstance(rl, dict) or rl.get("style") not in RATE_LIMIT_STYLES or \
                not set(rl) <= {"style", "requests", "tokens", "reset_s"} or not all(
                    isinstance(rl.get(k, 0), (int, float)) and rl.get(k, 0) >= 0
                    for k in ("requests", "tokens", "reset_s")):
            raise BehaviourError("rate_limits must be {style: openai|azure|anthropic, "
                                 "requests?, tokens?, reset_s?} with numbers >= 0")
    normalise_headers(b.get("headers"))
    return dict(b)


def go_duration(seconds: float) -> str:
    """Seconds as Go's time.Duration prints them (OpenAI's resets): ``20ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(int(minutes), 60)
    text = f"{secs:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    return f"{minutes}m{text}" if minutes else text


def rate_limit_headers(rl: dict, now: float | None = None) -> list[tuple[str, str]]:
    """The headers a provider of ``rl["style"]`` announces ``requests`` and ``tokens`` left
    with, both resetting ``reset_s`` from ``now`` (default: the clock)."""
    requests, tokens = str(int(rl.get("requests", 100))), str(int(rl.get("tokens", 100000)))
    reset = float(rl.get("reset_s", 1))
    style = rl["style"]
    if style == "anthropic":
        at = (time.time() if now is None else now) + reset
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + \
            f".{int(at * 1000) % 1000:03d}Z"
        out = [("anthropic-ratelimit-requests-limit", "1000"),
               ("anthropic-ratelimit-requests-remaining", requests),
               ("anthropic-ratelimit-requests-reset", stamp)]
        for kind in ("tokens", "input-tokens"):
            out += [(f"anthropic-ratelimit-{kind}-limit", "400000"),
                    (f"anthropic-ratelimit-{kind}-remaining", tokens),
                    (f"anthropic-ratelimit-{kind}-reset", stamp)]
        return out
    when = go_duration(reset) if style == "openai" else str(int(-(-reset // 1)))
    return [("x-ratelimit-limit-requests", "1000"), ("x-ratelimit-limit-tokens", "400000"),
            ("x-ratelimit-remaining-requests", requests),
            ("x-ratelimit-remaining-tokens", tokens),
            ("x-ratelimit-reset-requests", when), ("x-ratelimit-reset-tokens", when)]


def normalise_headers(h: Any) -> list[tuple[str, str]]:
    if h is None:
        return []
    if isinstance(h, dict):
        items = list(h.items())
    elif isinstance(h, list):
        items = []
        for pair in h:
            if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
                raise BehaviourError("headers list entries must be [name, value]")
            items.append((pair[0], pair[1]))
    else:
        raise BehaviourError("headers must be an object or a list of [name, value]")
    out = []
    for k, v in items:
        if not isinstance(k, str) or not k or any(c in k for c in ":\r\n "):
            raise BehaviourError(f"bad header name {k!r}")
        v = str(v)
        if "\r" in v or "\n" in v:
            raise BehaviourError(f"bad header value for {k}")
        out.append((k, v))
    return out


class _ClientGone(Exception):
    pass


class _Request:
    __slots__ = ("method", "path", "version", "headers", "body")

    def __init__(self, method, path, version, headers, body):
        self.method, self.path, self.version = method, path, version
        self.headers, self.body = headers, body

    def header(self, name: str) -> str | None:
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None


class _Conn:
    """One accepted provider connection with a read buffer."""

    def __init__(self, sock: socket.socket, number: int):
        self.sock = sock
        self.number = number
        self.buf = bytearray()
        self.dropped = False
        self.tls: dict | None = None  # {"sni", "alpn", "version"} once a TLS handshake is done

    def _recv(self) -> bytes:
        try:
            return self.sock.recv(65536)
        except OSError:
            return b""

    def read_until(self, marker: bytes, limit: int) -> bytes | None:
        while True:
            i = self.buf.find(marker)
            if i >= 0:
                out = bytes(self.buf[: i + len(marker)])
                del self.buf[: i + len(marker)]
                return out
            if len(self.buf) > limit:
                raise ValueError("request head too large")
            data = self._recv()
            if not data:
                return None
            self.buf += data

    def read_exact(self, n: int) -> bytes | None:
        while len(self.buf) < n:
            data = self._recv()
            if not data:
                return None
            self.buf += data
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def read_request(self) -> _Request | None:
        head = self.read_until(b"\r\n\r\n", MAX_HEAD)
        if head is None:
            return None
        lines = head[:-4].decode("latin-1").split("\r\n")
        while lines and lines[0] == "":  # tolerate stray CRLF between requests
            lines.pop(0)
        if not lines:
            return self.read_request()
        parts = lines[0].split(" ")
        if len(parts) != 3:
            raise ValueError(f"bad request line {lines[0]!r}")
        method, path, version = parts
        headers = []
        for line in lines[1:]:
            k, sep, v = line.partition(":")
            if not sep:
                raise ValueError(f"bad header line {line!r}")
            headers.append((k.strip(), v.strip()))
        req = _Request(method, path, version, headers, b"")
        if (req.header("expect") or "").lower() == "100-continue":
            self.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        te = (req.header("transfer-encoding") or "").lower()
        if "chunked" in te:
            body = bytearray()
            while True:
                line = self.read_until(b"\r\n", 4096)
                if line is None:
                    return None
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while True:  # trailers up to the empty line
                        t = self.read_until(b"\r\n", MAX_HEAD)
                        if t is None or t == b"\r\n":
                            break
                    break
                chunk = self.read_exact(size + 2)
                if chunk is None:
                    return None
                body += chunk[:-2]
            req.body = bytes(body)
        else:
            n = int(req.header("content-length") or 0)
            if n:
                body = self.read_exact(n)
                if body is None:
                    return None
                req.body = body
        return req

    def client_gone(self) -> bool:
        """Non-blocking check: has the peer closed or reset the connection?"""
        if self.dropped:
            return True
        if isinstance(self.sock, ssl.SSLSocket):
            return self._tls_client_gone()
        try:
            r, _, _ = select.select([self.sock], [], [], 0)
            if not r:
                return False
            data = self.sock.recv(65536, socket.MSG_PEEK)
            if not data:
                return True
            # Unexpected extra bytes (pipelining): keep them for the next request.
            self.buf += self.sock.recv(65536)
            return False
        except OSError:
            return True

    def _tls_client_gone(self) -> bool:
        # No MSG_PEEK through TLS: read what is there without blocking and keep it.
        try:
            if not self.sock.pending():
                r, _, _ = select.select([self.sock], [], [], 0)
                if not r:
                    return False
            self.sock.setblocking(False)
            try:
                data = self.sock.recv(65536)
            finally:
                self.sock.setblocking(True)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return False
        except (OSError, ValueError):
            return True
        if not data:
            return True
        self.buf += data
        return False

    def wait(self, seconds: float, stop: threading.Event) -> None:
        """Sleep `seconds` (inf = forever), raising _ClientGone if the peer leaves."""
        deadline = time.monotonic() + seconds
        while True:
            if self.client_gone():
                raise _ClientGone()
            if stop.is_set():
                raise _ClientGone()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                select.select([self.sock], [], [], min(POLL, left))
            except OSError:
                raise _ClientGone()

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            raise _ClientGone()

    def reset(self) -> None:
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class MockProvider:
    """A mock LLM provider: provider listener + control listener, on threads."""

    def __init__(self, name: str = "mock", port: int = 0, control_port: int = 0,
                 host: str = "127.0.0.1", tls_cert: str | None = None,
                 tls_key: str | None = None, max_records: int = 0, cloud: dict | None = None):
        self.name = name
        # A cloud's envelope (cloud_mock.py): its paths and credentials checked, Bedrock's
        # streams framed as AWS event streams.
        self.cloud = cloud_mock.validate(cloud) if cloud else None
        # Keep only about the last max_records request records (0 = all): long soaks read
        # them as they go (`since=`) and must not grow without bound.
        self._max_records = max_records
        self._tls: ssl.SSLContext | None = None
        if tls_cert or tls_key:
            if not (tls_cert and tls_key):
                raise ValueError("TLS needs both tls_cert and tls_key")
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls_cert, tls_key)
            ctx.set_alpn_protocols(["http/1.1"])  # never h2: the mock speaks HTTP/1.1 only
            ctx.sni_callback = _remember_sni
            self._tls = ctx
        self._tls_failures = 0
        self._tls_errors: list[dict] = []
        self.host = host
        self._want_port = port
        self._want_control_port = control_port
        self.port: int | None = None
        self.control_port: int | None = None
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._accept_stop: threading.Event | None = None
        self._accept_thread: threading.Thread | None = None
        self._conns: dict[int, _Conn] = {}
        self._conn_seq = 0
        self._queue: list[dict] = []
        self._default: dict = {}
        self._records: list[dict] = []
        self._req_seq = 0
        self._control: http.server.ThreadingHTTPServer | None = None
        self._control_thread: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle
    @property
    def url(self) -> str:
        return f"{'https' if self._tls else 'http'}://{self.host}:{self.port}"

    @property
    def control_url(self) -> str:
        return f"http://{self.host}:{self.control_port}"

    def start(self) -> "MockProvider":
        self._listener_up()
        self._want_port = self.port  # re-bind the same port after a listener down
        self._control = _make_control_server(self, self.host, self._want_control_port)
        self.control_port = self._control.server_address[1]
        self._control_thread = threading.Thread(
            target=self._control.serve_forever, kwargs={"poll_interval": 0.05},
            name=f"mock-{self.name}-control", daemon=True)
        self._control_thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._listener_down(drop_connections=True)
        if self._control is not None:
            self._control.shutdown()
            self._control.server_close()
            self._control = None
        if self._control_thread is not None:
            self._control_thread.join(timeout=2)

    def __enter__(self) -> "MockProvider":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------ programming
    def set_default(self, behaviour: dict) -> None:
        b = validate_behaviour(behaviour)
        with self._lock:
            self._default = b

    def get_default(self) -> dict:
        with self._lock:
            return dict(self._default)

    def enqueue(self, behaviours: dict | list) -> int:
        items = behaviours if isinstance(behaviours, list) else [behaviours]
        expanded = []
        for b in items:
            b = validate_behaviour(b, allow_times=True)
            times = int(b.pop("times", 1))
            expanded.extend(dict(b) for _ in range(times))
        with self._lock:
            self._queue.extend(expanded)
            return len(self._queue)

    def requests(self, since: int = 0, bodies: bool = True) -> list[dict]:
        with self._lock:
            out = []
            for r in self._records:
                if r["id"] <= since:
                    continue
                r = dict(r)
                if not bodies:
                    r.pop("body", None)
                    r.pop("body_b64", None)
                out.append(r)
            return out

    def reset(self) -> dict:
        with self._lock:
            self._records.clear()
            self._queue.clear()
            self._default = {}
            self._req_seq = 0
            self._tls_failures = 0
            self._tls_errors.clear()
        self.set_listener(True)
        return self.health()

    def set_listener(self, up: bool, drop_connections: bool = True) -> dict:
        if up:
            self._listener_up()
        else:
            self._listener_down(drop_connections)
        return self.health()

    def health(self) -> dict:
        with self._lock:
            return {
                "name": self.name, "port": self.port, "control_port": self.control_port,
                "listener_up": self._listener is not None, "queue_length": len(self._queue),
                "open_connections": len(self._conns), "request_count": len(self._records),
                "tls": self._tls is not None, "tls_handshake_failures": self._tls_failures,
                "tls_handshake_errors": list(self._tls_errors),
            }

    # ---------------------------------------------------------------- listener
    def _listener_up(self) -> None:
        with self._lock:
            if self._listener is not None or self._stop.is_set():
                return
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((self.host, self._want_port if self.port is None else self.port))
            s.listen(128)
            self.port = s.getsockname()[1]
            self._listener = s
            stop = threading.Event()
            self._accept_stop = stop
            t = threading.Thread(target=self._accept_loop, args=(s, stop),
                                 name=f"mock-{self.name}-accept", daemon=True)
            self._accept_thread = t
            t.start()

    def _listener_down(self, drop_connections: bool) -> None:
        with self._lock:
            s, stop, t = self._listener, self._accept_stop, self._accept_thread
            self._listener = self._accept_stop = self._accept_thread = None
            conns = list(self._conns.values()) if drop_connections else []
        if stop is not None:
            stop.set()
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept() on Linux
            except OSError:
                pass
        if t is not None:
            t.join(timeout=2)
        if s is not None:
            s.close()
        for c in conns:
            c.dropped = True
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept_loop(self, s: socket.socket, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                sock, _ = s.accept()
            except OSError:
                return
            if stop.is_set():
                sock.close()
                return
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:  # handshake on the connection's thread
                sock = self._tls.wrap_socket(sock, server_side=True,
                                             do_handshake_on_connect=False)
            with self._lock:
                self._conn_seq += 1
                conn = _Conn(sock, self._conn_seq)
                self._conns[conn.number] = conn
            threading.Thread(target=self._serve_conn, args=(conn,),
                             name=f"mock-{self.name}-conn{conn.number}", daemon=True).start()

    # ----------------------------------------------------------------- serving
    def _next_behaviour(self) -> dict:
        with self._lock:
            if self._queue:
                return self._queue.pop(0)
            return dict(self._default)

    def _tls_handshake(self, conn: _Conn) -> bool:
        sock = conn.sock
        sock.settimeout(10)
        try:
            sock.do_handshake()
        except (OSError, ValueError) as e:
            with self._lock:
                self._tls_failures += 1
                self._tls_errors.append({"sni": getattr(sock, "mock_sni", None),
                                         "error": f"{type(e).__name__}: {e}"})
                del self._tls_errors[:-10]
            return False
        sock.settimeout(None)
        conn.tls = {"sni": getattr(sock, "mock_sni", None),
                    "alpn": sock.selected_alpn_protocol(), "version": sock.version()}
        return True

    def _serve_conn(self, conn: _Conn) -> None:
        try:
            if self._tls is not None and not self._tls_handshake(conn):
                return
            while not self._stop.is_set() and not conn.dropped:
                try:
                    req = conn.read_request()
                except (ValueError, OSError):
                    try:
                        conn.send(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n"
                                  b"connection: close\r\n\r\n")
                    except _ClientGone:
                        pass
                    break
                if req is None:
                    break
                keep = self._handle(conn, req)
                if not keep:
                    break
        finally:
            with self._lock:
                self._conns.pop(conn.number, None)
            conn.close()

    def _record(self, conn: _Conn, req: _Request, behaviour: dict) -> dict:
        body = req.body
        rec: dict[str, Any] = {
            "provider": self.name, "connection": conn.number, "method": req.method,
            "path": req.path, "version": req.version,
            "headers": [[k, v] for k, v in req.headers],
            "body_size": len(body), "body_sha256": hashlib.sha256(body).hexdigest(),
            "tls": conn.tls,
            "time": time.time(), "completed_time": None, "client_gone": False,
            "outcome": "in_progress", "behaviour": behaviour, "rejected": None,
            "usage": None,
        }
        try:
            rec["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            rec["body_b64"] = base64.b64encode(body).decode("ascii")
        with self._lock:
            self._req_seq += 1
            rec["id"] = self._req_seq
            self._records.append(rec)
            if self._max_records and len(self._records) > 2 * self._max_records:
                del self._records[: len(self._records) - self._max_records]
        return rec

    def _finish(self, rec: dict, outcome: str, client_gone: bool = False,
                usage: Any = None) -> None:
        with self._lock:
            rec["outcome"] = outcome
            rec["usage"] = usage
            rec["client_gone"] = rec["client_gone"] or client_gone
            rec["completed_time"] = time.time()

    def _handle(self, conn: _Conn, req: _Request) -> bool:
        """Serve one request; returns whether the connection stays usable."""
        own = req.header("x-mock-behaviour")
        try:
            b = validate_behaviour(json.loads(own)) if own else self._next_behaviour()
        except (ValueError, BehaviourError):
            b = {"status": 400, "body": {"error": {"message": "bad x-mock-behaviour"}}}
        rec = self._record(conn, req, b)
        try:
            req_json = json.loads(req.body) if req.body else None
        except (ValueError, UnicodeDecodeError):
            req_json = None
        model = req_json.get("model") if isinstance(req_json, dict) else None
        wants_stream = bool(isinstance(req_json, dict) and req_json.get("stream") is True)
        if _api_of(req.path) == "gemini":
            # Gemini says it in the path: the model, and whether to stream.
            model = model or gemini_mock.path_model(req.path)
            wants_stream = ":streamGenerateContent" in req.path
        framed = False
        if self.cloud:
            verdict = cloud_mock.check(self.cloud, req.method, req.path, req.headers, req.body)
            if isinstance(verdict, cloud_mock.Refused):
                with self._lock:
                    rec["rejected"] = verdict.why
                b = {"status": verdict.status, "body": verdict.body, "headers": verdict.headers}
            else:
                model = verdict.model or model
                if verdict.stream is not None:
                    wants_stream = verdict.stream
                framed = verdict.framed
        try:
            if b.get("delay_ms"):
                conn.wait(b["delay_ms"] / 1000.0, self._stop)
            action = b.get("action", "respond")
            if action == "hang":
                conn.wait(float("inf"), self._stop)
                return False  # unreachable: wait raises when the client leaves
            if action == "close":
                self._finish(rec, "closed")
                conn.close()
                return False
            if action == "reset":
                self._finish(rec, "reset")
                conn.reset()
                return False
            return self._respond(conn, req, rec, b, model, wants_stream, req_json, framed)
        except _ClientGone:
            if self._stop.is_set() or conn.dropped:
                self._finish(rec, "shutdown" if self._stop.is_set() else "dropped")
            else:
                self._finish(rec, "client_gone", client_gone=True)
            return False

    def _respond(self, conn: _Conn, req: _Request, rec: dict, b: dict,
                 model: Any, wants_stream: bool, req_json: Any = None,
                 framed: bool = False) -> bool:
        if "preset" in b:
            b = {**PRESETS[b["preset"]], **{k: v for k, v in b.items() if k != "preset"}}
        if b.get("strict") and _api_of(req.path) in ("messages", "chat", "responses"):
            api = _api_of(req.path)
            bad = mock_api_rules.problem(api, req.headers, req.body,
                                         int(b.get("status", 200)) < 400)
            if bad is not None:
                with self._lock:
                    rec["rejected"] = bad[1]
                b = {"status": 400, "body": _invalid_request(api, *bad)}
        status = int(b.get("status", 200))
        stream = b.get("stream")
        if stream is None:
            stream = wants_stream and status < 400
        if "body" in b:
            stream = False
        close = bool(b.get("close_connection")) or \
            (req.header("connection") or "").lower() == "close" or req.version == "HTTP/1.0"
        try:
            reason = http.HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
        extra = normalise_headers(b.get("headers"))
        if b.get("rate_limits"):
            extra = rate_limit_headers(b["rate_limits"]) + extra
        head = [f"HTTP/1.1 {status} {reason}",
                f"x-mock-provider: {self.name}", f"x-mock-request-id: {rec['id']}"]
        if close:
            head.append("connection: close")
        has_ct = any(k.lower() == "content-type" for k, _ in extra)
        no_body = req.method == "HEAD" or status in (204, 304) or status < 200

        if isinstance(req_json, dict) and "thinking" in b:
            b = {**b, "encrypted": "reasoning.encrypted_content" in (req_json.get("include") or [])}
        if not stream:
            api = _api_of(req.path)
            usage = None
            if "body" in b:
                body = b["body"]
                payload = body.encode("utf-8") if isinstance(body, str) else json.dumps(body).encode()
            elif status >= 400:
                payload = json.dumps(self._error_body(status, b, model, api)).encode()
            else:
                answer = self._answer(api, rec["id"], model, b)
                usage = answer.get("usage", answer.get("usageMetadata"))
                payload = json.dumps(answer).encode()
            if not has_ct:
                head.append(f"content-type: {b.get('content_type', 'application/json')}")
            head += [f"{k}: {v}" for k, v in extra]
            if not no_body:
                head.append(f"content-length: {len(payload)}")
            else:
                payload = b""
            conn.send(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
            self._finish(rec, "responded", usage=None if no_body else usage)
            if close:
                conn.close()
            return not close

        # --- SSE, chunked transfer-encoding, one HTTP chunk per event (Bedrock: each event
        # framed as an AWS event-stream message)
        wrap = cloud_mock.frame_sse if framed else (lambda raw: raw)
        if not has_ct:
            default_type = "application/vnd.amazon.eventstream" if framed else "text/event-stream"
            head.append(f"content-type: {b.get('content_type', default_type)}")
        head.append("cache-control: no-cache")
        head += [f"{k}: {v}" for k, v in extra]
        head.append("transfer-encoding: chunked")
        conn.send(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        n = int(b.get("chunks", 0 if b.get("tool_calls") else 3))
        abort_after = b.get("abort_after_chunks")
        interval = b.get("chunk_interval_ms", 0) / 1000.0
        include_usage = isinstance(req_json, dict) and isinstance(
            req_json.get("stream_options"), dict) and \
            req_json["stream_options"].get("include_usage") is True
        api = _api_of(req.path)
        events, trailer = _stream_events(api, self.name, rec["id"], model, n, b, include_usage)
        usage = _stream_usage(api, b, include_usage)
        if b.get("first_chunk_delay_ms"):
            conn.wait(b["first_chunk_delay_ms"] / 1000.0, self._stop)
        if b.get("chunk_bytes"):
            # The same bytes cut every chunk_bytes bytes, whatever the event boundaries.
            raw = b"".join(e.encode() for e in b["events"]) if b.get("events") is not None \
                else b"".join(events + trailer)
            raw = wrap(raw)
            size = b["chunk_bytes"]
            for i in range(0, len(raw), size):
                if i > 0 and interval:
                    conn.wait(interval, self._stop)
                conn.send(_chunk(raw[i:i + size]))
            conn.send(_last_chunk(b))
            self._finish(rec, "streamed", usage=None if b.get("events") is not None else usage)
            if close:
                conn.close()
            return not close
        if b.get("events") is not None:
            for i, event in enumerate(b["events"]):
                if i > 0 and interval:
                    conn.wait(interval, self._stop)
                conn.send(_chunk(wrap(event.encode())))
            conn.send(_last_chunk(b))
            self._finish(rec, "streamed")
            if close:
                conn.close()
            return not close
        for i in range(len(events) + 1):
            if abort_after is not None and i == abort_after:
                mode = b.get("abort", "reset")
                if mode == "hang":
                    conn.wait(float("inf"), self._stop)
                self._finish(rec, "aborted")
                if mode == "close":
                    conn.close()
                else:
                    conn.reset()
                return False
            if i == len(events):
                break
            if i > 0 and interval:
                conn.wait(interval, self._stop)
            conn.send(_chunk(wrap(events[i])))
        conn.send(b"".join(_chunk(wrap(t)) for t in trailer) + _last_chunk(b))
        self._finish(rec, "streamed", usage=usage)
        if close:
            conn.close()
        return not close

    def _answer(self, api: str, rid: int, model: Any, b: dict) -> dict:
        calls = b.get("tool_calls") or []
        text = f"Hello from {self.name} (model {model})"
        content = b.get("content", None if calls else text)
        if api == "messages":
            blocks = [] if content is None else [{"type": "text", "text": content}]
            if "thinking" in b:
                blocks.insert(0, {"type": "thinking", "thinking": b["thinking"],
                                  "signature": mock_api_rules.signature(b["thinking"])})
            blocks += [{"type": "tool_use", "id": _call_id(c, k, "toolu_mock_"),
                        "name": c["name"], "input": _arguments_object(c)}
                       for k, c in enumerate(calls)]
            return {"id": f"msg_mock_{self.name}_{rid}", "type": "message", "role": "assistant",
                    "model": model, "content": blocks,
                    "stop_reason": b.get("stop_reason", "tool_use" if calls else "end_turn"),
                    "stop_sequence": None,
                    "usage": b.get("usage", {"input_tokens": 5, "output_tokens": 7})}
        if api == "responses":
            return _response_object(self.name, rid, model, content, "completed", calls,
                                    b.get("usage"), b)
        if api == "gemini":
            return gemini_mock.answer(self.name, rid, model, b)
        if api == "converse":
            return converse_mock.answer(self.name, rid, model, b)
        content = b.get("content", text)
        if api == "embeddings":
            return {"object": "list", "model": model,
                    "data": [{"object": "embedding", "index": 0, "embedding": [0.25, -0.5, 1.0]}],
                    "usage": {"prompt_tokens": 5, "total_tokens": 5}}
        if api == "completions":
            return {"id": f"cmpl-mock-{self.name}-{rid}", "object": "text_completion",
                    "created": int(time.time()), "model": model,
                    "choices": [{"text": content, "index": 0, "logprobs": None,
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}}
        return self._completion(rid, model, b)

    def _completion(self, rid: int, model: Any, b: dict) -> dict:
        calls = b.get("tool_calls") or []
        content = b.get("content", None if calls else f"Hello from {self.name} (model {model})")
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = [
                {"id": _call_id(c, k, "call_mock_"), "type": "function",
                 "function": {"name": c["name"], "arguments": _arguments_text(c)}}
                for k, c in enumerate(calls)]
        return {
            "id": f"chatcmpl-mock-{self.name}-{rid}", "object": "chat.completion",
            "created": int(time.time()), "model": model,
            "system_fingerprint": f"mock-{self.name}",
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": b.get("stop_reason",
                                                "tool_calls" if calls else "stop")}],
            "usage": b.get("usage", CHAT_USAGE),
        }

    def _error_body(self, status: int, b: dict, model: Any, api: str = "chat") -> dict:
        etype, code = ERROR_DEFAULTS.get(
            status, ("server_error" if status >= 500 else "invalid_request_error", f"http_{status}"))
        message = f"mock {self.name}: HTTP {status} ({code}) for model {model}"
        if api == "gemini":  # Google's error shape
            return gemini_mock.error_body(status, self.name, model, b)
        if api == "converse":  # AWS's error shape
            return converse_mock.error_body(status, self.name, model, b)
        if api == "messages":  # Anthropic's error shape
            err = {"type": etype, "message": message}
            err.update(b.get("error", {}))
            return {"type": "error", "error": err}
        err = {"message": message, "type": etype, "param": None, "code": code}
        err.update(b.get("error", {}))
        return {"error": err}


CHAT_USAGE = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}


def _invalid_request(api: str, param: str, message: str) -> dict:
    """A 400 body as the API sends it for a request it refuses."""
    if api == "messages":
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    return {"error": {"message": message, "type": "invalid_request_error", "param": param,
                      "code": None}}


def _call_id(call: dict, k: int, prefix: str) -> str:
    return call.get("id") or f"{prefix}{k}"


def _arguments_text(call: dict) -> str:
    args = call.get("arguments", {})
    return args if isinstance(args, str) else json.dumps(args)


def _arguments_object(call: dict) -> Any:
    args = call.get("arguments", {})
    return json.loads(args) if isinstance(args, str) else args


def _thirds(text: str) -> list[str]:
    """A tool call's arguments cut in three deltas (as providers stream them: anywhere)."""
    if len(text) < 3:
        return [text]
    a, b = len(text) // 3, 2 * len(text) // 3
    return [text[:a], text[a:b], text[b:]]


def _api_of(path: str) -> str:
    """Which API a request path is for: the answer's shape follows it."""
    p = path.split("?", 1)[0].rstrip("/")
    for suffix, api in (("/messages", "messages"), ("/invoke", "messages"),
                        ("/invoke-with-response-stream", "messages"),
                        (":rawPredict", "messages"), (":streamRawPredict", "messages"), ("/responses", "responses"),
                        (":generateContent", "gemini"), (":streamGenerateContent", "gemini"),
                        ("/converse", "converse"), ("/converse-stream", "converse"),
                        ("/embeddings", "embeddings"), ("/chat/completions", "chat"),
                        ("/completions", "completions")):
        if p.endswith(suffix):
            return api
    return "chat"


def _sse(event: str | None, data: Any) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    body = data if isinstance(data, bytes) else json.dumps(data).encode()
    return head + b"data: " + body + b"\n\n"


def _reasoning_item(name: str, rid: int, b: dict, done: bool = True) -> dict:
    """The behaviour's ``thinking`` as OpenAI's reasoning item (its summary, and its encrypted
    content when the request asked for it)."""
    item = {"id": f"rs_mock_{name}_{rid}", "type": "reasoning", "summary": []}
    if done:
        item["summary"] = [{"type": "summary_text", "text": b["thinking"]}]
        if b.get("encrypted"):
            item["encrypted_content"] = mock_api_rules.encrypted(item["id"])
    return item


def _response_object(name: str, rid: int, model: Any, text: str | None, status: str,
                     calls: list | None = None, usage: dict | None = None,
                     b: dict | None = None) -> dict:
    """A Responses API ``response``: a ``reasoning`` item for the behaviour's ``thinking``, a
    ``message`` item with the text (none when ``text`` is None), then one ``function_call`` item
    per call; no output until it is ``completed``."""
    output: list[dict] = []
    if status == "completed" and b and "thinking" in b:
        output.append(_reasoning_item(name, rid, b))
    if status == "completed":
        if text is not None:
            output.append(_message_item(name, rid, text))
        output += [_function_call_item(c, k) for k, c in enumerate(calls or [])]
    return {"id": f"resp_mock_{name}_{rid}", "object": "response", "created_at": int(time.time()),
            "status": status, "model": model, "output": output, "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [],
            "usage": usage or {"input_tokens": 5, "output_tokens": 7, "total_tokens": 12,
                               "input_tokens_details": {"cached_tokens": 0},
                               "output_tokens_details": {"reasoning_tokens": 0}}}


def _message_item(name: str, rid: int, text: str, status: str = "completed") -> dict:
    return {"type": "message", "id": f"msg_mock_{name}_{rid}", "status": status,
            "role": "assistant",
            "content": [] if status != "completed" else
            [{"type": "output_text", "text": text, "annotations": []}]}


def _function_call_item(call: dict, k: int, status: str = "completed") -> dict:
    return {"type": "function_call", "id": f"fc_mock_{k}", "call_id": _call_id(call, k, "call_mock_"),
            "name": call["name"], "arguments": _arguments_text(call) if status == "completed"
            else "", "status": status}


def _responses_stream(name: str, rid: int, model: Any, texts: list[str], calls: list[dict],
                      b: dict) -> tuple[list[bytes], list[bytes]]:
    """The Responses API's typed events, in OpenAI's order: response.created,
    response.in_progress, then per output item output_item.added (content_part.added,
    output_text.delta x N, output_text.done, content_part.done | function_call_arguments.delta
    x 3, function_call_arguments.done), output_item.done; response.completed with usage."""
    seq = itertools_count()
    item = f"msg_mock_{name}_{rid}"

    def ev(kind: str, **fields: Any) -> bytes:
        return _sse(kind, {"type": kind, "sequence_number": next(seq), **fields})

    head = (ev("response.created", response=_response_object(name, rid, model, "", "in_progress"))
            + ev("response.in_progress",
                 response=_response_object(name, rid, model, "", "in_progress")))
    events: list[bytes] = []
    index = 0
    if "thinking" in b:
        rs, half = _reasoning_item(name, rid, b), len(b["thinking"]) // 2
        part = {"type": "summary_text", "text": ""}
        at = {"item_id": rs["id"], "output_index": 0, "summary_index": 0}
        events += [
            head + ev("response.output_item.added", output_index=0,
                      item=_reasoning_item(name, rid, b, done=False))
            + ev("response.reasoning_summary_part.added", **at, part=part)
            + ev("response.reasoning_summary_text.delta", **at, delta=b["thinking"][:half]),
            ev("response.reasoning_summary_text.delta", **at, delta=b["thinking"][half:])
            + ev("response.reasoning_summary_text.done", **at, text=b["thinking"])
            + ev("response.reasoning_summary_part.done", **at,
                 part={**part, "text": b["thinking"]})
            + ev("response.output_item.done", output_index=0, item=rs)]
        head, index = b"", 1
    if texts:
        part = {"type": "output_text", "text": "", "annotations": []}
        for i, t in enumerate(texts):
            frame = b"" if i else (
                head + ev("response.output_item.added", output_index=index,
                          item=_message_item(name, rid, "", "in_progress"))
                + ev("response.content_part.added", item_id=item, output_index=index,
                     content_index=0, part=part))
            events.append(frame + ev("response.output_text.delta", item_id=item,
                                     output_index=index, content_index=0, delta=t, logprobs=[]))
        text = "".join(texts)
        events[-1] += (
            ev("response.output_text.done", item_id=item, output_index=index, content_index=0,
               text=text, logprobs=[])
            + ev("response.content_part.done", item_id=item, output_index=index, content_index=0,
                 part={**part, "text": text})
            + ev("response.output_item.done", output_index=index,
                 item=_message_item(name, rid, text)))
        index += 1
    for k, call in enumerate(calls):
        fc = _function_call_item(call, k, "in_progress")
        first = (head if not events and k == 0 else b"") + ev(
            "response.output_item.added", output_index=index + k, item=fc)
        pieces = [ev("response.function_call_arguments.delta", item_id=fc["id"],
                     output_index=index + k, delta=p) for p in _thirds(_arguments_text(call))]
        pieces[0] = first + pieces[0]
        pieces[-1] += (ev("response.function_call_arguments.done", item_id=fc["id"],
                          output_index=index + k, arguments=_arguments_text(call))
                       + ev("response.output_item.done", output_index=index + k,
                            item=_function_call_item(call, k)))
        events += pieces
    done = _response_object(name, rid, model, "".join(texts) if texts else None, "completed",
                            calls, b.get("usage"), b)
    trailer = [(b"" if events else head) + ev("response.completed", response=done)]
    return events, trailer


def _stream_usage(api: str, b: dict, include_usage: bool) -> Any:
    """The usage object a generated stream of ``api`` reports (None when it carries none)."""
    if api == "chat":
        return b.get("usage", CHAT_USAGE) if include_usage else None
    if api == "messages":
        return b.get("usage", {"input_tokens": 5, "output_tokens": 7})
    if api == "responses":
        return _response_object("", 0, None, None, "completed", None, b.get("usage"))["usage"]
    if api == "gemini":
        return gemini_mock.usage(b)
    if api == "converse":
        return converse_mock.usage(b)
    return None


def _stream_events(api: str, name: str, rid: int, model: Any, n: int, b: dict | None = None,
                   include_usage: bool = False) -> tuple[list[bytes], list[bytes]]:
    """The SSE frames of a streamed answer in the API's own dialect: ``n`` content events
    (event *i* carries the text ``"<name>:<i> "``; abort_after_chunks counts these), the events
    of the behaviour's ``tool_calls`` (arguments cut in three deltas), and the closing frames."""
    b = b or {}
    calls = b.get("tool_calls") or []
    texts = [f"{name}:{i} " for i in range(n)]
    if api == "messages":
        return _messages_stream(name, rid, model, texts, calls, b)
    if api == "responses":
        return _responses_stream(name, rid, model, texts, calls, b)
    if api == "gemini":
        return gemini_mock.stream_events(name, rid, model, texts, b)
    if api == "converse":
        return converse_mock.stream_events(name, rid, model, texts, b)
    created = int(time.time())
    if api == "completions":
        events = [_sse(None, {"id": f"cmpl-mock-{name}-{rid}", "object": "text_completion",
                              "created": created, "model": model,
                              "choices": [{"text": t, "index": 0, "logprobs": None,
                                           "finish_reason": "stop" if i == n - 1 else None}]})
                  for i, t in enumerate(texts)]
        return events, [b"data: [DONE]\n\n"]
    cid = f"chatcmpl-mock-{name}-{rid}"
    stop = b.get("stop_reason", "tool_calls" if calls else "stop")

    def chunk(delta: dict, finish: str | None = None, choices: bool = True) -> bytes:
        doc: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created,
                               "model": model, "system_fingerprint": f"mock-{name}",
                               "choices": [{"index": 0, "delta": delta,
                                            "finish_reason": finish}] if choices else []}
        if include_usage:  # OpenAI: null on every chunk, the numbers on a last one
            doc["usage"] = None
        return _sse(None, doc)

    events = []
    for i, t in enumerate(texts):
        delta: dict[str, Any] = {"content": t}
        if i == 0:
            delta["role"] = "assistant"
        events.append(chunk(delta, stop if i == n - 1 and not calls else None))
    for k, call in enumerate(calls):
        head: dict[str, Any] = {"tool_calls": [{
            "index": k, "id": _call_id(call, k, "call_mock_"), "type": "function",
            "function": {"name": call["name"], "arguments": ""}}]}
        if not events:
            head = {"role": "assistant", "content": None, **head}
        events.append(chunk(head))
        events += [chunk({"tool_calls": [{"index": k, "function": {"arguments": piece}}]})
                   for piece in _thirds(_arguments_text(call))]
    trailer = [chunk({}, stop)] if calls else []
    if include_usage:
        last = json.loads(chunk({}, choices=False)[len(b"data: "):])
        last["usage"] = b.get("usage", CHAT_USAGE)
        trailer.append(_sse(None, last))
    return events, trailer + [b"data: [DONE]\n\n"]


def _messages_stream(name: str, rid: int, model: Any, texts: list[str], calls: list[dict],
                     b: dict) -> tuple[list[bytes], list[bytes]]:
    """Anthropic's event sequence. ``usage_events`` says where usage goes: ``start`` (input and
    cache tokens in message_start, output in message_delta: the API's documented form),
    ``delta`` (all of it in message_delta only, as some compatible backends send it) or ``both``
    (message_start, then cumulative totals again in message_delta)."""
    usage = b.get("usage", {"input_tokens": 5, "output_tokens": 7})
    where = b.get("usage_events", "start")
    start_usage = {k: v for k, v in usage.items() if k != "output_tokens"}
    start_usage["output_tokens"] = 0
    if where == "delta":
        start_usage = {"input_tokens": 0, "output_tokens": 0}
    delta_usage = {"output_tokens": usage.get("output_tokens", 0)} if where == "start" \
        else dict(usage)

    def block_start(i: int, block: dict) -> bytes:
        return _sse("content_block_start", {"type": "content_block_start", "index": i,
                                            "content_block": block})

    def block_delta(i: int, delta: dict) -> bytes:
        return _sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                            "delta": delta})

    def block_stop(i: int) -> bytes:
        return _sse("content_block_stop", {"type": "content_block_stop", "index": i})

    thinking = b.get("thinking")
    base = 0 if thinking is None else 1  # the text's block index
    events = [block_delta(base, {"type": "text_delta", "text": t}) for t in texts]
    if events:
        events[0] = block_start(base, {"type": "text", "text": ""}) + events[0]
    if thinking is not None:
        half = len(thinking) // 2
        events[:0] = [block_start(0, {"type": "thinking", "thinking": "", "signature": ""})
                      + block_delta(0, {"type": "thinking_delta", "thinking": thinking[:half]}),
                      block_delta(0, {"type": "thinking_delta", "thinking": thinking[half:]}),
                      block_delta(0, {"type": "signature_delta",
                                      "signature": mock_api_rules.signature(thinking)})
                      + block_stop(0)]
    first_tool = base + (1 if texts else 0)
    for k, call in enumerate(calls):
        i = first_tool + k
        pieces = [block_delta(i, {"type": "input_json_delta", "partial_json": p})
                  for p in _thirds(_arguments_text(call))]
        pieces[0] = block_start(i, {"type": "tool_use", "id": _call_id(call, k, "toolu_mock_"),
                                    "name": call["name"], "input": {}}) + pieces[0]
        if k == 0 and texts:
            pieces[0] = block_stop(base) + pieces[0]
        pieces[-1] += block_stop(i)
        events += pieces
    stop = b.get("stop_reason", "tool_use" if calls else "end_turn")
    trailer = ([] if calls else [block_stop(base)]) + [
        _sse("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": delta_usage}),
        _sse("message_stop", {"type": "message_stop"})]
    start = _sse("message_start", {"type": "message_start", "message": {
        "id": f"msg_mock_{name}_{rid}", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage}})
    if events:
        events[0] = start + events[0]
    else:
        trailer[0] = start + trailer[0]
    return events, trailer


def _remember_sni(sock, server_name, _ctx) -> None:
    """SSLContext.sni_callback: keep the client's server name on its socket."""
    sock.mock_sni = server_name


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def _last_chunk(b: dict) -> bytes:
    """The chunked body's end: the last chunk, with the behaviour's trailers if any."""
    trailers = "".join(f"{k}: {v}\r\n" for k, v in (b.get("trailers") or {}).items())
    return b"0\r\n" + trailers.encode("latin-1") + b"\r\n"


# ------------------------------------------------------------------ control API
def _make_control_server(mock: MockProvider, host: str, port: int):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "mock-provider-control"

        def log_message(self, *args):  # quiet
            pass

        def _reply(self, status: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> Any:
            n = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(n) if n else b""
            if not raw.strip():
                return None
            return json.loads(raw)

        def do_GET(self):
            u = urllib.parse.urlsplit(self.path)
            q = urllib.parse.parse_qs(u.query)
            if u.path == "/health":
                return self._reply(200, mock.health())
            if u.path == "/requests":
                since = int(q.get("since", ["0"])[0])
                bodies = q.get("bodies", ["1"])[0] not in ("0", "false")
                return self._reply(200, {"name": mock.name,
                                         "requests": mock.requests(since, bodies)})
            if u.path == "/behaviour":
                return self._reply(200, mock.get_default())
            return self._reply(404, {"error": f"no such endpoint GET {u.path}"})

        def do_POST(self):
            u = urllib.parse.urlsplit(self.path)
            try:
                body = self._body()
                if u.path == "/reset":
                    return self._reply(200, mock.reset())
                if u.path == "/behaviour":
                    mock.set_default(body if body is not None else {})
                    return self._reply(200, mock.get_default())
                if u.path == "/enqueue":
                    if body is None:
                        raise BehaviourError("body must be a behaviour or a list of them")
                    return self._reply(200, {"queue_length": mock.enqueue(body)})
                if u.path == "/listener":
                    if not isinstance(body, dict) or not isinstance(body.get("up"), bool):
                        raise BehaviourError('body must be {"up": true|false}')
                    return self._reply(200, mock.set_listener(
                        body["up"], bool(body.get("drop_connections", True))))
            except (BehaviourError, ValueError) as e:
                return self._reply(400, {"error": str(e)})
            except OSError as e:
                return self._reply(500, {"error": f"{type(e).__name__}: {e}"})
            return self._reply(404, {"error": f"no such endpoint POST {u.path}"})

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    return Server((host, port), Handler)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Programmable mock LLM provider")
    p.add_argument("--port", type=int, default=0, help="provider port (0 = any free)")
    p.add_argument("--control-port", type=int, default=0, help="control port (0 = any free)")
    p.add_argument("--name", default="mock", help="provider name shown in answers")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--tls-cert", help="PEM certificate (chain): serve the provider port over TLS")
    p.add_argument("--tls-key", help="PEM private key for --tls-cert")
    p.add_argument("--max-records", type=int, default=0,
                   help="keep only about the last N request records (0 = all)")
    p.add_argument("--gemini-key", metavar="KEY",
                   help="be Gemini's native API on Google AI: requests need this key "
                        "(x-goog-api-key or ?key=; a wrong one gets Google's 400 "
                        "API_KEY_INVALID) and a body Gemini takes; :streamGenerateContent "
                        "needs ?alt=sse")
    a = p.parse_args(argv)
    if bool(a.tls_cert) != bool(a.tls_key):
        p.error("--tls-cert and --tls-key go together")
    mock = MockProvider(a.name, a.port, a.control_port, a.host,
                        tls_cert=a.tls_cert, tls_key=a.tls_key, max_records=a.max_records,
                        cloud={"kind": "gemini", "api_key": a.gemini_key}
                        if a.gemini_key else None).start()
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    print(json.dumps({"name": mock.name, "port": mock.port,
                      "control_port": mock.control_port, "tls": bool(a.tls_cert)}), flush=True)
    while not done.wait(1.0):
        pass
    mock.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
