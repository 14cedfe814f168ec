"""Gemini's native API (docs/behaviour.md section 14), end to end on one real Envoy: an
OpenAI chat app (the official `openai` SDK) and an Anthropic app (the `anthropic` SDK) whose
primary is down fall over to a provider declaring `api: gemini_native` (Google AI's
`models/{model}:generateContent`, the key in `x-goog-api-key`), JSON and streamed, a function
call and its result crossing both ways.
The Gemini mock refuses what Google's API refuses (gemini_mock.py: unknown members such as
`model` or `stream`, a function response that answers no call, a stream without `alt=sse`).

One gateway for the module, mocks in this process."""
import json

import pytest

import cloud_mock
import harness

if harness.external_mode():
    pytest.skip("needs its own gateway and mocks (a Gemini mock in this process)",
                allow_module_level=True)
import openai  # noqa: E402

CONFIG = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
breaker: {failures: 1000}
providers:
  - {name: openai, endpoint: "127.0.0.1:${OPENAI_PORT}", api: openai,
     credential: {header: authorization, prefix: "Bearer ", value: sk-openai}}
  - {name: gemini, endpoint: "127.0.0.1:${GEMINI_PORT}", api: gemini_native,
     credential: {header: x-goog-api-key, value: gm-key}}
  - {name: anthropic, endpoint: "127.0.0.1:${ANTHROPIC_PORT}", api: anthropic,
     credential: {header: x-api-key, value: sk-ant}}
  - {name: vertex-gemini, endpoint: "127.0.0.1:${GEMINI_PORT}", api: gemini_native,
     project: p1, region: us-central1,
     credential: {header: authorization, prefix: "Bearer ", value: ya29.vx}}
  - {name: any-api, endpoint: "127.0.0.1:${GEMINI_PORT}",     # no api: the caller's API
     credential: {header: x-goog-api-key, value: gm-key}}
chains:
  - name: gpt
    models: ["gpt-*"]
    providers: [openai, {provider: gemini, model: gemini-2.5-flash}]
  - name: flash                   # a google-genai app: Gemini, then OpenAI
    models: ["gemini-2.5-flash"]
    providers: [gemini, {provider: openai, model: gpt-4o}]
  - name: pro                     # a google-genai app: Gemini, then Anthropic
    models: ["gemini-2.5-pro"]
    providers: [gemini, {provider: anthropic, model: claude-sonnet-4-5}]
  - name: think                   # per-entry settings, written into Gemini's generationConfig
    models: ["think-*", "gemini-think"]
    providers:
      - openai
      - {provider: gemini, model: gemini-2.5-pro, effort: low, max_tokens: 300}
  - name: look                    # a google-genai app's image skips an entry without vision
    models: ["gemini-look"]
    providers:
      - gemini
      - {provider: openai, model: gpt-3.5-turbo, capabilities: {vision: false}}
      - {provider: anthropic, model: claude-sonnet-4-5}
  - name: gemini-first            # a chat app: Gemini first, then Anthropic
    models: ["gemini-first"]
    providers: [{provider: gemini, model: gemini-2.5-flash},
                {provider: anthropic, model: claude-sonnet-4-5}]
  - name: alias                   # a google-genai app's alias on a provider without api
    models: ["gemini-alias"]
    providers: [{provider: any-api, model: gemini-2.5-pro}]
  - name: vertex                  # a chat app: OpenAI, then Gemini on Vertex AI
    models: ["vx-*"]
    providers: [openai, {provider: vertex-gemini, model: gemini-2.5-flash}]
  - name: claude                  # an Anthropic app: Anthropic, then Gemini
    models: ["claude-*"]
    providers: [anthropic, {provider: gemini, model: gemini-2.5-flash}]
  - name: g3                      # a chat app: OpenAI, then Gemini 3 (it checks signatures)
    models: ["g3-*"]
    providers: [openai, {provider: gemini, model: gemini-3-pro-preview}]
  - name: flash3                  # a google-genai app: Gemini 3, then OpenAI
    models: ["gemini-3-pro-preview"]
    providers: [gemini, {provider: openai, model: gpt-4o}]
"""
GEMINI = {"kind": "gemini", "api_key": "gm-key", "project": "p1", "region": "us-central1",
          "token": "ya29.vx"}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
           "additionalProperties": False}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city", "parameters": WEATHER}}]


class Module(harness.MockedGateway):
    def __init__(self, tmp):
        super().__init__(CONFIG, tmp, ("openai", "gemini", "anthropic"))

    def mocks_started(self):
        if not hasattr(self.mocks["gemini"], "server"):
            pytest.skip("the Gemini mock runs in-process")

    def reset(self):
        super().reset()
        self.mocks["gemini"].server.cloud = cloud_mock.validate(GEMINI)
        self.mocks["openai"].set_default(status=503, strict=True)
        self.mocks["anthropic"].set_default(strict=True)

    def oai(self):
        return openai.OpenAI(base_url=self.gw.url + "/v1", api_key="gw-key", max_retries=0)

    def genai(self):
        from google import genai
        from google.genai import types
        return genai.Client(api_key="gw-key", http_options=types.HttpOptions(
            base_url=self.gw.url, api_version="v1beta",
            retry_options=types.HttpRetryOptions(attempts=1)))

    def accepted(self, name):
        recs = self.mocks[name].requests()
        assert [r["rejected"] for r in recs if r["rejected"]] == [], f"{name} refused a request"
        for r in recs:
            assert not [v for _, v in r["headers"] if "gw-key" in v], r["headers"]
            assert "key=" not in r["path"]
        return recs

    def gemini_requests(self):
        recs = self.mocks["gemini"].requests()
        assert [r["rejected"] for r in recs if r["rejected"]] == [], "Gemini refused a request"
        for r in recs:
            keys = [v for k, v in r["headers"] if k.lower() == "x-goog-api-key"]
            assert keys == ["gm-key"], r["headers"]
            assert not [v for _, v in r["headers"] if "gw-key" in v or "sk-openai" in v]
        return recs


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    m = Module(tmp_path_factory.mktemp("gemini"))
    yield m
    m.stop()


@pytest.fixture
def g(mod):
    mod.reset()
    return mod


def gemini_tokens(gw):
    """{(model, kind): value} of llm_failover_tokens_total for the gemini provider."""
    return {(s["model"], s["kind"]): int(v)
            for s, v in harness.prometheus_samples(gw.prometheus(), "llm_failover_tokens_total")
            if s["provider"] == "gemini"}


def test_gemini_answers_count_their_usage_metadata(g):
    """docs/behaviour.md section 15: a Gemini answer's usageMetadata counts, exactly, for a
    failover to Gemini (JSON and stream, translated) and for a google-genai app served by Gemini
    itself; thoughts count as output, the cached content is part of the input. First in the
    module: no earlier answer's tokens are still on their way to the counters."""
    usage = {"promptTokenCount": 300, "candidatesTokenCount": 20, "cachedContentTokenCount": 256,
             "thoughtsTokenCount": 9, "totalTokenCount": 329}
    before = gemini_tokens(g.gw)
    client = g.oai()
    for stream in (False, True):
        g.mocks["gemini"].enqueue(usage=usage, chunks=3)
        r = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=stream)
        assert r.headers["x-llm-provider"] == "gemini"
        if stream:
            assert [c for c in r.parse()]
        else:
            # Gemini's thoughts are the Chat caller's reasoning tokens, within completion_tokens.
            u = r.parse().usage
            assert (u.completion_tokens, u.completion_tokens_details.reasoning_tokens) == (29, 9)
    g.mocks["gemini"].enqueue(usage=usage)
    genai = g.genai()  # kept: the client closes when collected
    genai.models.generate_content(model="gemini-2.5-flash", contents="hi")
    want = dict(before)
    for model, n in (("gemini-2.5-flash", 3),):
        for kind, v in (("input", 300), ("output", 29), ("cached_input", 256)):
            want[(model, kind)] = want.get((model, kind), 0) + n * v
    try:
        harness.wait_until(lambda: gemini_tokens(g.gw) == want, 5, "Gemini's tokens", interval=0.2)
    except harness.HarnessError:
        assert gemini_tokens(g.gw) == want


def test_an_openai_chat_app_falls_over_to_gemini_native_with_a_function_call(g):
    client = g.oai()
    g.mocks["gemini"].enqueue(tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}])
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris?"}]
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=messages, tools=TOOLS, max_tokens=50)
    assert raw.headers["x-llm-provider"] == "gemini"
    first = raw.parse()
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert first.model == "gemini-2.5-flash"
    # The second turn: the call and its result go back; Gemini checks the result answers it.
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "18 C, sunny"}]
    second = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "Hello from gemini (model gemini-2.5-flash)"
    assert second.usage.prompt_tokens == 5 and second.usage.completion_tokens == 7
    sent = g.gemini_requests()
    assert [r["path"] for r in sent] == ["/v1beta/models/gemini-2.5-flash:generateContent"] * 2
    body = json.loads(sent[0]["body"])
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["generationConfig"] == {"maxOutputTokens": 50}
    assert body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"] == WEATHER
    turns = json.loads(sent[1]["body"])["contents"]
    assert [t["role"] for t in turns] == ["user", "model", "user"]
    # Gemini 2.5 checks no signature: the call goes without Google's placeholder.
    assert turns[1]["parts"] == [{"functionCall": {"name": "get_weather",
                                                   "args": {"city": "Paris"}}}]
    assert turns[2]["parts"] == [{"functionResponse": {
        "name": "get_weather", "response": {"result": "18 C, sunny"}}}]
    # Google's error (an input too long) reaches the caller as OpenAI's error.
    too_long = ("The input token count (1200000) exceeds the maximum number of tokens allowed "
                "(1048576).")
    g.mocks["gemini"].enqueue(status=400, error={"message": too_long})
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="gpt-4o", messages=messages[:2])
    assert e.value.body["message"] == too_long
    assert e.value.response.headers.get("x-llm-provider") == "gemini"


def test_an_openai_chat_stream_falls_over_to_gemini_native(g):
    client = g.oai()
    stream = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "gemini:0 gemini:1 gemini:2 "
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.prompt_tokens == 5 and chunks[-1].usage.total_tokens == 12
    # A call streamed, then the stream cut short: the SDK raises instead of ending quietly.
    g.mocks["gemini"].enqueue(tool_calls=[{"name": "get_weather", "arguments": {"city": "Oslo"}}])
    calls = [c.choices[0].delta.tool_calls for c in client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Oslo?"}], tools=TOOLS,
        stream=True) if c.choices and c.choices[0].delta.tool_calls]
    assert calls[0][0].function.name == "get_weather"
    assert json.loads("".join(c[0].function.arguments for c in calls)) == {"city": "Oslo"}
    g.mocks["gemini"].enqueue(chunks=3, abort_after_chunks=2, abort="close")
    with pytest.raises(openai.APIError):
        list(client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True))
    sent = g.gemini_requests()
    assert sent[0]["path"] == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert "stream" not in json.loads(sent[0]["body"])


def test_an_anthropic_app_falls_over_to_gemini_native_with_a_tool_round_trip(g):
    import anthropic
    g.mocks["anthropic"].set_default(status=503)
    client = anthropic.Anthropic(base_url=g.gw.url, api_key="gw-key", max_retries=0)
    tools = [{"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER}]
    g.mocks["gemini"].enqueue(tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}])
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    raw = client.messages.with_raw_response.create(
        model="claude-sonnet-4-5", max_tokens=50, system="Be brief.", messages=messages,
        tools=tools)
    assert raw.headers["x-llm-provider"] == "gemini"
    first = raw.parse()
    assert (first.type, first.role, first.stop_reason) == ("message", "assistant", "tool_use")
    call = first.content[-1]
    assert (call.type, call.name, call.input) == ("tool_use", "get_weather", {"city": "Paris"})
    # The second turn: the call and its result go back; Gemini checks the result answers it.
    messages += [{"role": "assistant",
                  "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                               "content": "18 C, sunny"}]}]
    second = client.messages.create(model="claude-sonnet-4-5", max_tokens=50,
                                    messages=messages, tools=tools)
    assert second.content[0].text == "Hello from gemini (model gemini-2.5-flash)"
    assert (second.usage.input_tokens, second.usage.output_tokens) == (5, 7)
    # Streamed (the SDK's helper), a streamed tool call, then a stream cut short: the SDK
    # raises instead of ending quietly.
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=50,
                                messages=[{"role": "user", "content": "hi"}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == "gemini:0 gemini:1 gemini:2 "
    assert (final.stop_reason, final.usage.output_tokens) == ("end_turn", 7)
    g.mocks["gemini"].enqueue(tool_calls=[{"name": "get_weather", "arguments": {"city": "Oslo"}}])
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=50, tools=tools,
                                messages=[{"role": "user", "content": "Oslo?"}]) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    assert (final.content[-1].name, final.content[-1].input) == ("get_weather", {"city": "Oslo"})
    half = {"candidates": [{"content": {"parts": [{"text": "half"}], "role": "model"},
                            "index": 0}], "modelVersion": "gemini-2.5-flash"}
    g.mocks["gemini"].enqueue(status=200, stream=True,
                              events=[f"data: {json.dumps(half)}\r\n\r\n"])
    with pytest.raises(anthropic.APIStatusError) as e:
        with client.messages.stream(model="claude-sonnet-4-5", max_tokens=50,
                                    messages=[{"role": "user", "content": "hi"}]) as s:
            s.get_final_message()
    assert "ended before its final event" in str(e.value)
    # Google's error (an input too long) reaches the caller as Anthropic's error.
    too_long = ("The input token count (1200000) exceeds the maximum number of tokens allowed "
                "(1048576).")
    g.mocks["gemini"].enqueue(status=400, error={"message": too_long})
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=messages[:1])
    assert e.value.body["error"] == {"type": "invalid_request_error", "message": too_long}
    sent = g.gemini_requests()
    assert [r["path"] for r in sent] == (
        ["/v1beta/models/gemini-2.5-flash:generateContent"] * 2
        + ["/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"] * 3
        + ["/v1beta/models/gemini-2.5-flash:generateContent"])
    body = json.loads(sent[0]["body"])
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["generationConfig"] == {"maxOutputTokens": 50}
    assert body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"] == WEATHER
    turns = json.loads(sent[1]["body"])["contents"]
    assert [t["role"] for t in turns] == ["user", "model", "user"]
    assert turns[1]["parts"][-1] == {"functionCall": {"name": "get_weather",
                                                      "args": {"city": "Paris"}}}
    assert turns[2]["parts"] == [{"functionResponse": {
        "name": "get_weather", "response": {"result": "18 C, sunny"}}}]


# ------------------------------------------------------------------ a google-genai app
def test_a_google_genai_app_falls_over_from_gemini_to_openai_with_a_function_call(g):
    from google.genai import types
    client = g.genai()
    g.mocks["openai"].set_default({"strict": True})
    g.mocks["gemini"].set_default(status=503)
    weather = types.FunctionDeclaration(name="get_weather", description="Weather in a city",
                                        parameters_json_schema=WEATHER)
    config = types.GenerateContentConfig(
        system_instruction="Be brief.", max_output_tokens=50,
        tools=[types.Tool(function_declarations=[weather])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    r = client.models.generate_content(model="gemini-2.5-flash", contents="hi",
                                       config=types.GenerateContentConfig(max_output_tokens=50))
    assert r.text == "Hello from openai (model gpt-4o)"
    assert r.usage_metadata.prompt_token_count == 5
    assert r.usage_metadata.candidates_token_count == 7
    assert r.sdk_http_response.headers["x-llm-provider"] == "openai"
    # A function call, and its result on the next turn.
    g.mocks["openai"].enqueue(tool_calls=[{"id": "call_7", "name": "get_weather",
                                           "arguments": {"city": "Paris"}}])
    turn = [types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])]
    r = client.models.generate_content(model="gemini-2.5-flash", contents=turn, config=config)
    call = r.function_calls[0]
    assert (call.name, call.args) == ("get_weather", {"city": "Paris"})
    turn += [r.candidates[0].content, types.Content(role="user", parts=[
        types.Part.from_function_response(name="get_weather", response={"result": "18 C"})])]
    r = client.models.generate_content(model="gemini-2.5-flash", contents=turn, config=config)
    assert r.text == "Hello from openai (model gpt-4o)"
    sent = g.accepted("openai")
    assert [x["path"] for x in sent] == ["/v1/chat/completions"] * 3
    last = json.loads(sent[-1]["body"])
    assert last["messages"][0] == {"role": "system", "content": "Be brief."}
    assert last["messages"][2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert last["messages"][3] == {"role": "tool", "tool_call_id": call.id or "call_0",
                                   "content": "18 C"}
    assert last["max_completion_tokens"] == 50, last
    assert last["tools"][0]["function"]["parameters"] == WEATHER, last["tools"]
    # Streamed, then a stream cut short: the SDK raises.
    text = "".join(c.text or "" for c in client.models.generate_content_stream(
        model="gemini-2.5-flash", contents="hi"))
    assert text == "openai:0 openai:1 openai:2 "
    half = {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o",
            "choices": [{"index": 0, "delta": {"content": "half"}}]}
    g.mocks["openai"].enqueue(status=200, stream=True, events=[f"data: {json.dumps(half)}\n\n"])
    from google.genai import errors
    with pytest.raises(errors.ServerError) as e:
        list(client.models.generate_content_stream(model="gemini-2.5-flash", contents="hi"))
    assert (e.value.code, e.value.status) == (502, "INTERNAL")
    # The gateway's own reply in Google's shape: a model no chain serves.
    with pytest.raises(errors.ClientError) as e:
        client.models.generate_content(model="gemini-nope", contents="hi")
    assert (e.value.code, e.value.status) == (400, "INVALID_ARGUMENT")
    assert e.value.details["error"]["details"][0]["reason"] == "model_not_recognized"


def test_a_google_genai_apps_image_skips_an_entry_without_vision(g):
    from google.genai import types
    g.mocks["gemini"].set_default(status=503)
    png = types.Part.from_bytes(data=b"\x89PNG fake", mime_type="image/png")
    before = g.skipped().get(("openai", "capability_vision"), 0)
    client = g.genai()
    r = client.models.generate_content(model="gemini-look", contents=["what is this?", png])
    assert r.sdk_http_response.headers["x-llm-provider"] == "anthropic"
    assert g.mocks["openai"].requests() == []
    assert g.skipped().get(("openai", "capability_vision"), 0) == before + 1
    sent = json.loads(g.accepted("anthropic")[-1]["body"])
    assert sent["messages"][0]["content"][1]["type"] == "image", sent


def test_a_google_genai_app_falls_over_from_gemini_to_anthropic_streaming(g):
    client = g.genai()
    g.mocks["gemini"].set_default(status=429)
    r = client.models.generate_content(model="gemini-2.5-pro", contents="hi")
    assert r.text == "Hello from anthropic (model claude-sonnet-4-5)"
    chunks = list(client.models.generate_content_stream(model="gemini-2.5-pro", contents="hi"))
    assert "".join(c.text or "" for c in chunks) == "anthropic:0 anthropic:1 anthropic:2 "
    assert chunks[-1].candidates[0].finish_reason == "STOP"
    assert chunks[-1].usage_metadata.total_token_count == 12
    sent = g.accepted("anthropic")
    assert [x["path"] for x in sent] == ["/v1/messages"] * 2
    assert json.loads(sent[1]["body"])["stream"] is True
    # The caller's key in the query never reaches a provider.
    r = harness.http_request(
        g.gw.url, "POST", "/v1beta/models/gemini-2.5-pro:generateContent?key=gw-key",
        json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    assert r.status == 200, r.text
    assert json.loads(r.text)["candidates"][0]["content"]["parts"][0]["text"].startswith(
        "Hello from anthropic")
    g.accepted("anthropic")
    g.gemini_requests()


def test_an_entrys_effort_and_max_tokens_reach_gemini_in_its_generation_config(g):
    """A chain entry's `effort: low, max_tokens: 300` on a Gemini-native provider: a translated
    chat request and a google-genai request (same API) both arrive with a 4,000-token
    `thinkingConfig.thinkingBudget` and `maxOutputTokens: 4300` (300 raised by the budget:
    Gemini counts thinking inside the limit; the caller's own limit and thinking level
    replaced, its `includeThoughts` and temperature kept)."""
    from google.genai import types
    r = g.oai().chat.completions.create(
        model="think-4o", max_tokens=50, temperature=0.2,
        messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content == "Hello from gemini (model gemini-2.5-pro)"
    config = types.GenerateContentConfig(
        max_output_tokens=50, temperature=0.2,
        thinking_config=types.ThinkingConfig(include_thoughts=True, thinking_level="HIGH"))
    client = g.genai()  # kept: a google-genai client closes its connections when collected
    r = client.models.generate_content(model="gemini-think", contents="hi", config=config)
    assert r.sdk_http_response.headers["x-llm-provider"] == "gemini"
    sent = [json.loads(x["body"])["generationConfig"] for x in g.gemini_requests()]
    assert sent[0] == {"temperature": 0.2, "maxOutputTokens": 4300,
                       "thinkingConfig": {"thinkingBudget": 4000}}, sent
    assert sent[1]["maxOutputTokens"] == 4300 and sent[1]["temperature"] == 0.2, sent
    # google-genai writes the thinking config's members with their proto names.
    assert sent[1]["thinkingConfig"] == {"include_thoughts": True, "thinkingBudget": 4000}, sent


def test_a_stream_opening_with_googles_error_falls_over_and_keeps_its_type(g):
    """Gemini may answer a stream 200 and send its error as the first event
    (`RESOURCE_EXHAUSTED`): the attempt falls over (docs/behaviour.md section 3, `overloaded`);
    on the chain's last entry the caller's error has the type Google's status names (Envoy
    1.36 holds no answer, so there only the type is checked: older-envoys.md)."""
    exhausted = {"error": {"code": 429, "message": "Resource has been exhausted.",
                           "status": "RESOURCE_EXHAUSTED"}}
    first = [f"data: {json.dumps(exhausted)}\r\n\r\n"]
    client = g.oai()
    held = harness.holds_answers()
    if held:
        g.mocks["gemini"].enqueue(status=200, stream=True, events=first)
        raw = client.chat.completions.with_raw_response.create(
            model="gemini-first", messages=[{"role": "user", "content": "hi"}], stream=True)
        assert raw.headers["x-llm-provider"] == "anthropic"
        assert raw.headers["x-llm-attempts"] == "2"
        text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
        assert text == "anthropic:0 anthropic:1 anthropic:2 "
    # The chain's last entry: the caller's stream ends with Google's error, as a rate limit.
    g.mocks["gemini"].enqueue(status=200, stream=True, events=first)
    with pytest.raises(openai.APIError) as e:
        list(client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True))
    assert e.value.body["type"] == "rate_limit_error", e.value.body
    assert e.value.body["message"] == "Resource has been exhausted."
    assert [r["path"] for r in g.gemini_requests()] == [
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"] * (1 + held)


def test_a_google_genai_app_on_a_provider_without_api_gets_the_entrys_model_in_its_path(g):
    """A provider that declares no `api` takes the caller's API as it is: for a google-genai
    app the chain entry's model is written into the path (the model of Gemini's API), JSON and
    streamed, the caller's method and query kept."""
    client = g.genai()
    r = client.models.generate_content(model="gemini-alias", contents="hi")
    assert r.text == "Hello from gemini (model gemini-2.5-pro)"
    assert r.sdk_http_response.headers["x-llm-provider"] == "any-api"
    # Streamed, here and on an `api: gemini_native` provider: a whole stream ends as Gemini
    # ended it (its last chunk has the finishReason, no end marker follows).
    for model in ("gemini-alias", "gemini-2.5-flash"):
        chunks = list(client.models.generate_content_stream(model=model, contents="hi"))
        assert "".join(c.text or "" for c in chunks) == "gemini:0 gemini:1 gemini:2 "
        assert chunks[-1].candidates[0].finish_reason == "STOP"
    assert [x["path"] for x in g.gemini_requests()] == [
        "/v1beta/models/gemini-2.5-pro:generateContent",
        "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"]


def test_a_chat_tool_round_trip_through_gemini_keeps_its_thought_signature(g):
    """Gemini 3 signs a function call (`thoughtSignature`) and refuses the next turn when that
    call comes back without it (the mock does too): the signature travels in the tool call id
    the chat app gets (`<id>__thought__<signature>`, base64url) and goes back on the call."""
    client = g.oai()
    g.mocks["gemini"].enqueue(tool_calls=[{"name": "get_weather", "arguments": {"city": "Lima"},
                                           "signature": "Ci4B/0e+Kb6="}])
    messages = [{"role": "user", "content": "Weather in Lima?"}]
    first = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    assert call.id.endswith("__thought__Ci4B_0e-Kb6"), call.id
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "21 C"}]
    second = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "Hello from gemini (model gemini-2.5-flash)"
    turns = json.loads(g.gemini_requests()[1]["body"])["contents"]
    assert turns[1]["parts"] == [{"functionCall": {"name": "get_weather", "args": {"city": "Lima"}},
                                  "thoughtSignature": "Ci4B_0e-Kb6"}]
    assert turns[2]["parts"][0]["functionResponse"]["name"] == "get_weather"


def test_another_vendors_tool_call_reaches_gemini_3_with_googles_placeholder_signature(g):
    """Gemini 3 refuses a step of the current turn (the steps since the user last wrote) whose
    first function call has no signature (the mock does too); a call another vendor made has
    none, so it goes to Gemini 3 with the placeholder Google documents
    (`skip_thought_signature_validator`), and only there: a call of an earlier turn goes
    without it. A chat app whose OpenAI primary made the call and whose Gemini 3 fallback serves
    the next turns; a google-genai app whose OpenAI fallback made the call, its history sent
    back to Gemini 3 as it is."""
    from google.genai import types
    client = g.oai()
    g.mocks["openai"].enqueue(tool_calls=[{"id": "call_7", "name": "get_weather",
                                           "arguments": {"city": "Rome"}}])
    messages = [{"role": "user", "content": "Weather in Rome?"}]
    first = client.chat.completions.with_raw_response.create(
        model="g3-4o", messages=messages, tools=TOOLS)
    assert first.headers["x-llm-provider"] == "openai"
    message = first.parse().choices[0].message
    messages += [message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": "call_7", "content": "25 C"}]
    second = client.chat.completions.with_raw_response.create(
        model="g3-4o", messages=messages, tools=TOOLS)
    assert second.headers["x-llm-provider"] == "gemini"
    answer = second.parse().choices[0].message.content
    assert answer == "Hello from gemini (model gemini-3-pro-preview)"
    turns = json.loads(g.gemini_requests()[0]["body"])["contents"]
    assert turns[1]["parts"][0]["thoughtSignature"] == "skip_thought_signature_validator"
    # The user writes again: that call is an earlier turn's now, which Google does not check.
    messages += [{"role": "assistant", "content": answer},
                 {"role": "user", "content": "And tomorrow?"}]
    third = client.chat.completions.with_raw_response.create(
        model="g3-4o", messages=messages, tools=TOOLS)
    assert third.headers["x-llm-provider"] == "gemini"
    turns = json.loads(g.gemini_requests()[1]["body"])["contents"]
    assert [t["role"] for t in turns] == ["user", "model", "user", "model", "user"]
    assert turns[1]["parts"] == [{"functionCall": {"name": "get_weather",
                                                   "args": {"city": "Rome"}}}]
    # A google-genai app: Gemini down, OpenAI makes the call; Gemini back for the next turn.
    genai = g.genai()
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[types.FunctionDeclaration(
            name="get_weather", parameters_json_schema=WEATHER)])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    g.mocks["gemini"].enqueue(status=503)
    g.mocks["openai"].enqueue(tool_calls=[{"id": "call_8", "name": "get_weather",
                                           "arguments": {"city": "Oslo"}}])
    model = "gemini-3-pro-preview"
    turn = [types.Content(role="user", parts=[types.Part(text="Weather in Oslo?")])]
    r = genai.models.generate_content(model=model, contents=turn, config=config)
    assert r.sdk_http_response.headers["x-llm-provider"] == "openai"
    turn += [r.candidates[0].content, types.Content(role="user", parts=[
        types.Part.from_function_response(name="get_weather", response={"result": "3 C"})])]
    r = genai.models.generate_content(model=model, contents=turn, config=config)
    assert r.sdk_http_response.headers["x-llm-provider"] == "gemini"
    assert r.text == "Hello from gemini (model gemini-3-pro-preview)"
    sent = g.gemini_requests()
    assert len(sent) == 4
    turns = json.loads(sent[-1]["body"])["contents"]
    assert turns[1]["parts"][0]["functionCall"]["name"] == "get_weather"
    assert turns[1]["parts"][0]["thoughtSignature"] == "skip_thought_signature_validator"


def test_a_gemini_call_id_reaches_another_vendor_without_its_signature(g):
    """A signed Gemini call's id carries its signature (hundreds of characters from real
    Gemini); OpenAI takes at most 40 characters in a call id, Anthropic ids are kept short too:
    a translated request leaves the signature out, the same on the call and its result."""
    signature = "Ci4B" + "x" * 200
    g.mocks["gemini"].enqueue(tool_calls=[{"name": "get_weather", "arguments": {"city": "Bern"},
                                           "signature": signature}])
    client = g.oai()
    messages = [{"role": "user", "content": "Weather in Bern?"}]
    first = client.chat.completions.create(model="gemini-first", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    short, _, carried = call.id.partition("__thought__")
    assert carried == signature, call.id
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "9 C"}]
    g.mocks["gemini"].enqueue(status=503)
    raw = client.chat.completions.with_raw_response.create(
        model="gemini-first", messages=messages, tools=TOOLS)
    assert raw.headers["x-llm-provider"] == "anthropic"
    turns = json.loads(g.accepted("anthropic")[-1]["body"])["messages"]
    assert turns[1]["content"][-1]["id"] == short
    assert turns[2]["content"][0]["tool_use_id"] == short


def test_a_signed_call_id_goes_back_same_api_to_openai_without_its_signature(g):
    """A chat app's tool call made by its Gemini fallback (OpenAI down) carries Gemini's
    signature in its id, far over the 40 characters OpenAI takes in a call id (the strict mock
    refuses it as OpenAI does). The next turn, served same API by OpenAI back up, sends the id
    unsigned on the call and its result alike; a Responses app's `call_id` the same (64)."""
    signature = "Ci4B" + "x" * 200
    client = g.oai()
    g.mocks["gemini"].enqueue(tool_calls=[{"name": "get_weather", "arguments": {"city": "Bern"},
                                           "signature": signature}])
    messages = [{"role": "user", "content": "Weather in Bern?"}]
    first = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=messages, tools=TOOLS)
    assert first.headers["x-llm-provider"] == "gemini"
    message = first.parse().choices[0].message
    signed = message.tool_calls[0].id
    short, _, carried = signed.partition("__thought__")
    assert carried == signature and len(signed) > 40, signed
    messages += [message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": signed, "content": "9 C"}]
    g.mocks["openai"].enqueue(status=200, strict=True)
    second = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=messages, tools=TOOLS)
    assert second.headers["x-llm-provider"] == "openai"
    assert second.parse().choices[0].message.content
    sent = json.loads(g.accepted("openai")[-1]["body"])["messages"]
    assert sent[1]["tool_calls"][0]["id"] == short and sent[2]["tool_call_id"] == short
    assert sent[0] == messages[0] and sent[1]["tool_calls"][0]["function"]["name"] == "get_weather"
    # A Responses app: the function call's call_id and its output's.
    g.mocks["gemini"].enqueue(tool_calls=[{"name": "get_weather", "arguments": {"city": "Rome"},
                                           "signature": signature}])
    items = [{"role": "user", "content": "Weather in Rome?"}]
    tools = [{"type": "function", "name": "get_weather", "parameters": WEATHER}]
    r = client.responses.create(model="gpt-4o", input=items, tools=tools)
    call = next(o for o in r.output if o.type == "function_call")
    assert "__thought__" in call.call_id and len(call.call_id) > 64, call.call_id
    items += [call.model_dump(exclude_none=True),
              {"type": "function_call_output", "call_id": call.call_id, "output": "25 C"}]
    g.mocks["openai"].enqueue(status=200, strict=True)
    raw = client.responses.with_raw_response.create(model="gpt-4o", input=items, tools=tools)
    assert raw.headers["x-llm-provider"] == "openai"
    sent = json.loads(g.accepted("openai")[-1]["body"])["input"]
    unsigned = call.call_id.partition("__thought__")[0]
    assert [i.get("call_id") for i in sent] == [None, unsigned, unsigned]


def test_a_google_genai_stream_cut_short_on_gemini_raises_googles_error(g):
    """A google-genai app's stream served by Gemini itself (same API, watched as it passes) and
    cut short ends with Google's error as a chunk: the SDK raises its ServerError (an OpenAI
    error frame made it fail with a TypeError)."""
    from google.genai import errors
    client = g.genai()
    half = {"candidates": [{"content": {"parts": [{"text": "half"}], "role": "model"},
                            "index": 0}], "modelVersion": "gemini-2.5-flash"}
    g.mocks["gemini"].enqueue(status=200, stream=True,
                              events=[f"data: {json.dumps(half)}\r\n\r\n"])
    with pytest.raises(errors.ServerError) as e:
        list(client.models.generate_content_stream(model="gemini-2.5-flash", contents="hi"))
    assert (e.value.code, e.value.status) == (502, "INTERNAL")
    assert "ended before its final event" in e.value.message
    assert [r["path"] for r in g.gemini_requests()] == [
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"]


def test_a_chat_app_falls_over_to_gemini_native_on_vertex_ai(g):
    """An `api: gemini_native` entry with Vertex's `project` and `region`: the request goes to
    Vertex's path for Google's models with the entry's bearer token, JSON and streamed."""
    client = g.oai()
    raw = client.chat.completions.with_raw_response.create(
        model="vx-4o", messages=[{"role": "user", "content": "hi"}])
    assert raw.headers["x-llm-provider"] == "vertex-gemini"
    assert raw.parse().choices[0].message.content == "Hello from gemini (model gemini-2.5-flash)"
    chunks = list(client.chat.completions.create(
        model="vx-4o", messages=[{"role": "user", "content": "hi"}], stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "gemini:0 gemini:1 gemini:2 "
    recs = g.mocks["gemini"].requests()
    assert [r["rejected"] for r in recs if r["rejected"]] == []
    base = "/v1/projects/p1/locations/us-central1/publishers/google/models/gemini-2.5-flash"
    assert [r["path"] for r in recs] == [base + ":generateContent",
                                         base + ":streamGenerateContent?alt=sse"]
    for r in recs:
        assert [v for k, v in r["headers"] if k.lower() == "authorization"] == ["Bearer ya29.vx"]
