"""Each request's record sent to an OpenTelemetry collector (docs/observability.md
"OpenTelemetry"): the gateway rendered with `render --otel-collector` sends its access log
through Envoy's own OpenTelemetry access logger (OTLP logs over gRPC) to a real OTLP receiver
(a gRPC server built from the official `opentelemetry-proto` package), which checks what
arrives: the GenAI semantic conventions' attributes (the serving provider, the request's model,
the answer's model) and the attempts. One Envoy for the module."""
import re
import threading
from concurrent import futures

import pytest

import harness
from harness import Envoy, render_config, start_mock, wait_until

if harness.external_mode():
    pytest.skip("needs its own gateway, mocks and collector", allow_module_level=True)

# After the skip: the docker-compose run's test image may not have them
# (tests/integration/requirements.txt).
import grpc  # noqa: E402
from opentelemetry.proto.collector.logs.v1 import (  # noqa: E402
    logs_service_pb2, logs_service_pb2_grpc)

CONFIG = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
breaker: {failures: 1000}
providers:
  - {name: primary, endpoint: "127.0.0.1:${PRIMARY_PORT}"}
  - {name: secondary, endpoint: "127.0.0.1:${SECONDARY_PORT}"}
chains:
  - name: gpt
    models: ["gpt-*"]
    providers: [primary, {provider: secondary, model: gpt-backup}]
"""


class Collector(logs_service_pb2_grpc.LogsServiceServicer):
    """An OTLP logs receiver on 127.0.0.1: keeps every log record that arrives."""

    def __init__(self):
        self.lock = threading.Lock()
        self.records = []  # (resource attributes, record), in arrival order
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def Export(self, request, context):  # noqa: N802 - the gRPC method's name
        with self.lock:
            for resource_logs in request.resource_logs:
                resource = attributes(resource_logs.resource.attributes)
                for scope_logs in resource_logs.scope_logs:
                    for record in scope_logs.log_records:
                        self.records.append((resource, record))
        return logs_service_pb2.ExportLogsServiceResponse()

    def record_of(self, request_id, timeout=10.0):
        """The record whose body names `request_id` (Envoy sends its buffer once a second)."""
        def find():
            with self.lock:
                return next(((res, rec) for res, rec in self.records
                             if f"request_id={request_id}" in rec.body.string_value), None)
        return wait_until(find, timeout, f"the OTLP record of {request_id}")

    def stop(self):
        self.server.stop(grace=None)


def attributes(key_values):
    return {kv.key: kv.value.string_value for kv in key_values}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    collector = Collector()
    mocks = {name: start_mock(name) for name in ("primary", "secondary")}
    envoy = None
    try:
        d = tmp_path_factory.mktemp("otel")
        env = {f"{n.upper()}_PORT": str(m.port) for n, m in mocks.items()}
        env.update(LISTEN_PORT=str(harness.free_port()), ADMIN_PORT=str(harness.free_port()))
        path = render_config(CONFIG, env, out_dir=d,
                             args=("--otel-collector", f"127.0.0.1:{collector.port}"))
        envoy = Envoy(path, d / "envoy", env=env)
        try:
            envoy.start()
        except harness.HarnessError as e:
            if "envoy.access_loggers.open_telemetry" in str(e):
                pytest.skip(f"this Envoy has no OpenTelemetry access logger: {e}")
            raise
        yield harness.Gateway(envoy.listener_url(), envoy.admin_url, envoy=envoy), mocks, collector
    finally:
        if envoy:
            envoy.stop()
        for m in mocks.values():
            m.stop()
        collector.stop()


def chat(gw, request_id):
    r = gw.chat("gpt-4o", headers={"x-request-id": request_id})
    assert r.status == 200, r.text
    return r


def test_a_failed_over_request_arrives_with_the_serving_provider_models_and_attempts(setup):
    gw, mocks, collector = setup
    for m in mocks.values():
        m.reset()
    mocks["primary"].set_default(status=500)
    assert chat(gw, "otel-failover").header("x-llm-provider") == "secondary"
    resource, record = collector.record_of("otel-failover")
    got = attributes(record.attributes)
    assert got["gen_ai.provider.name"] == "secondary"
    assert got["gen_ai.request.model"] == "gpt-4o"
    # The fallback's entry names its own model: the answer came from that one.
    assert got["gen_ai.response.model"] == "gpt-backup"
    # The serving attempt's tokens, as the mock reported them (mock_provider's CHAT_USAGE).
    assert (got["gen_ai.usage.input_tokens"], got["gen_ai.usage.output_tokens"]) == ("5", "7")
    assert re.fullmatch(r"primary:server_error:\d+ms,secondary:ok:\d+ms:in=\d+/out=\d+/cached=\d+",
                        got["llm_failover.attempts"]), got
    assert got["http.response.status_code"] == "200"
    assert got["url.path"] == "/v1/chat/completions"
    assert got["llm_failover.caller"] == "-", "no caller_header in this file"
    assert resource["service.name"] == "llm-failover"
    assert "llm_failover=primary:server_error:" in record.body.string_value


def test_a_first_provider_answer_names_the_request_model_as_the_answer_model(setup):
    gw, mocks, collector = setup
    for m in mocks.values():
        m.reset()
    assert chat(gw, "otel-direct").header("x-llm-provider") == "primary"
    _, record = collector.record_of("otel-direct")
    got = attributes(record.attributes)
    assert (got["gen_ai.provider.name"], got["gen_ai.request.model"],
            got["gen_ai.response.model"]) == ("primary", "gpt-4o", "gpt-4o")
    assert (got["gen_ai.usage.input_tokens"], got["gen_ai.usage.output_tokens"]) == ("5", "7")
    assert re.fullmatch(r"primary:ok:\d+ms:in=\d+/out=\d+/cached=\d+", got["llm_failover.attempts"]), got
