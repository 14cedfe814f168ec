"""Gemini's native API (Google AI's ``generativelanguage.googleapis.com``), for the mock provider
(stdlib only): ``MockProvider(name, cloud={"kind": "gemini", "api_key": KEY})``.

* ``POST /v1beta/models/{model}:generateContent`` answers a ``GenerateContentResponse`` (JSON);
  ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` streams whole
  ``GenerateContentResponse`` chunks as ``data: {...}\\r\\n\\r\\n`` (no end marker; the last chunk
  carries ``finishReason`` and ``usageMetadata``). A stream without ``alt=sse`` is refused (the
  real API then answers a JSON array, which no SDK reading SSE takes).
* The key must be ``x-goog-api-key: KEY`` (or ``?key=KEY``), as Google AI takes it.
* With ``project``, ``region`` and ``token`` in the cloud, Vertex AI's path for Google's models
  is served too, ``/v1/projects/{project}/locations/{region}/publishers/google/models/{model}:
  generateContent`` (``:streamGenerateContent?alt=sse``), with ``authorization: Bearer TOKEN``.
* The body is checked as Google's JSON parser checks it: an unknown member anywhere is
  ``400 INVALID_ARGUMENT "Invalid JSON payload received. Unknown name ..."`` (``model`` and
  ``stream`` included: both belong in the path), ``contents`` must be non-empty with roles
  ``user`` / ``model``, each part one of ``text``, ``inlineData``, ``fileData``,
  ``functionCall``, ``functionResponse`` (and ``thought`` / ``thoughtSignature``), a
  ``functionResponse`` turn must come right after the ``functionCall`` turn it answers, with the
  same names, and a declaration takes ``parameters`` or ``parametersJsonSchema``, not both.
* As Gemini 3: a call answered with a ``thoughtSignature`` (a ``tool_calls`` entry's
  ``signature``) that comes back in a model turn without that signature is refused, and for a
  model of Gemini 3 or later (the path's; not ``gemini-1*`` / ``gemini-2*``, which check no
  signature) so is a step (a ``model`` turn) of the current turn (the turns after the last
  ``user`` turn with a ``text``, ``inlineData`` or ``fileData`` part) whose first
  ``functionCall`` part has no ``thoughtSignature`` at all (Google's placeholder
  ``skip_thought_signature_validator`` passes).

Errors are Google's ``{"error": {"code", "message", "status"}}``. The answer's ``modelVersion``
is the model in the path.
"""
from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

_PATH = re.compile(r"^/v1beta/models/([^/:]+):(generateContent|streamGenerateContent)$")
# Vertex AI's path for Google's models: /v1/projects/{p}/locations/{l}/publishers/google/...
_VERTEX = re.compile(r"^/v1/projects/([^/]+)/locations/([^/]+)/publishers/google/models/"
                     r"([^/:]+):(generateContent|streamGenerateContent)$")

STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
          404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE",
          504: "DEADLINE_EXCEEDED"}

# What Google's parser takes (camelCase; proto JSON takes snake_case names too).
REQUEST = {"contents", "systemInstruction", "tools", "toolConfig", "safetySettings",
           "generationConfig", "cachedContent"}
CONTENT = {"role", "parts"}
PART = {"text", "inlineData", "fileData", "functionCall", "functionResponse", "thought",
        "thoughtSignature", "executableCode", "codeExecutionResult", "videoMetadata"}
GENERATION = {"maxOutputTokens", "temperature", "topP", "topK", "stopSequences",
              "candidateCount", "responseMimeType", "responseSchema", "responseJsonSchema",
              "thinkingConfig", "seed", "presencePenalty", "frequencyPenalty", "responseLogprobs",
              "logprobs", "responseModalities"}
TOOL = {"functionDeclarations", "googleSearch", "codeExecution", "urlContext"}
DECLARATION = {"name", "description", "parameters", "parametersJsonSchema", "response",
               "responseJsonSchema", "behavior"}


def error(status: int, message: str) -> dict:
    return {"error": {"code": status, "message": message, "status": STATUS.get(status, "UNKNOWN")}}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _unknown(doc: Any, allowed: set, where: str) -> str | None:
    if not isinstance(doc, dict):
        return f"Invalid value at '{where}': not an object"
    for k in doc:
        if _camel(k) not in allowed:
            at = f"{where}." if where else ""
            return f'Invalid JSON payload received. Unknown name "{k}" at \'{at}\': Cannot find field.'
    return None


def _get(doc: dict, name: str) -> Any:
    snake = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)
    return doc.get(name, doc.get(snake))


def checks_signatures(model: str) -> bool:
    """Whether Google checks the current turn's signatures for this model (Gemini 3 on)."""
    return not model.startswith(("gemini-1", "gemini-2"))


def problem(body: bytes, model: str = "gemini-3-pro-preview") -> str | None:
    """Why Gemini refuses this generateContent body to `model` (its own wording), or None."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return "Invalid JSON payload received."
    bad = _unknown(doc, REQUEST, "")
    if bad:
        return bad
    contents = _get(doc, "contents")
    if not isinstance(contents, list) or not contents:
        return "* GenerateContentRequest.contents: contents is not specified"
    calls: list[str] | None = None
    current = max((i for i, c in enumerate(contents) if isinstance(c, dict)
                   and c.get("role") == "user" and isinstance(c.get("parts"), list)
                   and any(isinstance(p, dict) and {"text", "inlineData", "fileData"} & set(p)
                           for p in c["parts"])), default=0)
    for i, c in enumerate(contents):
        bad = _unknown(c, CONTENT, f"contents[{i}]")
        if bad:
            return bad
        if c.get("role") not in ("user", "model"):
            return f"Please use a valid role: user, model. (contents[{i}].role {c.get('role')!r})"
        parts = c.get("parts")
        if not isinstance(parts, list) or not parts:
            return f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
        answered = []
        for j, p in enumerate(parts):
            bad = _part(p, f"contents[{i}].parts[{j}]")
            if bad:
                return bad
            if "functionResponse" in p:
                answered.append(p["functionResponse"]["name"])
            call = p.get("functionCall")
            signed = call and SIGNED.get((call["name"], json.dumps(call.get("args", {}),
                                                                     sort_keys=True)))
            if signed and _signature(p.get("thoughtSignature", "")) != _signature(signed):
                return ("Function call is missing a thought_signature in functionCall parts. "
                        "This is required for tools to work correctly, and missing "
                        "thought_signature may lead to degraded model performance. "
                        f"Additional data, function call `{call['name']}` , position {i}.")
        if answered and (c["role"] != "user" or sorted(answered) != sorted(calls or [])):
            return ("Please ensure that function response turn comes immediately after a "
                    "function call turn. And the number of function response parts should be "
                    "equal to number of function call parts of the function call turn.")
        calls = [p["functionCall"]["name"] for p in parts if "functionCall" in p] or None
        first = next((p for p in parts if "functionCall" in p), None)
        if i > current and first is not None and not _get(first, "thoughtSignature") \
                and checks_signatures(model):
            return (f"Function call is missing a thought_signature in functionCall parts. This "
                    f"is required for tools to work correctly, and missing thought_signature "
                    f"may lead to degraded model performance. Additional data, function call "
                    f"`{first['functionCall']['name']}` , position {i}.")
    system = _get(doc, "systemInstruction")
    if system is not None:
        bad = _unknown(system, CONTENT, "system_instruction")
        if bad or not all(isinstance(p, dict) and set(p) == {"text"} for p in system.get("parts", [])):
            return bad or "systemInstruction parts must be text"
    config = _get(doc, "generationConfig")
    if config is not None:
        bad = _unknown(config, GENERATION, "generation_config")
        if bad:
            return bad
    for k, tool in enumerate(_get(doc, "tools") or []):
        bad = _unknown(tool, TOOL, f"tools[{k}]")
        if bad:
            return bad
        for d in _get(tool, "functionDeclarations") or []:
            bad = _unknown(d, DECLARATION, f"tools[{k}].function_declarations")
            if bad:
                return bad
            if "parameters" in d and _get(d, "parametersJsonSchema") is not None:
                return "parameters and parameters_json_schema cannot both be set"
    choice = _get(doc, "toolConfig")
    if choice is not None:
        mode = (_get(choice, "functionCallingConfig") or {}).get("mode")
        if mode not in ("AUTO", "ANY", "NONE", "VALIDATED"):
            return f"Invalid value at 'tool_config.function_calling_config.mode' ({mode!r})"
    return None


def _part(p: Any, where: str) -> str | None:
    bad = _unknown(p, PART, where)
    if bad:
        return bad
    data = [k for k in p if _camel(k) not in ("thought", "thoughtSignature")]
    if len(data) != 1:
        return f"Unable to submit request because {where} must have exactly one data field."
    kind = _camel(data[0])
    value = p[data[0]]
    if kind == "text" and not isinstance(value, str):
        return f"Invalid value at '{where}.text' (TYPE_STRING)"
    blob = {_camel(k): v for k, v in value.items()} if isinstance(value, dict) else {}
    if kind == "inlineData" and not (blob.get("mimeType") and isinstance(blob.get("data"), str)):
        return f"{where}.inline_data needs mimeType and data"
    if kind == "functionCall" and not (isinstance(value, dict) and isinstance(value.get("name"), str)
                                       and isinstance(value.get("args", {}), dict)):
        return f"{where}.function_call needs a name and an args object"
    if kind == "functionResponse" and not (
            isinstance(value, dict) and isinstance(value.get("name"), str)
            and isinstance(value.get("response"), dict)):
        return f"{where}.function_response needs a name and a response object"
    return None


def path_model(path: str) -> str | None:
    """The model a Google AI or Vertex AI generateContent path names."""
    p = path.partition("?")[0]
    m = _PATH.match(p) or _VERTEX.match(p)
    if not m:
        return None
    return urllib.parse.unquote(m.group(1) if m.re is _PATH else m.group(3))


def check(cloud: dict, path: str, headers: list, body: bytes):
    """Accepted (the model and whether it streams) or Refused, as Google AI answers."""
    import cloud_mock
    p, _, query = path.partition("?")
    q = urllib.parse.parse_qs(query)
    vertex = _VERTEX.match(p)
    if vertex and cloud.get("project"):
        # Vertex AI (``project``, ``region``, ``token`` in the cloud): an OAuth bearer token.
        if (vertex.group(1), vertex.group(2)) != (cloud["project"], cloud["region"]):
            return cloud_mock.Refused(404, f"not this project's path: {path}",
                                      error(404, f"Publisher model not found: {p}"))
        if cloud_mock._header(headers, "authorization") != f"Bearer {cloud['token']}":
            return cloud_mock.Refused(401, "wrong or missing bearer token", error(
                401, "Request had invalid authentication credentials."))
        stream = vertex.group(4) == "streamGenerateContent"
        if stream and q.get("alt") != ["sse"]:
            return cloud_mock.Refused(400, "a stream without alt=sse", error(400, "alt=sse expected"))
        bad = problem(body, urllib.parse.unquote(vertex.group(3)))
        if bad:
            return cloud_mock.Refused(400, bad, error(400, bad))
        return cloud_mock.Accepted("gemini", urllib.parse.unquote(vertex.group(3)), stream)
    m = _PATH.match(p)
    if not m:
        return cloud_mock.Refused(404, f"not a generateContent path: {path}",
                                  error(404, f"Method not found: {p}"))
    key = cloud_mock._header(headers, "x-goog-api-key") or (q.get("key") or [None])[0]
    if key != cloud["api_key"]:
        return cloud_mock.Refused(400, "wrong or missing x-goog-api-key", {"error": {
            "code": 400, "message": "API key not valid. Please pass a valid API key.",
            "status": "INVALID_ARGUMENT", "details": [{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
                "metadata": {"service": "generativelanguage.googleapis.com"}}]}})
    stream = m.group(2) == "streamGenerateContent"
    if stream and q.get("alt") != ["sse"]:
        return cloud_mock.Refused(400, "a stream without alt=sse", error(400, "alt=sse expected"))
    bad = problem(body, urllib.parse.unquote(m.group(1)))
    if bad:
        return cloud_mock.Refused(400, bad, error(400, bad))
    return cloud_mock.Accepted("gemini", urllib.parse.unquote(m.group(1)), stream)


# The thoughtSignature each signed call was answered with ({(name, args JSON): signature}):
# Gemini 3 refuses a conversation that sends such a call back without it.
SIGNED: dict = {}


def _signature(s: str) -> str:
    """A signature's bytes as one spelling (Google's parser takes base64 and base64url)."""
    return s.replace("-", "+").replace("_", "/").rstrip("=")


def _call_part(call: dict) -> dict:
    args = call.get("arguments", {})
    args = json.loads(args) if isinstance(args, str) else args
    part = {"functionCall": {"name": call["name"], "args": args}}
    if call.get("signature"):
        part["thoughtSignature"] = call["signature"]
        SIGNED[(call["name"], json.dumps(args, sort_keys=True))] = call["signature"]
    return part


def usage(b: dict) -> dict:
    """The usageMetadata an answer reports (the behaviour's ``usage``, else 5 in and 7 out)."""
    return b.get("usage", {"promptTokenCount": 5, "candidatesTokenCount": 7,
                           "totalTokenCount": 12})


def answer(name: str, rid: int, model: Any, b: dict) -> dict:
    calls = b.get("tool_calls") or []
    content = b.get("content", None if calls else f"Hello from {name} (model {model})")
    parts = ([{"text": content}] if content is not None else []) + [_call_part(c) for c in calls]
    return {"candidates": [{"content": {"parts": parts, "role": "model"},
                            "finishReason": b.get("stop_reason", "STOP"), "index": 0}],
            "usageMetadata": usage(b), "modelVersion": model,
            "responseId": f"mock-{name}-{rid}"}


def stream_events(name: str, rid: int, model: Any, texts: list[str],
                  b: dict) -> tuple[list[bytes], list[bytes]]:
    """One chunk per text (event *i* carries ``texts[i]``), the calls and the finish reason in
    the last chunk, with the usage."""
    calls = b.get("tool_calls") or []

    def chunk(parts: list, last: bool) -> bytes:
        cand: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if last:
            cand["finishReason"] = b.get("stop_reason", "STOP")
        doc = {"candidates": [cand], "usageMetadata": usage(b), "modelVersion": model,
               "responseId": f"mock-{name}-{rid}"}
        return b"data: " + json.dumps(doc).encode() + b"\r\n\r\n"

    events = [chunk([{"text": t}], i == len(texts) - 1 and not calls) for i, t in enumerate(texts)]
    trailer = [chunk([_call_part(c) for c in calls], True)] if calls or not texts else []
    return events, trailer


def error_body(status: int, name: str, model: Any, b: dict) -> dict:
    body = error(status, f"mock {name}: HTTP {status} for model {model}")
    body["error"].update(b.get("error", {}))
    return body

