"""The clouds' providers (issue 22): Azure OpenAI deployments, Claude on AWS Bedrock (signed by
Envoy's aws_request_signing after this filter, its event stream unwrapped) and on Vertex AI,
each against a mock that checks its paths, body and credentials as the cloud does
(cloud_mock.py; Bedrock's signature recomputed by botocore over the body received)."""
import hashlib
import json

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
