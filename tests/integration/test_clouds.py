"""The clouds' providers: Azure OpenAI deployments, Claude on AWS Bedrock (signed by
Envoy's aws_request_signing after this filter, its event stream unwrapped) and on Vertex AI,
each against a mock that checks its paths, body and credentials as the cloud does
(cloud_mock.py; Bedrock's signature recomputed by botocore over the body received)."""
import hashlib
import json
import time

import pytest

import cloud_mock
import harness

AWS = {"kind": "bedrock", "access_key": "AKIDEXAMPLE",
       "secret_key": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "region": "us-east-1"}


def _botocore_signed(body: bytes, path="/model/anthropic.claude-x%3A0/invoke"):
    """A request signed by botocore's own signer, as the AWS SDK sends it."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    req = AWSRequest(method="POST", url=f"http://bedrock-runtime.us-east-1.amazonaws.com{path}",
                     data=body, headers={"content-type": "application/json",
                                         "x-amz-content-sha256": hashlib.sha256(body).hexdigest()})
    SigV4Auth(Credentials(AWS["access_key"], AWS["secret_key"]), "bedrock", "us-east-1").add_auth(req)
    headers = [(k, v) for k, v in req.headers.items()] + [("host", "bedrock-runtime.us-east-1.amazonaws.com")]
    return path, headers


def test_mock_bedrock_accepts_what_botocore_signs_and_refuses_a_tampered_body():
    pytest.importorskip("botocore")  # not in the docker-compose run's test image
    body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 5,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    path, headers = _botocore_signed(body)
    ok = cloud_mock.check(AWS, "POST", path, headers, body)
    assert isinstance(ok, cloud_mock.Accepted), getattr(ok, "why", None)
    assert ok.model == "anthropic.claude-x:0" and ok.stream is False
    tampered = cloud_mock.check(AWS, "POST", path, headers, body.replace(b"hi", b"ho"))
    assert isinstance(tampered, cloud_mock.Refused) and tampered.status == 403
    assert "x-amz-content-sha256" in tampered.why
    # The body hash header changed to match the tampered body: the signature no longer does.
    forged = [(k, hashlib.sha256(body + b" ").hexdigest() if k.lower() == "x-amz-content-sha256" else v)
              for k, v in headers]
    refused = cloud_mock.check(AWS, "POST", path, forged, body + b" ")
    assert isinstance(refused, cloud_mock.Refused) and refused.why == "signature does not match"
    unsigned = [(k, v) for k, v in headers if k.lower() != "authorization"]
    assert cloud_mock.check(AWS, "POST", path, unsigned, body).status == 403
    with_model = json.dumps({"anthropic_version": "bedrock-2023-05-31", "model": "x"}).encode()
    path, headers = _botocore_signed(with_model)
    assert cloud_mock.check(AWS, "POST", path, headers, with_model).why == "body has model"


def test_mock_frames_read_back_by_botocore():
    pytest.importorskip("botocore")  # not in the docker-compose run's test image
    from botocore.eventstream import EventStreamBuffer
    sse = (b'event: message_start\ndata: {"type":"message_start","message":{}}\n\n'
           b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"busy"}}\n\n')
    buf = EventStreamBuffer()
    buf.add_data(cloud_mock.frame_sse(sse))
    messages = list(buf)
    assert messages[0].headers[":event-type"] == "chunk"
    inner = json.loads(messages[0].payload)["bytes"]
    import base64
    assert json.loads(base64.b64decode(inner)) == {"type": "message_start", "message": {}}
    assert messages[1].headers[":message-type"] == "exception"
    assert messages[1].headers[":exception-type"] == "serviceUnavailableException"


def test_mock_vertex_and_azure_check_paths_and_credentials():
    vertex = {"kind": "vertex", "project": "p1", "region": "us-east5", "token": "ya29.t"}
    body = json.dumps({"anthropic_version": "vertex-2023-10-16", "stream": True}).encode()
    path = "/v1/projects/p1/locations/us-east5/publishers/anthropic/models/claude-x@2025:streamRawPredict"
    ok = cloud_mock.check(vertex, "POST", path, [("authorization", "Bearer ya29.t")], body)
    assert isinstance(ok, cloud_mock.Accepted) and ok.model == "claude-x@2025" and ok.stream
    assert cloud_mock.check(vertex, "POST", path, [], body).status == 401
    azure = {"kind": "azure", "api_key": "az", "api_version": "2024-10-21"}
    p = "/openai/deployments/gpt-prod/chat/completions?api-version=2024-10-21"
    assert cloud_mock.check(azure, "POST", p, [("api-key", "az")], b"{}").model == "gpt-prod"
    assert cloud_mock.check(azure, "POST", p, [("api-key", "no")], b"{}").status == 401
    assert cloud_mock.check(azure, "POST", p.replace("2024", "2023"), [("api-key", "az")], b"{}").status == 404


# ------------------------------------------------------------------ through a real Envoy
BEDROCK_MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"
VERTEX_MODEL = "claude-sonnet-4-5@20250929"
AWS_ENV = {"AWS_ACCESS_KEY_ID": AWS["access_key"], "AWS_SECRET_ACCESS_KEY": AWS["secret_key"],
           "AWS_EC2_METADATA_DISABLED": "true"}

CLOUDS = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
providers:
  - {name: anthropic, endpoint: "127.0.0.1:${ANTHROPIC_PORT}", api: anthropic,
     credential: {header: x-api-key, value: sk-ant}}
  - {name: bedrock, endpoint: "127.0.0.1:${BEDROCK_PORT}", api: bedrock, region: us-east-1}
  - {name: vertex, endpoint: "127.0.0.1:${VERTEX_PORT}", api: vertex, project: p1, region: us-east5,
     credential: {header: authorization, prefix: "Bearer ", value: ya29.vertex-token}}
  - {name: openai, endpoint: "127.0.0.1:${OPENAI_PORT}", api: openai,
     credential: {header: authorization, prefix: "Bearer ", value: sk-openai}}
  - {name: azure, endpoint: "127.0.0.1:${AZURE_PORT}", api: azure_openai, api_version: "2024-10-21",
     credential: {header: api-key, value: az-key}}
chains:
  - name: claude
    models: ["claude-*"]
    providers: [anthropic, {provider: bedrock, model: "%(bedrock)s"}, {provider: vertex, model: "%(vertex)s"}]
  - name: claude-on-aws
    models: ["aws-claude"]
    providers: [{provider: bedrock, model: "%(bedrock)s"}, {provider: anthropic, model: claude-sonnet-4-5}]
  - name: gpt
    models: ["gpt-*"]
    providers: [openai, {provider: azure, model: gpt-4o-prod}]
  - name: gpt-on-azure
    models: ["azure-gpt"]
    providers: [{provider: azure, model: gpt-4o-prod}, {provider: openai, model: gpt-4o}]
""" % {"bedrock": BEDROCK_MODEL, "vertex": VERTEX_MODEL}

needs_router_mode = pytest.mark.skipif(
    harness.grouping_mode(),
    reason="Envoy 1.36-1.38 run only the grouping cluster's filters: the renderer refuses a "
           "signed Bedrock provider there (a Bedrock API key works; see the API-key test)")


@pytest.fixture
def clouds(gateway):
    mocks = dict(zip(["anthropic", "bedrock", "vertex", "openai", "azure"],
                     gateway.mocks("anthropic", "bedrock", "vertex", "openai", "azure")))
    if any(not hasattr(m, "server") for m in mocks.values()):
        pytest.skip("the cloud mocks run in-process")
    mocks["bedrock"].server.cloud = cloud_mock.validate(AWS)
    mocks["vertex"].server.cloud = cloud_mock.validate(
        {"kind": "vertex", "project": "p1", "region": "us-east5", "token": "ya29.vertex-token"})
    mocks["azure"].server.cloud = cloud_mock.validate(
        {"kind": "azure", "api_key": "az-key", "api_version": "2024-10-21"})
    return gateway, mocks


def _anthropic(gw):
    import anthropic
    return anthropic.Anthropic(base_url=gw.url, api_key="gw-key", max_retries=0)


def _openai(gw):
    import openai
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="gw-key", max_retries=0)


def _header(record, name):
    return [v for k, v in record["headers"] if k.lower() == name]


@needs_router_mode
def test_anthropic_sdk_fails_over_to_claude_on_bedrock_signed_and_back(clouds):
    gateway, m = clouds
    gw = gateway.start(CLOUDS, env=AWS_ENV)
    client = _anthropic(gw)
    m["anthropic"].set_default(status=529)
    msg = client.messages.create(model="claude-sonnet-4-5", max_tokens=20,
                                 messages=[{"role": "user", "content": "hi"}],
                                 extra_headers={"anthropic-beta": "token-efficient-tools-2025-02-19"})
    assert msg.content[0].text == f"Hello from bedrock (model {BEDROCK_MODEL})"
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=20,
                                messages=[{"role": "user", "content": "hi"}]) as s:
        text = "".join(s.text_stream)
    assert text == "bedrock:0 bedrock:1 bedrock:2 "
    sent = m["bedrock"].requests()
    assert [r.get("rejected") for r in sent] == [None, None], "signed as AWS checks it"
    assert sent[0]["path"] == "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke"
    assert sent[1]["path"].endswith("%3A0/invoke-with-response-stream")
    body = json.loads(sent[0]["body"])
    assert body["anthropic_version"] == "bedrock-2023-05-31" and "model" not in body
    assert body["anthropic_beta"] == ["token-efficient-tools-2025-02-19"]
    assert _header(sent[0], "anthropic-beta") == [], "Bedrock gets the flags in its body only"
    assert _header(sent[0], "x-api-key") == [], "anthropic's key stays with anthropic"
    # And back: a chain that starts on Bedrock falls over to Anthropic, which gets no AWS
    # signature, date or body hash (Envoy's signer set them on the shared header map).
    m["anthropic"].set_default({})
    m["bedrock"].set_default(status=503)
    msg = client.messages.create(model="aws-claude", max_tokens=20,
                                 messages=[{"role": "user", "content": "hi"}])
    assert msg.content[0].text == "Hello from anthropic (model claude-sonnet-4-5)"
    with client.messages.stream(model="aws-claude", max_tokens=20,
                                messages=[{"role": "user", "content": "hi"}]) as s:
        assert "".join(s.text_stream) == "anthropic:0 anthropic:1 anthropic:2 "
    assert all(r.get("rejected") is None for r in m["bedrock"].requests())
    for r in m["anthropic"].requests()[-2:]:
        assert r["path"] == "/v1/messages"
        for leaked in ("x-amz-date", "x-amz-content-sha256", "x-amz-security-token"):
            assert _header(r, leaked) == [], leaked
        assert _header(r, "authorization") == []
        assert _header(r, "x-api-key") == ["sk-ant"]


def test_a_bedrock_stream_is_unwrapped_whatever_its_chunking_and_an_exception_falls_over(clouds):
    gateway, m = clouds
    if harness.grouping_mode():  # Envoy 1.36-1.38: Bedrock with an API key
        m["bedrock"].server.cloud = cloud_mock.validate({**AWS, "api_key": "bedrock-api-key"})
        gw = gateway.start(API_KEY_CLOUDS)
    else:
        gw = gateway.start(CLOUDS, env=AWS_ENV)
    client = _anthropic(gw)
    # Frames cut every 7 bytes: messages split across body chunks, several in one chunk.
    m["bedrock"].set_default(chunk_bytes=7, chunks=5)
    with client.messages.stream(model="aws-claude", max_tokens=20,
                                messages=[{"role": "user", "content": "hi"}]) as s:
        assert "".join(s.text_stream) == "".join(f"bedrock:{i} " for i in range(5))
    assert all(r.get("rejected") is None for r in m["bedrock"].requests())
    if not harness.holds_answers():
        return  # Envoy 1.36 reads no answer's body (README "Older Envoys")
    # The first event is an exception (Bedrock's serviceUnavailableException): falls over.
    m["bedrock"].set_default(stream=True, events=[
        'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"busy"}}\n\n'])
    r = gw.chat("aws-claude", path="/v1/messages", stream=True, max_tokens=20,
                headers={"anthropic-version": "2023-06-01"})
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "anthropic"
    assert r.header("x-llm-fallback-reason") == "overloaded"
    assert "anthropic:0" in r.text


@needs_router_mode
def test_nothing_reaches_bedrock_unsigned_when_envoy_has_no_aws_credentials(clouds, tmp_path):
    gateway, m = clouds
    no_credentials = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "",
                      "AWS_EC2_METADATA_DISABLED": "true", "HOME": str(tmp_path),
                      "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
                      "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_PROFILE": ""}
    gw = gateway.start(CLOUDS, env=no_credentials)
    for stream in (False, True):
        r = gw.chat("aws-claude", path="/v1/messages", stream=stream, max_tokens=20,
                    headers={"anthropic-version": "2023-06-01"})
        # Envoy sends an upstream filter's own reply straight to the caller (no retry).
        assert r.status == 502, r.text
        assert "was not signed" in r.text and r.header("x-llm-provider") == "bedrock"
    assert m["bedrock"].requests() == [], "nothing left Envoy for Bedrock, signed or not"
    assert "a Bedrock request was not signed" in gw.log()
    # Each one counted toward Bedrock's breaker (default 10 in 30 s): once open, the chain
    # skips Bedrock and the SDK is served by the next provider.
    for _ in range(8):
        gw.chat("aws-claude", path="/v1/messages", max_tokens=20,
                headers={"anthropic-version": "2023-06-01"})
    msg = _anthropic(gw).messages.create(model="aws-claude", max_tokens=20,
                                         messages=[{"role": "user", "content": "hi"}])
    assert msg.content[0].text.startswith("Hello from anthropic")
    assert m["bedrock"].requests() == []


@needs_router_mode
def test_what_the_filter_changes_after_signing_breaks_the_signature(clouds, gateway_wrong_order):
    """The negative control: with this filter placed *after* the signer (the wrong order), the
    request it rewrites is not the request signed, and the Bedrock mock refuses every one: the
    rendered order (this filter, then the signer) is what makes signatures hold, as every
    other test here shows with the mock checking each signature."""
    gateway, m = clouds
    gw = gateway_wrong_order(gateway, CLOUDS, AWS_ENV)
    r = gw.chat("aws-claude", path="/v1/messages", max_tokens=20,
                headers={"anthropic-version": "2023-06-01"})
    assert (r.status, r.header("x-llm-provider")) == (403, "bedrock"), r.text
    # This filter rewrites the body and clears every provider's credential headers, the
    # signature's among them: whatever it changes after the signer breaks the signature.
    reasons = {x.get("rejected") for x in m["bedrock"].requests()}
    assert reasons and None not in reasons, reasons


@pytest.fixture
def gateway_wrong_order(tmp_path):
    import yaml

    def start(gateway, source, env):
        path = harness.render_config(source, {**gateway.env, **env}, out_dir=tmp_path / "wrong")
        config = yaml.safe_load(path.read_text())
        for c in config["static_resources"]["clusters"]:
            opts = c.get("typed_extension_protocol_options", {})
            for o in opts.values():
                f = o.get("http_filters", [])
                if len(f) == 4:  # wasm, signer, guard, codec -> signer, guard, wasm, codec
                    o["http_filters"] = [f[1], f[2], f[0], f[3]]
        path.write_text(yaml.safe_dump(config))
        return gateway.start_bootstrap(path, env=env)
    return start


# Bedrock with an API key (bearer) instead of Envoy's signer: renders on every Envoy.
API_KEY_CLOUDS = CLOUDS.replace(
    "api: bedrock, region: us-east-1}",
    "api: bedrock, credential: {header: authorization, prefix: \"Bearer \", value: bedrock-api-key}}")


def test_claude_on_vertex_and_a_bedrock_api_key(clouds):
    gateway, m = clouds
    assert API_KEY_CLOUDS != CLOUDS
    m["bedrock"].server.cloud = cloud_mock.validate({**AWS, "api_key": "bedrock-api-key"})
    gw = gateway.start(API_KEY_CLOUDS)
    client = _anthropic(gw)
    m["anthropic"].set_default(status=500)
    m["bedrock"].set_default(status=503)
    msg = client.messages.create(model="claude-sonnet-4-5", max_tokens=20,
                                 messages=[{"role": "user", "content": "hi"}],
                                 extra_headers={"anthropic-beta": "flag-a,flag-b"})
    assert msg.content[0].text == f"Hello from vertex (model {VERTEX_MODEL})"
    # The caller's beta flags: Anthropic and Vertex take the header, Bedrock only its body.
    first_bedrock = m["bedrock"].requests()[0]
    assert _header(first_bedrock, "anthropic-beta") == [], "in the body only"
    assert _header(first_bedrock, "anthropic-version") == []
    assert json.loads(first_bedrock["body"])["anthropic_beta"] == ["flag-a", "flag-b"]
    assert _header(m["anthropic"].requests()[0], "anthropic-beta") == ["flag-a,flag-b"]
    assert _header(m["vertex"].requests()[0], "anthropic-beta") == ["flag-a,flag-b"]
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=20,
                                messages=[{"role": "user", "content": "hi"}]) as s:
        assert "".join(s.text_stream) == "vertex:0 vertex:1 vertex:2 "
    for mock in ("bedrock", "vertex"):
        assert all(r.get("rejected") is None for r in m[mock].requests()), m[mock].requests()
    assert len(m["bedrock"].requests()) == 2
    v = m["vertex"].requests()
    assert [_header(r, "anthropic-version") for r in v] == [[], []], "its version is in the body"
    assert v[0]["path"].endswith(f"/models/{VERTEX_MODEL}:rawPredict")
    assert v[1]["path"].endswith(f"/models/{VERTEX_MODEL}:streamRawPredict")


TOKEN_FILE_CLOUDS = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
gateway_credential_headers: [x-gateway-key]
providers:
  - {name: vertex, endpoint: "127.0.0.1:${VERTEX_PORT}", api: vertex, project: p1, region: us-east5,
     credential: {header: authorization, prefix: "Bearer ", file: "${TOKEN_FILE}"}}
  - {name: anthropic, endpoint: "127.0.0.1:${ANTHROPIC_PORT}", api: anthropic,
     credential: {header: x-api-key, value: sk-ant}}
  - {name: openai, endpoint: "127.0.0.1:${OPENAI_PORT}", api: openai}
chains:
  - name: claude
    models: ["claude-*"]
    providers: [{provider: vertex, model: "%s"}, anthropic]
  - name: gpt
    models: ["gpt-*"]
    providers: [openai]
""" % VERTEX_MODEL


def _rotate(path, token):
    """What a rotation job does: write the new token beside the file, then rename it over.
    gcloud's output ends in a newline, which Envoy 1.40 drops and 1.39 refuses to send
    ("invalid header value"): docs/clouds.md strips it."""
    tmp = path.with_name("." + path.name + ".new")
    tmp.write_text(token + ("\n" if harness.envoy_version() >= (1, 40) else ""))
    tmp.replace(path)


@pytest.mark.skipif(harness.grouping_mode(),
                    reason="Envoy 1.36-1.38: the renderer refuses credential.file (only the "
                           "grouping cluster's filters run there)")
def test_a_vertex_token_from_a_file_is_refreshed_without_a_restart(clouds, tmp_path):
    """credential.file: Envoy's credential injector sets the token on Vertex's cluster only,
    and picks up a rotated token file under traffic: no restart, no failed request."""
    gateway, m = clouds
    if gateway.external:
        pytest.skip("the token file is on this machine")
    token_dir = tmp_path / "vertex"
    token_dir.mkdir()
    token_file = token_dir / "token"
    _rotate(token_file, "ya29.token-a")
    m["vertex"].server.cloud = cloud_mock.validate(
        {"kind": "vertex", "project": "p1", "region": "us-east5", "token": "ya29.token-a"})
    gw = gateway.start(TOKEN_FILE_CLOUDS, env={"TOKEN_FILE": str(token_file)})
    client = _anthropic(gw)
    ask = [{"role": "user", "content": "hi"}]
    for _ in range(2):
        msg = client.messages.create(model="claude-sonnet-4-5", max_tokens=20, messages=ask,
                                     extra_headers={"authorization": "Bearer caller-key"})
        assert msg.content[0].text == f"Hello from vertex (model {VERTEX_MODEL})"
    seen = [_header(r, "authorization") for r in m["vertex"].requests()]
    assert seen == [["Bearer ya29.token-a"]] * 2, "the file's token replaces the caller's"
    # Rotation: while Envoy may still hold the old token, Vertex takes both.
    m["vertex"].server.cloud = cloud_mock.validate(
        {"kind": "vertex", "project": "p1", "region": "us-east5",
         "tokens": ["ya29.token-a", "ya29.token-b"]})
    _rotate(token_file, "ya29.token-b")
    deadline = time.monotonic() + 10
    while True:
        msg = client.messages.create(model="claude-sonnet-4-5", max_tokens=20, messages=ask)
        assert msg.content[0].text == f"Hello from vertex (model {VERTEX_MODEL})"
        if _header(m["vertex"].requests()[-1], "authorization") == ["Bearer ya29.token-b"]:
            break
        assert time.monotonic() < deadline, "Envoy did not pick up the rotated token file"
        time.sleep(0.2)
    m["vertex"].server.cloud = cloud_mock.validate(
        {"kind": "vertex", "project": "p1", "region": "us-east5", "token": "ya29.token-b"})
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=20, messages=ask) as s:
        assert "".join(s.text_stream) == "vertex:0 vertex:1 vertex:2 "
    assert all(r.get("rejected") is None for r in m["vertex"].requests()), m["vertex"].requests()
    # The token is set on Vertex's cluster only: a failover from Vertex to Anthropic, and a
    # chain without Vertex, carry no authorization at all (neither the token nor the caller's).
    m["vertex"].set_default(status=503)
    msg = client.messages.create(model="claude-sonnet-4-5", max_tokens=20, messages=ask,
                                 extra_headers={"authorization": "Bearer caller-key"})
    assert msg.content[0].text == "Hello from anthropic (model claude-sonnet-4-5)"
    assert _header(m["vertex"].requests()[-1], "authorization") == ["Bearer ya29.token-b"]
    assert _header(m["anthropic"].requests()[-1], "authorization") == []
    assert _header(m["anthropic"].requests()[-1], "x-api-key") == ["sk-ant"]
    _openai(gw).chat.completions.create(model="gpt-4o", messages=ask)
    assert _header(m["openai"].requests()[-1], "authorization") == []
    assert gw.envoy.proc.poll() is None


def test_openai_sdk_fails_over_to_an_azure_deployment_and_back(clouds):
    gateway, m = clouds
    gw = gateway.start(API_KEY_CLOUDS)
    client = _openai(gw)
    m["openai"].set_default(status=500)
    r = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content == "Hello from azure (model gpt-4o-prod)"
    stream = client.chat.completions.create(model="gpt-4o", stream=True,
                                            messages=[{"role": "user", "content": "hi"}])
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == \
        "azure:0 azure:1 azure:2 "
    sent = m["azure"].requests()
    assert [r.get("rejected") for r in sent] == [None, None]
    assert sent[0]["path"] == "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21"
    assert _header(sent[0], "authorization") == [] and _header(sent[0], "api-key") == ["az-key"]
    m["openai"].set_default({})
    m["azure"].set_default(status=429)
    r = client.chat.completions.create(model="azure-gpt", messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content == "Hello from openai (model gpt-4o)"
    assert _header(m["openai"].requests()[-1], "api-key") == []


CANONICAL = CLOUDS.replace(
    """  - name: claude
    models: ["claude-*"]
    providers: [anthropic, {provider: bedrock, model: "%s"}, {provider: vertex, model: "%s"}]""" % (
        BEDROCK_MODEL, VERTEX_MODEL),
    """  - name: claude
    models: ["claude-*"]
    providers: [anthropic, {provider: bedrock, model: "%s"}, {provider: azure, model: gpt-4o-prod}]""" % (
        BEDROCK_MODEL,))


@needs_router_mode
def test_the_canonical_chain_serves_both_sdks_through_outages_of_anthropic_and_bedrock(clouds):
    """Claude on Anthropic, then Claude on Bedrock (signed), then GPT on Azure OpenAI (the
    issue's chain): an Anthropic-SDK app and an OpenAI-SDK app, streamed and not, on Chat
    Completions and on the Responses API."""
    gateway, m = clouds
    assert CANONICAL != CLOUDS
    gw = gateway.start(CANONICAL, env=AWS_ENV)
    ant, oai = _anthropic(gw), _openai(gw)
    ask = [{"role": "user", "content": "hi"}]
    # Anthropic down: Bedrock answers, for both SDKs (the OpenAI app's request translated to
    # Messages, put in Bedrock's envelope, its event stream unwrapped and translated back).
    m["anthropic"].set_default(status=529)
    assert ant.messages.create(model="claude-x", max_tokens=20, messages=ask).content[0].text \
        == f"Hello from bedrock (model {BEDROCK_MODEL})"
    r = oai.chat.completions.create(model="claude-x", messages=ask)
    assert r.choices[0].message.content == f"Hello from bedrock (model {BEDROCK_MODEL})"
    stream = oai.chat.completions.create(model="claude-x", messages=ask, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == \
        "bedrock:0 bedrock:1 bedrock:2 "
    with ant.messages.stream(model="claude-x", max_tokens=20, messages=ask) as s:
        assert "".join(s.text_stream) == "bedrock:0 bedrock:1 bedrock:2 "
    # A Responses app: translated to Messages in Bedrock's envelope, signed, and back.
    assert oai.responses.create(model="claude-x", input="hi").output_text == \
        f"Hello from bedrock (model {BEDROCK_MODEL})"
    with oai.responses.stream(model="claude-x", input="hi") as s:
        assert s.get_final_response().output_text == "bedrock:0 bedrock:1 bedrock:2 "
    assert all(r.get("rejected") is None for r in m["bedrock"].requests())
    # Bedrock down too: GPT on Azure answers both.
    m["bedrock"].set_default(status=503)
    assert ant.messages.create(model="claude-x", max_tokens=20, messages=ask).content[0].text \
        == "Hello from azure (model gpt-4o-prod)"
    with ant.messages.stream(model="claude-x", max_tokens=20, messages=ask) as s:
        assert "".join(s.text_stream) == "azure:0 azure:1 azure:2 "
    r = oai.chat.completions.create(model="claude-x", messages=ask)
    assert r.choices[0].message.content == "Hello from azure (model gpt-4o-prod)"
    stream = oai.chat.completions.create(model="claude-x", messages=ask, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == \
        "azure:0 azure:1 azure:2 "
    # The Responses app on Azure's deployments API (Chat Completions only): translated to Chat.
    assert oai.responses.create(model="claude-x", input="hi").output_text == \
        "Hello from azure (model gpt-4o-prod)"
    with oai.responses.stream(model="claude-x", input="hi") as s:
        assert s.get_final_response().output_text == "azure:0 azure:1 azure:2 "
    assert all(r.get("rejected") is None for r in m["azure"].requests())
    assert m["azure"].requests()[-1]["path"].startswith(
        "/openai/deployments/gpt-4o-prod/chat/completions?api-version=")


# Bedrock's errors (a chain that falls over on every class Bedrock's errors map to).
ERRORS = API_KEY_CLOUDS + """  - name: aws-errors
    models: ["aws-errors"]
    fallback_on: [timeout, rate_limited, overloaded, server_error, quota_exhausted,
                  context_window_exceeded, content_filtered]
    providers: [{provider: bedrock, model: "%s"}, {provider: anthropic, model: claude-sonnet-4-5}]
""" % BEDROCK_MODEL


def test_bedrocks_errors_are_read_from_its_error_type_and_message(clouds):
    """Bedrock names its error's type in x-amzn-ErrorType and answers {"message": ...}: a
    model timeout (408) is a timeout, a model error (424) the provider's, a model still
    loading (429) overloaded, "Input is too long for requested model." (400) the context
    window; each falls over as its class, named in x-llm-fallback-reason. Presets of the
    Bedrock mock (cloud_mock.BEDROCK_ERRORS), answered only to a request Bedrock accepts."""
    gateway, m = clouds
    m["bedrock"].server.cloud = cloud_mock.validate({**AWS, "api_key": "bedrock-api-key"})
    gw = gateway.start(ERRORS)
    cases = [("bedrock_model_timeout", 408, "timeout"),
             ("bedrock_model_not_ready", 429, "overloaded"),
             ("bedrock_throttling", 429, "rate_limited"),
             ("bedrock_unavailable", 503, "overloaded")]
    if harness.holds_answers():  # Envoy 1.36 reads no answer's body (README "Older Envoys")
        cases += [("bedrock_input_too_long", 400, "context_window_exceeded"),
                  ("bedrock_content_filter", 400, "content_filtered")]
    for preset, status, reason in cases:
        m["bedrock"].enqueue({"preset": preset})
        r = gw.chat("aws-errors", path="/v1/messages", max_tokens=20,
                    headers={"anthropic-version": "2023-06-01"})
        assert (r.status, r.header("x-llm-fallback-reason")) == (200, reason), (preset, r.text)
        assert r.header("x-llm-provider") == "anthropic"
        sent = m["bedrock"].requests()[-1]
        assert sent["rejected"] is None and sent["behaviour"]["preset"] == preset
    # Not the provider's trouble: the caller gets Bedrock's own answer.
    for preset, status in [("bedrock_validation", 400), ("bedrock_access_denied", 403)]:
        m["bedrock"].enqueue({"preset": preset})
        r = gw.chat("aws-errors", path="/v1/messages", max_tokens=20,
                    headers={"anthropic-version": "2023-06-01"})
        assert (r.status, r.header("x-llm-provider")) == (status, "bedrock"), (preset, r.text)
    # An OpenAI caller (translated to Messages for Bedrock) gets that answer in OpenAI's error
    # shape, with Bedrock's own message (AWS puts it at the top: {"message": ...}).
    if harness.holds_answers():
        m["bedrock"].enqueue({"preset": "bedrock_validation"})
        r = gw.chat("aws-errors", max_tokens=20)
        assert (r.status, r.header("x-llm-provider")) == (400, "bedrock"), r.text
        assert r.json()["error"]["message"] == cloud_mock.BEDROCK_ERRORS["bedrock_validation"][2]
        assert r.json()["error"]["type"] == "invalid_request_error"
    # A spent quota (400 ServiceQuotaExceededException) falls over and takes Bedrock out.
    m["bedrock"].enqueue({"preset": "bedrock_quota"})
    r = gw.chat("aws-errors", path="/v1/messages", max_tokens=20,
                headers={"anthropic-version": "2023-06-01"})
    assert (r.status, r.header("x-llm-fallback-reason")) == (200, "quota_exhausted"), r.text
    before = len(m["bedrock"].requests())
    r = gw.chat("aws-errors", path="/v1/messages", max_tokens=20,
                headers={"anthropic-version": "2023-06-01"})
    assert r.status == 200 and r.header("x-llm-provider") == "anthropic"
    assert len(m["bedrock"].requests()) == before, "Bedrock is out until its quota resets"


# Every provider kind once, each alone in its chain (model k-<name>): what `explain` says each
# attempt's path is, against what the provider receives through Envoy. Bedrock with
# an API key and Gemini go to plain mocks, which take any path; Azure's v1 API to the Azure
# mock, which checks it. The providers of CLOUDS, and three more.
KINDS = CLOUDS[:CLOUDS.index("chains:")] + """
  - {name: bedrock-key, endpoint: "127.0.0.1:${ANTHROPIC_PORT}", api: bedrock,
     credential: {header: authorization, prefix: "Bearer ", value: bedrock-api-key}}
  - {name: azure-v1, endpoint: "127.0.0.1:${AZURE_PORT}", api: azure_openai,
     credential: {header: api-key, value: az-key}}
  - {name: gemini, endpoint: "127.0.0.1:${OPENAI_PORT}", api: gemini,
     credential: {header: authorization, prefix: "Bearer ", value: gemini-key}}
chains:
  - {name: k-anthropic, models: [k-anthropic], providers: [anthropic]}
  - {name: k-bedrock, models: [k-bedrock], providers: [{provider: bedrock, model: "%(bedrock)s"}]}
  - {name: k-bedrock-key, models: [k-bedrock-key], providers: [{provider: bedrock-key, model: "%(bedrock)s"}]}
  - {name: k-vertex, models: [k-vertex], providers: [{provider: vertex, model: "%(vertex)s"}]}
  - {name: k-openai, models: [k-openai], providers: [openai]}
  - {name: k-azure, models: [k-azure], providers: [{provider: azure, model: gpt-4o-prod}]}
  - {name: k-azure-v1, models: [k-azure-v1], providers: [{provider: azure-v1, model: gpt-4o-v1}]}
  - {name: k-gemini, models: [k-gemini], providers: [{provider: gemini, model: gemini-2.5-flash}]}
""" % {"bedrock": BEDROCK_MODEL, "vertex": VERTEX_MODEL}


def _explained(source, env, model, path):
    """`llm-failover explain`'s first attempt: (path, streamed path, its other lines)."""
    import re
    import subprocess
    out = subprocess.run([str(harness.cli_bin()), "explain", str(source), "--model", model,
                          "--path", path], capture_output=True, text=True, timeout=30,
                         env={**__import__("os").environ, **env}, cwd=harness.REPO_ROOT)
    assert out.returncode == 0, out.stderr + out.stdout
    said = re.search(r"^ +path: ([^\s,]+)(?: \(streamed: ([^\s,)]+)\))?", out.stdout, re.M)
    assert said, out.stdout
    return said.group(1), said.group(2) or said.group(1), out.stdout


def test_explain_says_the_path_and_signing_each_provider_kind_receives(clouds, tmp_path):
    gateway, m = clouds
    text = KINDS
    if harness.grouping_mode():  # a signed Bedrock needs Envoy 1.39+ (the renderer refuses it)
        text = "\n".join(l for l in text.splitlines() if "k-bedrock," not in l
                         and "name: bedrock," not in l)
    source = tmp_path / "kinds.failover.yaml"
    source.write_text(text)
    # Environment credentials and the instance metadata address not turned off: Envoy asks only
    # the sources the file names (aws_credentials, default env), so never that address.
    aws_env = {**AWS_ENV, "AWS_EC2_METADATA_DISABLED": ""}
    env = {**gateway.env, **aws_env}
    gw = gateway.start(source, env=aws_env)
    kinds = [("anthropic", "anthropic", "/v1/messages"), ("bedrock", "bedrock", "/v1/messages"),
             ("bedrock-key", "anthropic", "/v1/messages"), ("vertex", "vertex", "/v1/messages"),
             ("openai", "openai", "/v1/chat/completions"), ("azure", "azure", "/v1/chat/completions"),
             ("azure-v1", "azure", "/v1/chat/completions"), ("gemini", "openai", "/v1/chat/completions")]
    seen = set()
    for kind, mock, path in kinds:
        if harness.grouping_mode() and kind == "bedrock":
            continue
        plain, streamed, said = _explained(source, env, f"k-{kind}", path)
        for stream, want in ((False, plain), (True, streamed)):
            r = gw.chat(f"k-{kind}", path=path, stream=stream, max_tokens=20,
                        headers={"anthropic-version": "2023-06-01"})
            assert r.status == 200, (kind, r.text)
            got = m[mock].requests()[-1]
            assert got.get("rejected") is None, (kind, got.get("rejected"))
            assert got["path"] == want, (kind, stream, said)
            seen.add(got["path"])
        auth = _header(got, "authorization")
        if kind == "bedrock":
            assert "signing: AWS Signature V4 by Envoy" in said, said
            assert "credentials from the environment only" in said, said
            assert auth and auth[0].startswith("AWS4-HMAC-SHA256 "), auth
        if kind == "bedrock-key":
            assert "signing: none (a Bedrock API key in authorization)" in said, said
            assert auth == ["Bearer bedrock-api-key"], auth
        if kind in ("bedrock", "bedrock-key", "vertex", "azure", "azure-v1", "gemini"):
            assert f"envelope: {kind.split('-')[0].replace('azure', 'azure_openai')}" in said, said
    # Each kind's paths are its own (a second copy of the path code could agree with itself).
    assert len(seen) >= 9, seen
    assert "instance metadata" not in gw.log().lower(), [l for l in gw.log().splitlines()
                                                 if "metadata" in l.lower()]
