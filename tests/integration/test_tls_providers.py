"""Providers over TLS through a real Envoy, offline ("an OpenAI, Anthropic-compatible
or Azure endpoint over TLS with the right SNI and :authority, as well as plain-HTTP local
servers").

Mock providers on 127.0.0.1 serve certificates for ``api.provider.test`` from a throwaway CA
made here with the ``openssl`` CLI; tests/integration/configs/tls.failover.yaml reaches them
with ``tls: true``, ``sni`` and ``authority`` set, and the CA as ``ca_file``. The mocks record
the SNI each connection sent and the ALPN protocol negotiated (they offer http/1.1 only).
"""
from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from harness import HERE, HOST, MockClient, env_key, external_mode
from mock_provider import MockProvider

CONFIG = "tests/integration/configs/tls.failover.yaml"
SNI = "api.provider.test"
CALLER_KEYS = {"authorization": "Bearer gateway-key", "x-api-key": "caller-key",
               "api-key": "caller-azure-key"}

pytestmark = pytest.mark.skipif(external_mode(), reason="starts its own TLS mocks and Envoy")


def header(record, name):
    """A header's values in a mock's request record."""
    return [v for k, v in record["headers"] if k.lower() == name.lower()]


# ------------------------------------------------------------------ throwaway PKI
def _openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{r.stderr}")


def _make_ca(d: Path, name: str) -> tuple[Path, Path]:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2",
             "-subj", f"/CN=llm-failover test {name}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    return d / f"{name}.crt", d / f"{name}.key"


def _make_server_cert(d: Path, name: str, dns: str, ca: tuple[Path, Path],
                      serial: int) -> tuple[str, str]:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={dns}", cwd=d)
    (d / f"{name}.ext").write_text(
        f"subjectAltName=DNS:{dns}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(ca[0]), "-CAkey", str(ca[1]),
             "-set_serial", str(serial), "-days", "2", "-out", f"{name}.crt",
             "-extfile", f"{name}.ext", cwd=d)
    return str(d / f"{name}.crt"), str(d / f"{name}.key")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """{"ca": trusted CA file, "good"/"wrong_san"/"unknown_ca": (cert, key)}."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl CLI is needed to make test certificates")
    d = tmp_path_factory.mktemp("pki")
    ca = _make_ca(d, "ca")
    rogue = _make_ca(d, "rogue-ca")
    return {
        "ca": str(ca[0]),
        "good": _make_server_cert(d, "good", SNI, ca, 1001),
        "wrong_san": _make_server_cert(d, "wrong-san", "wrong.provider.test", ca, 1002),
        "unknown_ca": _make_server_cert(d, "unknown-ca", SNI, rogue, 1003),
        "wildcard": _make_server_cert(d, "wildcard", "*.provider.test", ca, 1004),
    }


# ------------------------------------------------------------------ TLS mocks
class TlsMock(MockClient):
    """A mock provider on threads of this process, serving TLS on its provider port."""

    def __init__(self, name: str, cert: str, key: str):
        self.server = MockProvider(name, tls_cert=cert, tls_key=key).start()
        super().__init__(name, self.server.control_url)

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def tls_gateway(gateway, pki):
    """(gateway, make_tls_mock): make_tls_mock(name, cert=pki["good"]) starts a TLS mock and
    sets ``<NAME>_PORT`` for rendering; ``TLS_CA_FILE`` is set to the trusted CA."""
    started: list[TlsMock] = []
    gateway.env["TLS_CA_FILE"] = pki["ca"]

    def make(name: str, cert: tuple[str, str] | None = None) -> TlsMock:
        m = TlsMock(name, *(cert or pki["good"]))
        started.append(m)
        gateway.mock_clients[name] = m
        gateway.env[f"{env_key(name)}_PORT"] = str(m.port)
        return m

    try:
        yield gateway, make
    finally:
        for m in reversed(started):
            m.stop()


@pytest.fixture
def three(tls_gateway):
    gateway, make = tls_gateway
    return gateway, make("tls-a"), make("tls-b"), gateway.mocks("local")


# ------------------------------------------------------------------ scenarios
def test_tls_provider_gets_sni_authority_and_only_its_own_key(three):
    gateway, a, b, local = three
    gw = gateway.start(CONFIG)
    r = gw.chat("gpt-4o", headers=CALLER_KEYS)
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "tls-a"
    assert r.header("x-llm-attempts") == "1"
    assert r.header("x-llm-fallback-reason") is None
    assert r.json()["choices"][0]["message"]["content"] == "Hello from tls-a (model gpt-4o)"

    (rec,) = a.requests()
    assert rec["tls"]["sni"] == SNI
    assert rec["tls"]["alpn"] == "http/1.1"     # Envoy offers h2 too; the mock only http/1.1
    assert rec["path"] == "/v1/chat/completions"
    assert header(rec, "host") == [SNI]         # :authority, as HTTP/1.1 Host
    assert header(rec, "authorization") == ["Bearer sk-tls-a"]
    assert header(rec, "x-api-key") == [] and header(rec, "api-key") == []
    assert json.loads(rec["body"])["model"] == "gpt-4o"
    assert (b.request_count(), local.request_count()) == (0, 0)


def test_503_falls_over_to_tls_provider_with_path_prefix_and_its_headers(three):
    gateway, a, b, local = three
    a.set_default(status=503)
    gw = gateway.start(CONFIG)
    r = gw.chat("gpt-4o", stream=True, headers=CALLER_KEYS)
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "tls-b"
    assert r.header("x-llm-attempts") == "2"
    assert r.header("x-llm-fallback-reason") == "overloaded"
    assert r.sse_content() == "tls-b:0 tls-b:1 tls-b:2 "

    (rec_a,) = a.requests()
    assert rec_a["tls"]["sni"] == SNI
    assert header(rec_a, "authorization") == ["Bearer sk-tls-a"]
    (rec,) = b.wait_settled()  # the last write is recorded after the client may read it
    assert rec["outcome"] == "streamed"
    assert rec["tls"]["sni"] == SNI and rec["tls"]["alpn"] == "http/1.1"
    assert rec["path"] == "/openai/v1/chat/completions"
    assert header(rec, "host") == [SNI]
    assert header(rec, "api-key") == ["sk-tls-b"]
    assert header(rec, "anthropic-version") == ["2023-06-01"]
    assert header(rec, "authorization") == [] and header(rec, "x-api-key") == []
    assert rec["body_sha256"] == rec_a["body_sha256"]   # the same body, replayed
    assert local.request_count() == 0


@pytest.mark.parametrize("bad_cert,ssl_stat", [
    ("wrong_san", "ssl.fail_verify_san"),     # trusted CA, certificate for another name
    ("unknown_ca", "ssl.fail_verify_error"),  # right name, signed by a CA Envoy does not trust
])
def test_certificate_that_does_not_verify_is_a_connection_error_and_falls_over(
        tls_gateway, pki, bad_cert, ssl_stat):
    gateway, make = tls_gateway
    a = make("tls-a", pki[bad_cert])
    b = make("tls-b")
    local = gateway.mocks("local")
    gw = gateway.start(CONFIG)
    r = gw.chat("gpt-4o", headers=CALLER_KEYS)
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "tls-b"
    assert r.header("x-llm-attempts") == "2"
    assert r.header("x-llm-fallback-reason") == "connection_error"
    # Envoy refused the handshake: the mock got a TLS client hello (with our SNI), no request.
    assert a.request_count() == 0
    health = a.health()
    assert health["tls_handshake_failures"] >= 1
    assert health["tls_handshake_errors"][0]["sni"] == SNI
    assert gw.stats(f"cluster.tls-a.{ssl_stat}")[f"cluster.tls-a.{ssl_stat}"] >= 1
    assert b.request_count() == 1 and local.request_count() == 0


def test_wildcard_certificate_matches_the_sni(tls_gateway, pki):
    """Azure-style certificates are wildcards (*.openai.azure.com): the renderer's exact SAN
    matcher on the sni must accept them (Envoy applies DNS wildcard rules to exact)."""
    gateway, make = tls_gateway
    a = make("tls-a", pki["wildcard"])
    make("tls-b")
    gateway.mocks("local")
    gw = gateway.start(CONFIG)
    r = gw.chat("gpt-4o")
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "tls-a"
    assert a.last_request()["tls"]["sni"] == SNI


def test_plain_http_local_server_after_two_failed_tls_providers(three):
    gateway, a, b, local = three
    a.set_default(status=500)
    b.set_default(action="reset")
    gw = gateway.start(CONFIG)
    r = gw.chat("gpt-4o", headers=CALLER_KEYS)
    assert r.status == 200, r.text
    assert r.header("x-llm-provider") == "local"
    assert r.header("x-llm-attempts") == "3"
    (rec,) = local.requests()
    assert rec["tls"] is None
    assert rec["path"] == "/v1/chat/completions"
    assert header(rec, "x-api-key") == ["sk-local"]
    assert header(rec, "authorization") == [] and header(rec, "api-key") == []


def test_provider_extra_headers_stay_with_their_provider(three):
    gateway, a, b, local = three
    a.set_default(status=500)
    b.set_default(status=500)
    gw = gateway.start(CONFIG)
    r = gw.chat("gpt-4o", headers=CALLER_KEYS)
    assert r.status == 200 and r.header("x-llm-provider") == "local", r.text
    assert header(b.last_request(), "anthropic-version") == ["2023-06-01"]
    assert header(local.last_request(), "anthropic-version") == []


# ------------------------------------------------------------------ the mock itself
def test_mock_serves_tls_standalone_and_records_sni_and_alpn(pki, tmp_path):
    """`python mock_provider.py --tls-cert --tls-key` (as in a container), Python's ssl client."""
    cert, key = pki["good"]
    proc = subprocess.Popen([sys.executable, "-u", str(HERE / "mock_provider.py"), "--name", "t",
                             "--port", "0", "--control-port", "0",
                             "--tls-cert", cert, "--tls-key", key],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        info = json.loads(proc.stdout.readline())
        assert info["tls"] is True
        m = MockClient("t", f"http://{HOST}:{info['control_port']}")
        ctx = ssl.create_default_context(cafile=pki["ca"])
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        with socket.create_connection((HOST, info["port"]), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname=SNI) as s:
                assert s.selected_alpn_protocol() == "http/1.1"
                s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                          b"content-length: 2\r\nconnection: close\r\n\r\n{}")
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
        assert data.startswith(b"HTTP/1.1 200 OK")
        (rec,) = m.requests()
        assert rec["tls"]["sni"] == SNI and rec["tls"]["alpn"] == "http/1.1"
        assert rec["tls"]["version"].startswith("TLS")
        assert m.health()["tls"] is True
    finally:
        proc.terminate()
        proc.wait(timeout=5)
        proc.stdout.close()
        proc.stderr.close()
