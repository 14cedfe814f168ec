"""The API surface callers expect (behaviour.md 12), driven by the real SDKs users run: the
`openai` and `anthropic` Python packages and the `openai` Node package, against real Envoy and
mock providers, during a primary outage, with the SDKs' own retries on and off.

The snippets in docs/calling.md are the files in examples/: the tests run those files unchanged
and check docs/calling.md holds their exact text."""
import json
import os
import re
import subprocess
import time

import shutil

import pytest

from harness import REPO_ROOT, external_mode, http_request

if external_mode():
    # The docker-compose harness's runner image has no SDKs: skip there. Natively they are
    # required (scripts/setup.sh installs tests/integration/requirements.txt).
    pytest.importorskip("openai")
    pytest.importorskip("anthropic")
import anthropic  # noqa: E402
import httpx2 as httpx  # noqa: E402  (the HTTP client these SDK versions are built on)
import openai  # noqa: E402

API = "tests/integration/configs/api.failover.yaml"
EXAMPLES = REPO_ROOT / "examples"
SNIPPETS = [EXAMPLES / "openai_quickstart.py", EXAMPLES / "anthropic_quickstart.py",
            EXAMPLES / "node" / "quickstart.mjs"]
MSG = [{"role": "user", "content": "hi"}]


def header(record, name):
    return [v for k, v in record["headers"] if k.lower() == name.lower()]


class Counter:
    """Counts the HTTP requests an SDK sends (its retries included)."""

    def __init__(self):
        self.n = 0

    def client(self) -> httpx.Client:
        return httpx.Client(event_hooks={"request": [self._count]})

    def _count(self, _request):
        self.n += 1


def oai(gw, max_retries=0, counter=None, **kw):
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="gw-key", max_retries=max_retries,
                         http_client=counter.client() if counter else None, **kw)


@pytest.fixture
def api(gateway):
    mocks = gateway.mocks("primary", "secondary", "tertiary")
    return gateway, *mocks


def run_snippet(path, gw, model, timeout=60):
    if path.suffix == ".mjs" and not (shutil.which("node")
                                      and (path.parent / "node_modules" / "openai").is_dir()):
        if external_mode():
            pytest.skip("no Node SDK in this runner")
        pytest.fail("the Node SDK is missing: scripts/setup.sh runs npm ci in examples/node")
    cmd = ["node", str(path)] if path.suffix == ".mjs" else [os.sys.executable, str(path)]
    env = {**os.environ, "GATEWAY_URL": gw.url, "GATEWAY_KEY": "gw-key", "MODEL": model}
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                       cwd=path.parent)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_docs_show_the_snippets_the_tests_run():
    doc = (REPO_ROOT / "docs" / "calling.md").read_text()
    for path in SNIPPETS:
        assert path.read_text().strip() in doc, f"docs/calling.md must hold {path.name} verbatim"


def test_snippets_default_to_models_the_quick_start_names():
    """A user running a snippet as is asks for a model that exists: its default MODEL is a model
    README's quick start routes (gpt-4o, claude-sonnet-4-5), not a made-up name."""
    readme = (REPO_ROOT / "README.md").read_text()
    for path in SNIPPETS:
        m = re.search(r"""MODEL["')]*\s*(?:,|\?\?)\s*["']([^"']+)["']""", path.read_text())
        assert m, f"{path.name}: no default MODEL"
        assert re.search(rf"\b{re.escape(m.group(1))}\b", readme), (
            f"{path.name} defaults to {m.group(1)!r}, which README's quick start does not name")


@pytest.mark.parametrize("snippet", [SNIPPETS[0], SNIPPETS[2]], ids=["python", "node"])
def test_openai_quickstart_snippet_during_a_primary_outage(api, snippet):
    gateway, primary, secondary, tertiary = api
    primary.set_default(status=503)
    gw = gateway.start(API)
    out = run_snippet(snippet, gw, "gpt-4o").splitlines()
    assert out[0] == "Hello from secondary (model gpt-4o)", out
    assert out[1] == "secondary:0 secondary:1 secondary:2 ", out
    assert out[2] == "secondary 2", out
    assert json.loads(out[3].replace("'", '"')) == ["gpt-4.1-mini", "text-embedding-3-small"]
    # The caller's gateway key never reaches a provider; each gets its own.
    for r in secondary.requests():
        assert header(r, "authorization") == ["Bearer sk-secondary"]


def test_anthropic_quickstart_snippet_during_a_primary_outage(api):
    gateway, primary, secondary, tertiary = api
    primary.set_default(status=529)
    gw = gateway.start(API)
    out = run_snippet(SNIPPETS[1], gw, "claude-sonnet-5-5").splitlines()
    assert out == ["Hello from secondary (model claude-sonnet-5-5)",
                   "secondary:0 secondary:1 secondary:2 "], out
    for r in secondary.requests():
        assert r["path"] == "/v1/messages"
        assert header(r, "x-api-key") == [], "the caller's key stays in the gateway"
        assert header(r, "authorization") == ["Bearer sk-secondary"]
        assert header(r, "anthropic-version"), "the SDK's version header reaches the provider"


def test_every_openai_endpoint_fails_over_streamed_and_not(api):
    gateway, primary, secondary, tertiary = api
    primary.set_default(status=500)
    gw = gateway.start(API)
    c = oai(gw)

    raw = c.completions.with_raw_response.create(model="gpt-4o", prompt="hi")
    assert raw.headers["x-llm-provider"] == "secondary"
    assert raw.parse().choices[0].text == "Hello from secondary (model gpt-4o)"
    text = "".join(ch.choices[0].text for ch in c.completions.create(
        model="gpt-4o", prompt="hi", stream=True))
    assert text == "secondary:0 secondary:1 secondary:2 "

    raw = c.embeddings.with_raw_response.create(model="text-embedding-3-small", input="hi")
    assert raw.headers["x-llm-provider"] == "secondary"
    assert raw.parse().data[0].embedding == [0.25, -0.5, 1.0]

    raw = c.responses.with_raw_response.create(model="gpt-4o", input="hi")
    assert raw.headers["x-llm-fallback-reason"] == "server_error"
    assert raw.parse().output_text == "Hello from secondary (model gpt-4o)"
    # The Responses API streams typed events; a stream is still never spliced.
    events = list(c.responses.create(model="gpt-4o", input="hi", stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == "secondary:0 secondary:1 secondary:2 "
    assert events[-1].response.output_text == deltas

    paths = {r["path"] for r in secondary.requests(bodies=False)}
    assert paths == {"/v1/completions", "/v1/embeddings", "/v1/responses"}
    assert tertiary.request_count() == 0


def test_chains_are_limited_to_their_paths_and_model_less_requests_get_a_json_404(api):
    gateway, primary, secondary, tertiary = api
    gw = gateway.start(API)
    # claude-* is served on the Messages API only.
    with pytest.raises(openai.BadRequestError) as e:
        oai(gw).chat.completions.create(model="claude-sonnet-5-5", messages=MSG)
    assert e.value.code == "model_not_recognized"
    r = gw.request("GET", "/v1/files")
    assert r.status == 404, r.text
    assert r.header("content-type") == "application/json"
    assert r.header("x-should-retry") == "false"
    assert r.json()["error"]["code"] == "route_not_found"
    # A JSON body that names no model is a request without a model too.
    r = http_request(gw.url, "POST", "/v1/threads", body=json.dumps({"metadata": {}}),
                     headers={"content-type": "application/json"})
    assert r.status == 404, r.text
    assert r.json()["error"]["code"] == "route_not_found"
    assert primary.request_count() == 0


def test_models_are_listed_by_the_gateway_in_both_dialects(api):
    gateway, primary, secondary, tertiary = api
    gw = gateway.start(API)
    c = oai(gw)
    assert [m.id for m in c.models.list()] == ["gpt-4.1-mini", "text-embedding-3-small"]
    # owned_by: the first provider of the first chain serving it (primary serves every model).
    assert c.models.retrieve("gpt-4.1-mini").owned_by == "primary"
    with pytest.raises(openai.NotFoundError) as e:
        c.models.retrieve("gpt-5-imaginary")
    assert e.value.code == "model_not_found"
    a = anthropic.Anthropic(base_url=gw.url, api_key="gw-key", max_retries=0)
    assert [m.id for m in a.models.list()] == ["gpt-4.1-mini", "text-embedding-3-small"]
    assert (primary.request_count(), secondary.request_count(), tertiary.request_count()) \
        == (0, 0, 0), "no provider is contacted"


def test_a_callers_own_chain_serves_that_caller_and_the_access_log_names_it(api):
    gateway, primary, secondary, tertiary = api
    gw = gateway.start(API)
    c = oai(gw, default_headers={"x-team": "team-a"})
    raw = c.chat.completions.with_raw_response.create(model="gpt-4o", messages=MSG)
    assert raw.headers["x-llm-provider"] == "tertiary"
    raw = oai(gw, default_headers={"x-team": "team-b"}).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=MSG)
    assert raw.headers["x-llm-provider"] == "primary"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and "chain=gpt" not in gw.log():
        time.sleep(0.2)
    log = gw.log()
    assert "chain=team-a " in log, log[-2000:]
    assert "chain=gpt" in log


def test_sdks_do_not_retry_circuit_open_forever(api):
    gateway, primary, secondary, tertiary = api
    for m in (primary, secondary, tertiary):
        m.set_default(status=503)
    gw = gateway.start(API, env={"BREAKER_FAILURES": "1"})
    with pytest.raises(openai.InternalServerError) as e:
        oai(gw).chat.completions.create(model="gpt-4o", messages=MSG)
    assert e.value.response.headers["x-should-retry"] == "true"
    counter = Counter()
    t0 = time.monotonic()
    with pytest.raises(openai.InternalServerError) as e:
        oai(gw, max_retries=2, counter=counter).chat.completions.create(
            model="gpt-4o", messages=MSG)
    assert e.value.code == "circuit_open"
    assert counter.n == 3, "the SDK's two retries, then it gives up"
    assert time.monotonic() - t0 < 10


def test_sdks_follow_the_gateways_retry_advice_on_an_exhausted_chain(api):
    gateway, primary, secondary, tertiary = api
    # The providers say the opposite of what the gateway knows: the gateway's word wins.
    for m in (primary, secondary, tertiary):
        m.set_default(status=404, headers={"x-should-retry": "true"})
    gw = gateway.start(API)
    counter = Counter()
    with pytest.raises(openai.NotFoundError) as e:
        oai(gw, max_retries=2, counter=counter).chat.completions.create(
            model="gpt-4o", messages=MSG)
    assert e.value.response.headers["x-should-retry"] == "false"
    assert counter.n == 1, "a client error is not retried"
    for m in (primary, secondary, tertiary):
        m.set_default(status=500, headers={"x-should-retry": "false"})
    counter = Counter()
    with pytest.raises(openai.InternalServerError) as e:
        oai(gw, max_retries=1, counter=counter).chat.completions.create(
            model="gpt-4o", messages=MSG)
    assert e.value.response.headers["x-should-retry"] == "true"
    assert counter.n == 2, "the SDK retries what the gateway says is retriable"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_walk_whose_last_attempt_got_no_response_is_a_json_error(api, stream):
    gateway, primary, secondary, tertiary = api
    for m in (primary, secondary, tertiary):
        m.down()
    gw = gateway.start(API)
    counter = Counter()
    with pytest.raises(openai.InternalServerError) as e:
        oai(gw, max_retries=1, counter=counter).chat.completions.create(
            model="gpt-4o", messages=MSG, stream=stream)
    r = e.value.response
    assert r.status_code == 503
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["x-should-retry"] == "true"
    assert r.headers["x-llm-provider"] == "tertiary"
    assert r.headers["x-llm-attempts"] == "3"
    assert e.value.code == "upstream_unreachable"
    assert "could not be reached" in e.value.message
    assert counter.n == 2, "retried once, as the gateway advised"


def test_a_body_over_the_limit_is_a_json_413(api):
    gateway, primary, secondary, tertiary = api
    gw = gateway.start(API, env={"MAX_REQUEST_BODY": "64KiB"})
    counter = Counter()
    with pytest.raises(openai.APIStatusError) as e:
        oai(gw, max_retries=2, counter=counter).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "x" * 200_000}])
    r = e.value.response
    assert r.status_code == 413
    assert r.headers["x-should-retry"] == "false"
    assert e.value.code == "body_too_large"
    assert "65536 bytes" in e.value.message
    assert counter.n == 1
    assert primary.request_count() == 0
    # Raw HTTP: the body is JSON, not Envoy's plain text.
    raw = http_request(gw.url, "POST", "/v1/chat/completions",
                       body=json.dumps({"model": "gpt-4o", "pad": "y" * 100_000}),
                       headers={"content-type": "application/json"})
    assert raw.status == 413 and raw.json()["error"]["code"] == "body_too_large"


NODE_RETRIES = """
import OpenAI from "openai";
let sent = 0;
const client = new OpenAI({
  baseURL: process.env.GATEWAY_URL + "/v1", apiKey: "gw-key",
  maxRetries: Number(process.env.MAX_RETRIES),
  fetch: (url, init) => { sent += 1; return fetch(url, init); },
});
try {
  await client.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "hi" }],
                                         stream: process.env.STREAM === "1" });
  console.log(JSON.stringify({ sent, ok: true }));
} catch (e) {
  console.log(JSON.stringify({ sent, status: e.status, code: e.code,
                               retry: e.headers?.get?.("x-should-retry") ?? null }));
}
"""


def node_retries(gw, max_retries, stream=False):
    node_dir = EXAMPLES / "node"
    if not (shutil.which("node") and (node_dir / "node_modules" / "openai").is_dir()):
        if external_mode():
            pytest.skip("no Node SDK in this runner")
        pytest.fail("the Node SDK is missing: scripts/setup.sh runs npm ci in examples/node")
    env = {**os.environ, "GATEWAY_URL": gw.url, "MAX_RETRIES": str(max_retries),
           "STREAM": "1" if stream else "0"}
    p = subprocess.run(["node", "--input-type=module", "-e", NODE_RETRIES], env=env, cwd=node_dir,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_node_sdk_gives_up_on_circuit_open_and_obeys_the_gateways_advice(api):
    gateway, primary, secondary, tertiary = api
    for m in (primary, secondary, tertiary):
        m.set_default(status=404, headers={"x-should-retry": "true"})
    gw = gateway.start(API, env={"BREAKER_FAILURES": "1"})
    out = node_retries(gw, 2)
    assert out == {"sent": 1, "status": 404, "code": "model_not_found", "retry": "false"}, out
    for m in (primary, secondary, tertiary):
        m.set_default(status=503)
    out = node_retries(gw, 0, stream=True)  # opens every breaker (one failure each)
    assert (out["status"], out["retry"]) == (503, "true"), out
    out = node_retries(gw, 2, stream=True)
    assert out == {"sent": 3, "status": 503, "code": "circuit_open", "retry": "true"}, out


def test_anthropic_sdk_retries_on_and_off_during_an_outage(api):
    gateway, primary, secondary, tertiary = api
    primary.set_default(status=503)
    gw = gateway.start(API, env={"BREAKER_FAILURES": "1"})
    counter = Counter()
    a = anthropic.Anthropic(base_url=gw.url, api_key="gw-key", max_retries=0,
                            http_client=counter.client())
    raw = a.messages.with_raw_response.create(model="claude-sonnet-5-5", max_tokens=16,
                                               messages=MSG)
    assert raw.headers["x-llm-provider"] == "secondary"
    assert raw.parse().content[0].text == "Hello from secondary (model claude-sonnet-5-5)"
    assert counter.n == 1
    for m in (secondary, tertiary):
        m.set_default(status=529)
    with pytest.raises(anthropic.APIStatusError) as e:
        a.messages.create(model="claude-sonnet-5-5", max_tokens=16, messages=MSG)
    assert e.value.response.headers["x-should-retry"] == "true"
    counter.n = 0
    retrying = anthropic.Anthropic(base_url=gw.url, api_key="gw-key", max_retries=2,
                                   http_client=counter.client())
    with pytest.raises(anthropic.APIStatusError) as e:
        with retrying.messages.stream(model="claude-sonnet-5-5", max_tokens=16,
                                      messages=MSG) as s:
            list(s.text_stream)
    assert e.value.status_code == 503
    assert e.value.body["error"]["code"] == "circuit_open"
    assert counter.n == 3, "two retries, then the SDK gives up"


def test_a_request_without_a_model_goes_to_one_provider(api):
    gateway, primary, secondary, tertiary = api
    primary.set_default(status=503)
    gw = gateway.start("envoy/demo.failover.yaml")  # its chain takes every model, "" included
    r = gw.request("GET", "/v1/files/file-abc")
    assert r.status == 503, r.text
    assert r.header("x-llm-provider") == "primary"
    assert secondary.request_count() == 0, "another provider would not know file-abc"
    assert primary.last_request()["path"] == "/v1/files/file-abc"
