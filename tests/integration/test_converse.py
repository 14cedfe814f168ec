"""Amazon Bedrock's Converse API as a provider dialect (`api: bedrock_converse`), end to
end on one real Envoy: the chain [anthropic, {provider: bedrock-llama, model:
meta.llama3-3-70b-instruct-v1:0}, azure] serves an OpenAI SDK app (Chat Completions and
Responses), an anthropic SDK app with a tool and a google-genai app through an outage of
Anthropic (Llama on Bedrock answers, signed by Envoy with AWS Signature V4) and of both
(Azure answers), JSON and streamed.

The Converse mock (converse_mock.py) refuses what Bedrock refuses: the body is checked against
botocore's own `bedrock-runtime` service model, the signature recomputed by botocore, and the
mock's answers and event streams are read back here by botocore's own client (`converse`,
`converse_stream`).

One gateway for the module, mocks in this process."""
import json

import pytest

import cloud_mock
import converse_mock
import harness

if harness.external_mode():
    pytest.skip("needs its own gateway and mocks (a Converse mock in this process)",
                allow_module_level=True)
if harness.grouping_mode():
    pytest.skip("Envoy 1.36-1.38 run only the grouping cluster's filters: the renderer refuses a "
                "signed Bedrock provider there", allow_module_level=True)
botocore = pytest.importorskip("botocore")
import openai  # noqa: E402

LLAMA = "meta.llama3-3-70b-instruct-v1:0"
AWS = {"kind": "bedrock", "access_key": "AKIDEXAMPLE",
       "secret_key": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "region": "us-east-1"}
AWS_ENV = {"AWS_ACCESS_KEY_ID": AWS["access_key"], "AWS_SECRET_ACCESS_KEY": AWS["secret_key"],
           "AWS_EC2_METADATA_DISABLED": "true"}

CONFIG = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
breaker: {failures: 1000}
providers:
  - {name: anthropic, endpoint: "127.0.0.1:${ANTHROPIC_PORT}", api: anthropic,
     credential: {header: x-api-key, value: sk-ant}}
  - {name: bedrock-llama, endpoint: "127.0.0.1:${BEDROCK_PORT}", api: bedrock_converse,
     region: us-east-1}
  - {name: azure, endpoint: "127.0.0.1:${AZURE_PORT}", api: azure_openai, api_version: "2024-10-21",
     credential: {header: api-key, value: az-key}}
chains:
  - name: everyone
    models: ["gpt-*", "claude-*", "gemini-*"]
    providers: [anthropic, {provider: bedrock-llama, model: "%s", max_tokens: 300}, {provider: azure, model: gpt-4o-prod}]
""" % LLAMA

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CALL = [{"id": "tooluse_w1", "name": "get_weather", "arguments": {"city": "Paris"}}]


class Module(harness.MockedGateway):
    def __init__(self, tmp):
        super().__init__(CONFIG, tmp, ("anthropic", "bedrock", "azure"), env=AWS_ENV)

    def mocks_started(self):
        if not hasattr(self.mocks["bedrock"], "server"):
            pytest.skip("the Converse mock runs in-process")

    def reset(self):
        super().reset()
        self.mocks["bedrock"].server.cloud = cloud_mock.validate(AWS)
        self.mocks["azure"].server.cloud = cloud_mock.validate(
            {"kind": "azure", "api_key": "az-key", "api_version": "2024-10-21"})
        self.mocks["anthropic"].set_default(status=529)

    def converse_requests(self):
        """Bedrock's records: every one taken (signed, and a body Bedrock takes)."""
        recs = self.mocks["bedrock"].requests()
        assert [r["rejected"] for r in recs if r["rejected"]] == [], "Bedrock refused a request"
        for r in recs:
            assert [v for k, v in r["headers"] if k.lower() == "authorization"][0].startswith(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
            assert not [v for _, v in r["headers"] if "gw-key" in v or "sk-ant" in v]
        return recs


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    m = Module(tmp_path_factory.mktemp("converse"))
    yield m
    m.stop()


@pytest.fixture
def c(mod):
    mod.reset()
    return mod


# ------------------------------------------------------------------ the mock, read by botocore
def _client(port):
    import botocore.session
    return botocore.session.get_session().create_client(
        "bedrock-runtime", region_name="us-east-1", endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id=AWS["access_key"], aws_secret_access_key=AWS["secret_key"],
        config=botocore.config.Config(retries={"max_attempts": 1}))


def test_botocore_s_bedrock_runtime_client_speaks_with_the_mock(c):
    """The mock is Converse as AWS's own SDK speaks it: botocore signs and sends `converse` and
    `converse_stream`, parses the answers and the event stream; what Bedrock refuses, the mock
    refuses with a ValidationException botocore reads."""
    import botocore.config  # noqa: F401  (the client's config)
    client = _client(c.mocks["bedrock"].port)
    m = c.mocks["bedrock"]
    m.enqueue(tool_calls=CALL, usage={"inputTokens": 20, "outputTokens": 4,
                                      "cacheReadInputTokens": 100, "cacheWriteInputTokens": 8})
    tools = {"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": WEATHER}}}],
             "toolChoice": {"auto": {}}}
    out = client.converse(modelId=LLAMA, system=[{"text": "Be brief."}],
                          messages=[{"role": "user", "content": [
                              {"text": "Weather?"},
                              {"image": {"format": "png", "source": {"bytes": b"\x89PNG"}}}]}],
                          inferenceConfig={"maxTokens": 50, "temperature": 0.5}, toolConfig=tools)
    assert out["stopReason"] == "tool_use"
    use = out["output"]["message"]["content"][0]["toolUse"]
    assert (use["toolUseId"], use["name"], use["input"]) == ("tooluse_w1", "get_weather",
                                                            {"city": "Paris"})
    assert out["usage"]["cacheReadInputTokens"] == 100 and out["usage"]["totalTokens"] == 132
    m.enqueue(chunks=2)
    events = list(client.converse_stream(
        modelId=LLAMA, messages=[{"role": "user", "content": [{"text": "hi"}]}])["stream"])
    assert [next(iter(e)) for e in events] == [
        "messageStart", "contentBlockDelta", "contentBlockDelta", "contentBlockStop",
        "messageStop", "metadata"]
    assert events[1]["contentBlockDelta"]["delta"]["text"] == "bedrock:0 "
    assert events[-1]["metadata"]["usage"]["outputTokens"] == 7
    assert [r["path"] for r in m.requests()] == [
        "/model/meta.llama3-3-70b-instruct-v1%3A0/converse",
        "/model/meta.llama3-3-70b-instruct-v1%3A0/converse-stream"]
    assert [r["rejected"] for r in m.requests()] == [None, None]
    # Refused as Bedrock refuses: a conversation that starts with the assistant, a blank text.
    for messages in ([{"role": "assistant", "content": [{"text": "hi"}]}],
                     [{"role": "user", "content": [{"text": " "}]}]):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            client.converse(modelId=LLAMA, messages=messages)
        assert e.value.response["Error"]["Code"] == "ValidationException"
    # botocore's own model refuses members Converse does not have (model, stream).
    refused = converse_mock.problem({"messages": [{"role": "user", "content": [{"text": "x"}]}],
                                     "model": "x", "stream": True}, LLAMA)
    assert "Unknown parameter" in refused


# ------------------------------------------------------------------ through a real Envoy
def test_an_openai_chat_app_falls_over_to_llama_on_converse_json_and_streamed(c):
    client = openai.OpenAI(base_url=c.gw.url + "/v1", api_key="gw-key", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": "hi"}],
        temperature=0.2, stop=["END"])
    assert raw.headers["x-llm-provider"] == "bedrock-llama"
    answer = raw.parse()
    assert answer.choices[0].message.content == f"Hello from bedrock (model {LLAMA})"
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (5, 7)
    chunks = list(client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True,
        stream_options={"include_usage": True}))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == \
        "bedrock:0 bedrock:1 bedrock:2 "
    assert chunks[-1].usage.completion_tokens == 7
    sent = c.converse_requests()
    assert [r["path"].rsplit("/", 1)[1] for r in sent] == ["converse", "converse-stream"]
    body = json.loads(sent[0]["body"])
    assert body["system"] == [{"text": "Be brief."}]
    assert body["inferenceConfig"] == {"temperature": 0.2, "stopSequences": ["END"],
                                       "maxTokens": 300}, "the entry's max_tokens"
    # Both down: Azure serves the same app.
    c.mocks["bedrock"].set_default(preset="bedrock_throttling")
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert raw.headers["x-llm-provider"] == "azure"
    assert raw.parse().choices[0].message.content.startswith("Hello from azure")


def test_an_openai_responses_app_falls_over_to_converse(c):
    client = openai.OpenAI(base_url=c.gw.url + "/v1", api_key="gw-key", max_retries=0)
    r = client.responses.with_raw_response.create(model="gpt-5", input="hi",
                                                  instructions="Be brief.")
    assert r.headers["x-llm-provider"] == "bedrock-llama"
    assert r.parse().output_text == f"Hello from bedrock (model {LLAMA})"
    with client.responses.stream(model="gpt-5", input="hi") as s:
        text = "".join(e.delta for e in s if e.type == "response.output_text.delta")
    assert text == "bedrock:0 bedrock:1 bedrock:2 "
    assert len(c.converse_requests()) == 2


def test_an_anthropic_app_with_a_tool_falls_over_to_converse_and_back_to_it(c):
    import anthropic
    client = anthropic.Anthropic(base_url=c.gw.url, api_key="gw-key", max_retries=0)
    tools = [{"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER}]
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    c.mocks["bedrock"].enqueue(tool_calls=CALL)
    first = client.messages.create(model="claude-sonnet-4-5", max_tokens=100, tools=tools,
                                   system="Be brief.", messages=messages)
    assert first.stop_reason == "tool_use"
    use = [b for b in first.content if b.type == "tool_use"][0]
    assert (use.id, use.name, use.input) == ("tooluse_w1", "get_weather", {"city": "Paris"})
    # The result goes back over the same chain: Bedrock checks it answers the call.
    messages += [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                               "content": "18 C"}]}]
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=100, tools=tools,
                                messages=messages) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == "bedrock:0 bedrock:1 bedrock:2 "
    assert final.usage.output_tokens == 7
    sent = c.converse_requests()
    second = json.loads(sent[1]["body"])
    assert second["messages"][1]["content"][0]["toolUse"]["toolUseId"] == "tooluse_w1"
    assert second["messages"][2]["content"][0]["toolResult"] == {
        "toolUseId": "tooluse_w1", "content": [{"text": "18 C"}]}
    assert second["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"]["json"] == WEATHER
    # A streamed tool call.
    c.mocks["bedrock"].enqueue(tool_calls=CALL)
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=100, tools=tools,
                                messages=messages[:1]) as s:
        final = s.get_final_message()
    assert [b.input for b in final.content if b.type == "tool_use"] == [{"city": "Paris"}]
    # Bedrock's throttling: the chain goes on to Azure.
    c.mocks["bedrock"].set_default(preset="bedrock_throttling")
    r = client.messages.with_raw_response.create(model="claude-sonnet-4-5", max_tokens=100,
                                                 messages=messages[:1])
    assert r.headers["x-llm-provider"] == "azure"
    assert r.parse().content[0].text.startswith("Hello from azure")


def test_a_google_genai_app_falls_over_to_converse(c):
    from google import genai
    from google.genai import types
    client = genai.Client(api_key="gw-key", http_options=types.HttpOptions(
        base_url=c.gw.url, api_version="v1beta", retry_options=types.HttpRetryOptions(attempts=1)))
    out = client.models.generate_content(
        model="gemini-2.5-flash", contents="hi",
        config=types.GenerateContentConfig(system_instruction="Be brief.", max_output_tokens=40))
    assert out.text == f"Hello from bedrock (model {LLAMA})"
    assert out.usage_metadata.candidates_token_count == 7
    text = "".join(ch.text or "" for ch in client.models.generate_content_stream(
        model="gemini-2.5-flash", contents="hi"))
    assert text == "bedrock:0 bedrock:1 bedrock:2 "
    sent = c.converse_requests()
    assert [r["path"].rsplit("/", 1)[1] for r in sent] == ["converse", "converse-stream"]


def test_a_converse_error_reaches_the_caller_in_its_own_shape_and_class(c):
    """The last provider's error is the caller's, in its API's shape: Bedrock's too-long input
    as a 400 (context_window_exceeded) reaches an OpenAI app when Azure refuses it too."""
    c.mocks["bedrock"].set_default(preset="bedrock_input_too_long")
    c.mocks["azure"].set_default(status=400)
    client = openai.OpenAI(base_url=c.gw.url + "/v1", api_key="gw-key", max_retries=0)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="gpt-4o",
                                       messages=[{"role": "user", "content": "hi"}])

    def classes():
        samples = harness.prometheus_samples(c.gw.prometheus(), "llm_failover_attempts_total")
        return {s["outcome"] for s, _ in samples if s.get("provider") == "bedrock-llama"}
    harness.wait_until(lambda: "context_window_exceeded" in classes(), 5,
                       "Bedrock's too-long input counted", interval=0.2)
