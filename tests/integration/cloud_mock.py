"""What the clouds wrap around the APIs, for the mock provider: each cloud's paths and
credentials checked the way the cloud checks them, and Bedrock's binary event stream.

``MockProvider(name, cloud={...})`` turns a mock into one cloud's endpoint:

* ``{"kind": "bedrock", "access_key", "secret_key", "region"}``: AWS Bedrock InvokeModel, and
  its Converse API on ``/model/{id}/converse`` and ``/converse-stream`` (``converse_mock.py``).
  ``POST /model/{id}/invoke`` (JSON) and ``/invoke-with-response-stream`` (the answer's Anthropic
  events framed as ``application/vnd.amazon.eventstream``). Every request must be signed with
  AWS Signature V4 for service ``bedrock``: the signature is recomputed with botocore over the
  method, path, signed headers and **the body received**, whose SHA-256 must also match
  ``x-amz-content-sha256``. Or, with ``"api_key"``, a Bedrock API key as
  ``authorization: Bearer <key>``. The body must carry ``anthropic_version:
  bedrock-2023-05-31`` and neither ``model`` nor ``stream``.
* ``{"kind": "vertex", "project", "region", "token"}``: Claude on Vertex AI (``"tokens": [...]``
  accepts any of several, as while a token is rotated),
  ``POST /v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict``
  (``:streamRawPredict`` streams Anthropic SSE), ``authorization: Bearer <token>``, body with
  ``anthropic_version: vertex-2023-10-16`` and no ``model``.
* ``{"kind": "gemini", "api_key"}``: Gemini's native API on Google AI (``gemini_mock.py``).
* ``{"kind": "azure", "api_key", "api_version"}``: Azure OpenAI,
  ``POST /openai/deployments/{deployment}/chat/completions?api-version=<api_version>`` (or
  ``/openai/v1/chat/completions``), ``api-key: <key>``.

A request the cloud would refuse is answered as the cloud answers it (403/401/400 in its error
shape) and its record gets ``rejected`` (why). Bedrock's errors for a request it took
(``x-amzn-ErrorType`` and ``{"message"}``: throttling, quotas, model timeouts, an input too long,
...) are mock presets, ``{"preset": "bedrock_throttling"}`` (:data:`BEDROCK_ERRORS`). The answer's ``model`` is the one in the path.
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
import urllib.parse
import zlib

BEDROCK_VERSION = "bedrock-2023-05-31"
VERTEX_VERSION = "vertex-2023-10-16"
KINDS = {"bedrock", "vertex", "azure", "gemini"}

_BEDROCK_PATH = re.compile(r"^/model/([^/]+)/(invoke|invoke-with-response-stream)$")
_VERTEX_PATH = re.compile(
    r"^/v1/projects/([^/]+)/locations/([^/]+)/publishers/anthropic/models/([^/:]+)"
    r":(rawPredict|streamRawPredict)$")
_AZURE_PATH = re.compile(r"^/openai/deployments/([^/]+)/chat/completions$")
_SIGV4 = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, ?"
                    r"SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})$")


class Accepted:
    """A request the cloud takes: the API inside the envelope, the model and whether it streams
    (from the path where the cloud puts them there)."""

    def __init__(self, api: str, model: str, stream: bool | None, framed: bool = False):
        self.api = api
        self.model = model
        self.stream = stream
        self.framed = framed  # answer a stream as AWS event-stream frames


class Refused:
    def __init__(self, status: int, why: str, body: dict, headers: list | None = None):
        self.status = status
        self.why = why
        self.body = body
        self.headers = headers or []


def validate(cloud: dict) -> dict:
    if not isinstance(cloud, dict) or cloud.get("kind") not in KINDS:
        raise ValueError(f"cloud must be an object with kind in {sorted(KINDS)}")
    return dict(cloud)


def check(cloud: dict, method: str, path: str, headers: list, body: bytes) -> Accepted | Refused:
    kind = cloud["kind"]
    if kind == "bedrock":
        return _bedrock(cloud, method, path, headers, body)
    if kind == "vertex":
        return _vertex(cloud, path, headers, body)
    if kind == "gemini":
        import gemini_mock
        return gemini_mock.check(cloud, path, headers, body)
    return _azure(cloud, path, headers)


def _header(headers: list, name: str) -> str | None:
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


def _json_object(body: bytes) -> dict | None:
    try:
        v = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return v if isinstance(v, dict) else None


def aws_error_headers(kind: str) -> list:
    """The header where AWS names an error's type, as Bedrock sends it."""
    return [("x-amzn-ErrorType", f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/")]


def _aws_error(status: int, kind: str, message: str, why: str) -> Refused:
    return Refused(status, why, {"message": message}, aws_error_headers(kind))


# Bedrock's own answers to a request it took (InvokeModel's documented errors, with the
# messages it sends), as mock presets: ``{"preset": "bedrock_throttling"}``.
BEDROCK_ERRORS = {
    "bedrock_input_too_long": (400, "ValidationException", "Input is too long for requested model."),
    "bedrock_content_filter": (400, "ValidationException",
                               "This request has been blocked by our content filters."),
    "bedrock_validation": (400, "ValidationException",
                           "Malformed input request, please reformat your input and try again."),
    "bedrock_throttling": (429, "ThrottlingException",
                           "Too many requests, please wait before trying again."),
    "bedrock_quota": (400, "ServiceQuotaExceededException",
                      "Too many tokens per day, please wait before trying again."),
    "bedrock_model_not_ready": (429, "ModelNotReadyException",
                                "Model is not ready to serve inference requests. Please try again."),
    "bedrock_model_timeout": (408, "ModelTimeoutException",
                              "Model has timed out in processing the request. Try your request again."),
    "bedrock_unavailable": (503, "ServiceUnavailableException",
                            "Bedrock is unable to process your request."),
    "bedrock_access_denied": (403, "AccessDeniedException",
                              "You don't have access to the model with the specified model ID."),
}


def bedrock_presets() -> dict[str, dict]:
    """:data:`BEDROCK_ERRORS` as mock behaviours."""
    return {name: {"status": status, "body": {"message": message},
                   "headers": [list(h) for h in aws_error_headers(kind)]}
            for name, (status, kind, message) in BEDROCK_ERRORS.items()}


def _bedrock(cloud, method, path, headers, body) -> Accepted | Refused:
    import converse_mock
    if converse_mock.PATH.match(path):
        return converse_mock.check(cloud, method, path, headers, body)
    m = _BEDROCK_PATH.match(path)
    if method != "POST" or not m:
        return _aws_error(404, "UnknownOperationException", "Unknown operation", f"not an InvokeModel path: {path}")
    if cloud.get("api_key"):
        if _header(headers, "authorization") != f"Bearer {cloud['api_key']}":
            return _aws_error(403, "AccessDeniedException", "Invalid API key", "wrong or missing Bedrock API key")
    else:
        why = check_sigv4(method, path, headers, body, cloud["access_key"], cloud["secret_key"],
                          cloud["region"], "bedrock")
        if why is not None:
            return _aws_error(403, "InvalidSignatureException",
                              "The request signature we calculated does not match the signature you provided.", why)
    doc = _json_object(body)
    if doc is None:
        return _aws_error(400, "ValidationException", "Malformed input request", "body is not a JSON object")
    for bad in ("model", "stream"):
        if bad in doc:
            return _aws_error(400, "ValidationException",
                              f"Malformed input request: extraneous key [{bad}] is not permitted",
                              f"body has {bad}")
    if doc.get("anthropic_version") != BEDROCK_VERSION:
        return _aws_error(400, "ValidationException", "Malformed input request: anthropic_version",
                          f"anthropic_version is {doc.get('anthropic_version')!r}")
    model = urllib.parse.unquote(m.group(1))
    return Accepted("messages", model, m.group(2) == "invoke-with-response-stream",
                    framed=m.group(2) == "invoke-with-response-stream")


def _google_error(status: int, state: str, message: str, why: str) -> Refused:
    return Refused(status, why, {"error": {"code": status, "message": message, "status": state}})


def _vertex(cloud, path, headers, body) -> Accepted | Refused:
    m = _VERTEX_PATH.match(path)
    if not m or (m.group(1), m.group(2)) != (cloud["project"], cloud["region"]):
        return _google_error(404, "NOT_FOUND", "Not found", f"not this project's rawPredict path: {path}")
    tokens = cloud.get("tokens") or [cloud["token"]]  # several while one is rotated out
    if _header(headers, "authorization") not in [f"Bearer {t}" for t in tokens]:
        return _google_error(401, "UNAUTHENTICATED",
                             "Request had invalid authentication credentials. Expected OAuth 2 access token.",
                             "wrong or missing bearer token")
    doc = _json_object(body)
    if doc is None or "model" in doc or doc.get("anthropic_version") != VERTEX_VERSION:
        return _google_error(400, "INVALID_ARGUMENT", "Invalid request body",
                             "body must have anthropic_version vertex-2023-10-16 and no model")
    stream = m.group(4) == "streamRawPredict"
    if bool(doc.get("stream")) != stream:
        return _google_error(400, "INVALID_ARGUMENT", "stream must match the method",
                             "stream field does not match the method")
    return Accepted("messages", urllib.parse.unquote(m.group(3)), stream)


def _azure(cloud, path, headers) -> Accepted | Refused:
    p, _, query = path.partition("?")
    m = _AZURE_PATH.match(p)
    version = urllib.parse.parse_qs(query).get("api-version", [None])[0]
    if m and version != cloud.get("api_version"):
        return Refused(404, f"api-version {version!r}", {"error": {"code": "404", "message": "Resource not found"}})
    if not m and p != "/openai/v1/chat/completions":
        return Refused(404, f"not an Azure OpenAI path: {path}", {"error": {"code": "404", "message": "Resource not found"}})
    if _header(headers, "api-key") != cloud["api_key"]:
        return Refused(401, "wrong or missing api-key", {"error": {"code": "401", "message":
                       "Access denied due to invalid subscription key or wrong API endpoint."}})
    return Accepted("chat", urllib.parse.unquote(m.group(1)) if m else None, None)


# ------------------------------------------------------------------ AWS Signature V4
def check_sigv4(method: str, path: str, headers: list, body: bytes, access_key: str,
                secret_key: str, region: str, service: str) -> str | None:
    """None when AWS would accept the request's signature; else why not. The signature is
    recomputed by botocore's SigV4 signer over the headers the request says it signed."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.compat import HTTPHeaders
    from botocore.credentials import Credentials

    lower: dict[str, list[str]] = {}
    for k, v in headers:
        lower.setdefault(k.lower(), []).append(v)
    auth = (lower.get("authorization") or [""])[0]
    m = _SIGV4.match(auth)
    if not m:
        return "missing or malformed SigV4 authorization"
    key, day, reg, svc, signed, signature = m.groups()
    if key != access_key:
        return "unknown access key"
    if (reg, svc) != (region, service):
        return f"wrong credential scope {reg}/{svc}"
    # Optional for Bedrock (botocore's client sends none; Envoy's signer does): the signature
    # covers the body's hash either way, and when the header is there it must be the body's.
    sent_hash = lower.get("x-amz-content-sha256")
    if sent_hash is not None and sent_hash[0] != hashlib.sha256(body).hexdigest():
        return "x-amz-content-sha256 does not match the body received"
    amz_date = (lower.get("x-amz-date") or [""])[0]
    if not amz_date.startswith(day):
        return "x-amz-date outside the credential scope"
    names = signed.split(";")
    if "host" not in names or "x-amz-date" not in names:
        return "host and x-amz-date must be signed"
    missing = [n for n in names if n not in lower]
    if missing:
        return f"signed headers missing: {missing}"

    class Signer(SigV4Auth):
        def headers_to_sign(self, request):
            h = HTTPHeaders()
            for name in names:
                h[name] = request.headers[name]
            return h

    req = AWSRequest(method=method, url=f"http://{lower['host'][0]}{path}", data=body,
                     headers={n: ",".join(v.strip() for v in lower[n]) for n in names})
    req.context["timestamp"] = amz_date
    signer = Signer(Credentials(access_key, secret_key), service, region)
    expected = signer.signature(signer.string_to_sign(req, signer.canonical_request(req)), req)
    if expected != signature:
        return "signature does not match"
    return None


# ------------------------------------------------------------------ AWS event stream
def _header_bytes(name: str, value: str) -> bytes:
    n, v = name.encode(), value.encode()
    return struct.pack("B", len(n)) + n + b"\x07" + struct.pack(">H", len(v)) + v


def frame(headers: list[tuple[str, str]], payload: bytes) -> bytes:
    """One event-stream message (CRCs by zlib, independent of the filter's own)."""
    h = b"".join(_header_bytes(k, v) for k, v in headers)
    prelude = struct.pack(">II", 12 + len(h) + len(payload) + 4, len(h))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    msg = prelude + h + payload
    return msg + struct.pack(">I", zlib.crc32(msg))


_EXCEPTIONS = {"overloaded_error": "serviceUnavailableException",
               "rate_limit_error": "throttlingException",
               "api_error": "internalServerException"}


def frame_sse(sse: bytes) -> bytes:
    """Anthropic SSE events as Bedrock sends them: each event's data base64-wrapped in a
    ``chunk`` event; an ``event: error`` as an exception message. A Converse event (its name
    one of ``converse_mock.EVENTS``) is framed under its own name, its JSON the payload."""
    import converse_mock
    out = b""
    for event in sse.replace(b"\r\n", b"\n").split(b"\n\n"):
        name, data = None, []
        for line in event.split(b"\n"):
            if line.startswith(b"event:"):
                name = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                data.append(line[5:].strip())
        if not data:
            continue
        payload = b"\n".join(data)
        if name == "error":
            err = json.loads(payload).get("error", {})
            kind = _EXCEPTIONS.get(err.get("type"), "internalServerException")
            out += frame([(":exception-type", kind), (":content-type", "application/json"),
                          (":message-type", "exception")],
                         json.dumps({"message": err.get("message", "")}).encode())
            continue
        if name in converse_mock.EVENTS:
            out += frame([(":event-type", name), (":content-type", "application/json"),
                          (":message-type", "event")], payload)
            continue
        wrapped = json.dumps({"bytes": base64.b64encode(payload).decode(), "p": "abcdefghij"})
        out += frame([(":event-type", "chunk"), (":content-type", "application/json"),
                      (":message-type", "event")], wrapped.encode())
    return out
