"""Amazon Bedrock's Converse API for the mock provider (``cloud={"kind": "bedrock", ...,
"converse": True}`` or any Bedrock cloud: the path says which API), strict as Bedrock is.

* ``POST /model/{modelId}/converse`` (JSON) and ``/converse-stream`` (the answer's events framed
  as ``application/vnd.amazon.eventstream`` messages whose ``:event-type`` is the event's name and
  whose payload is its JSON, as botocore's ``converse_stream`` reads them).
* Signed with AWS Signature V4 for service ``bedrock`` (recomputed by botocore,
  ``cloud_mock.check_sigv4``), or a Bedrock API key.
* The body is checked against botocore's own service model of ``bedrock-runtime`` (its
  ``Converse`` input shape: unknown members such as ``model`` or ``stream``, wrong types and
  missing required members are refused with a ``ValidationException``, as Bedrock refuses them),
  and against the rules Bedrock applies beyond the model: the conversation starts with a user
  message and the roles alternate, no text block is blank, a ``toolUse`` or ``toolResult`` block
  needs ``toolConfig``, and every ``toolResult`` answers a ``toolUse`` of the assistant message
  before it.

Answers: text (``content``), tool calls (``tool_calls``), the stop reason, and usage
(``inputTokens``, ``outputTokens``, ``totalTokens``, the cache's reads and writes when the
behaviour's ``usage`` has them). Errors are ``{"message"}`` with ``x-amzn-ErrorType`` (the
``bedrock_*`` presets of cloud_mock.py serve Converse too).
"""
from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

import cloud_mock

PATH = re.compile(r"^/model/([^/]+)/(converse|converse-stream)$")

# The event types of a Converse stream (framed under their own name).
EVENTS = {"messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop",
          "messageStop", "metadata"}

_MODEL = None


def _input_shape():
    """botocore's ``Converse`` input shape (loaded once)."""
    global _MODEL
    if _MODEL is None:
        import botocore.session
        _MODEL = botocore.session.get_session().get_service_model("bedrock-runtime")
    return _MODEL.operation_model("Converse").input_shape


def problem(doc: Any, model_id: str) -> str | None:
    """Why Bedrock refuses this Converse body, or None."""
    from botocore.validate import ParamValidator
    if not isinstance(doc, dict):
        return "Malformed input request: the body is not a JSON object"
    report = ParamValidator().validate({**doc, "modelId": model_id}, _input_shape())
    if report.has_errors():
        return report.generate_report()
    messages = doc.get("messages") or []
    if not messages or messages[0].get("role") != "user":
        return "A conversation must start with a user message. Try again with a conversation that starts with a user message."
    tools = bool((doc.get("toolConfig") or {}).get("tools"))
    calls: set[str] = set()
    for i, m in enumerate(messages):
        if i > 0 and m["role"] == messages[i - 1]["role"]:
            return "A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again."
        if not m.get("content"):
            return f"The content field in the Message object at messages.{i} is empty. Add a ContentBlock object to the content field and try again."
        answered = calls
        calls = set()
        for j, block in enumerate(m["content"]):
            if "text" in block and not block["text"].strip():
                return f"The text field in the ContentBlock object at messages.{i}.content.{j} is blank. Add text to the text field, and try again."
            if ("toolUse" in block or "toolResult" in block) and not tools:
                return "The toolConfig field must be defined when using toolUse and toolResult content blocks."
            if "toolUse" in block:
                if m["role"] != "assistant":
                    return f"messages.{i}: toolUse is only for the assistant"
                calls.add(block["toolUse"]["toolUseId"])
                if not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", block["toolUse"]["toolUseId"]):
                    return f"messages.{i}.content.{j}.toolUse.toolUseId: Member must satisfy regular expression pattern: [a-zA-Z0-9_-]+"
            if "toolResult" in block:
                if block["toolResult"]["toolUseId"] not in answered:
                    return "The number of toolResult blocks at messages.%d.content exceeds the number of toolUse blocks of previous turn." % i
            if "image" in block and block["image"]["format"] not in ("png", "jpeg", "gif", "webp"):
                return f"messages.{i}.content.{j}.image.format: not a supported format"
    return None


def check(cloud: dict, method: str, path: str, headers: list, body: bytes):
    """A Converse request as Bedrock takes it (cloud_mock.Accepted) or refuses it."""
    m = PATH.match(path)
    if method != "POST" or not m:
        return cloud_mock._aws_error(404, "UnknownOperationException", "Unknown operation",
                                     f"not a Converse path: {path}")
    if cloud.get("api_key"):
        if cloud_mock._header(headers, "authorization") != f"Bearer {cloud['api_key']}":
            return cloud_mock._aws_error(403, "AccessDeniedException", "Invalid API key",
                                         "wrong or missing Bedrock API key")
    else:
        why = cloud_mock.check_sigv4(method, path, headers, body, cloud["access_key"],
                                     cloud["secret_key"], cloud["region"], "bedrock")
        if why is not None:
            return cloud_mock._aws_error(
                403, "InvalidSignatureException",
                "The request signature we calculated does not match the signature you provided.", why)
    model = urllib.parse.unquote(m.group(1))
    bad = problem(cloud_mock._json_object(body), model)
    if bad is not None:
        return cloud_mock._aws_error(400, "ValidationException", bad, bad)
    stream = m.group(2) == "converse-stream"
    return cloud_mock.Accepted("converse", model, stream, framed=stream)


def usage(b: dict) -> dict:
    """The usage an answer reports (the behaviour's ``usage``, else 5 in and 7 out)."""
    u = dict(b.get("usage", {"inputTokens": 5, "outputTokens": 7}))
    u.setdefault("totalTokens", u.get("inputTokens", 0) + u.get("outputTokens", 0)
                 + u.get("cacheReadInputTokens", 0) + u.get("cacheWriteInputTokens", 0))
    return u


def _call_id(call: dict, k: int) -> str:
    return call.get("id") or f"tooluse_mock_{k}"


def _arguments(call: dict) -> Any:
    args = call.get("arguments", {})
    return json.loads(args) if isinstance(args, str) else args


def answer(name: str, rid: int, model: Any, b: dict) -> dict:
    calls = b.get("tool_calls") or []
    content = b.get("content", None if calls else f"Hello from {name} (model {model})")
    blocks = ([{"text": content}] if content is not None else []) + [
        {"toolUse": {"toolUseId": _call_id(c, k), "name": c["name"], "input": _arguments(c)}}
        for k, c in enumerate(calls)]
    return {"output": {"message": {"role": "assistant", "content": blocks}},
            "stopReason": b.get("stop_reason", "tool_use" if calls else "end_turn"),
            "usage": usage(b), "metrics": {"latencyMs": 12}}


def _sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def stream_events(name: str, rid: int, model: Any, texts: list[str],
                  b: dict) -> tuple[list[bytes], list[bytes]]:
    """Converse's events as SSE (cloud_mock.frame_sse frames each under its name): one text
    delta per text (event *i* carries ``texts[i]``, the first with messageStart), each tool
    call as a block of its own with its input in three pieces, then messageStop and metadata."""
    calls = b.get("tool_calls") or []
    start = _sse("messageStart", {"role": "assistant"})
    events = [_sse("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": t}})
              for t in texts]
    if events:
        events[0] = start + events[0]
        events[-1] += _sse("contentBlockStop", {"contentBlockIndex": 0})
    trailer = [] if events else [start]
    index = 1 if events else 0
    for k, call in enumerate(calls):
        trailer.append(_sse("contentBlockStart", {"contentBlockIndex": index, "start": {
            "toolUse": {"toolUseId": _call_id(call, k), "name": call["name"]}}}))
        args = json.dumps(_arguments(call))
        third = max(1, len(args) // 3)
        for piece in (args[:third], args[third:2 * third], args[2 * third:]):
            if piece:
                trailer.append(_sse("contentBlockDelta", {
                    "contentBlockIndex": index, "delta": {"toolUse": {"input": piece}}}))
        trailer.append(_sse("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    stop = b.get("stop_reason", "tool_use" if calls else "end_turn")
    trailer.append(_sse("messageStop", {"stopReason": stop}))
    trailer.append(_sse("metadata", {"usage": usage(b), "metrics": {"latencyMs": 12}}))
    return events, trailer


def error_body(status: int, name: str, model: Any, b: dict) -> dict:
    body = {"message": f"mock {name}: HTTP {status} for model {model}"}
    body.update(b.get("error", {}))
    return body
