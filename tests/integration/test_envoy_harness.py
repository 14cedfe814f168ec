"""Self-test of the Envoy launcher, the stats readers and teardown, on a plain
Envoy config (listener -> router -> one cluster pointing at a mock; no wasm)."""
from __future__ import annotations

import os
import time

import pytest

from harness import (HarnessError, NoResponse, free_port, http_request, plain_bootstrap,
                     prometheus_samples)

pytestmark = pytest.mark.envoy


def plain_config(listener_port: int, admin_port: int, upstream_port: int) -> str:
    endpoint = f"{{socket_address: {{address: 127.0.0.1, port_value: {upstream_port}}}}}"
    return plain_bootstrap(listener_port, admin_port, "{cluster: mock, timeout: 0s}",
                           f"[{{lb_endpoints: [{{endpoint: {{address: {endpoint}}}}}]}}]",
                           cluster="mock")


def test_envoy_launcher_stats_and_teardown(gateway):
    if gateway.external:
        pytest.skip("launcher self-test: needs a locally started Envoy")
    mock = gateway.mocks("solo")
    lport, aport = free_port(), free_port()
    gw = gateway.start_bootstrap(plain_config(lport, aport, mock.port), log_level="debug")
    e = gw.envoy
    assert gw.url == f"http://127.0.0.1:{lport}" and gw.admin_url == f"http://127.0.0.1:{aport}"
    assert e.running and "--concurrency" in e.command()

    r = gw.chat("gpt-x")
    assert r.status == 200 and r.json()["model"] == "gpt-x"
    assert r.header("x-mock-provider") == "solo"

    # SSE passes through Envoy chunk by chunk
    mock.enqueue(chunks=3, chunk_interval_ms=150)
    s = gw.chat(stream=True)
    assert s.status == 200 and s.complete and s.sse_content() == "solo:0 solo:1 solo:2 "
    t = [ts for ts, _ in s.sse_events()]
    assert t[1] - t[0] >= 0.12 and t[2] - t[1] >= 0.12, t

    # a mid-stream reset reaches the client as a truncated response
    mock.enqueue(chunks=3, abort_after_chunks=1)
    cut = gw.chat(stream=True)
    assert cut.status == 200 and not cut.complete and cut.sse_content() == "solo:0 "

    # a closed upstream before headers becomes Envoy's 503
    mock.enqueue(action="close")
    assert gw.chat().status == 503

    stats = gw.stats()
    assert stats["cluster.mock.upstream_rq_completed"] >= 4
    assert stats["cluster.mock.upstream_rq_200"] >= 3
    assert stats["http.gw.downstream_rq_total"] == 4
    assert gw.stats(filter="^cluster\\.mock\\.upstream_cx_total$") == {
        "cluster.mock.upstream_cx_total": stats["cluster.mock.upstream_cx_total"]}
    prom = gw.prometheus()
    samples = prometheus_samples(prom, "envoy_cluster_upstream_rq_total")
    assert any(lbl.get("envoy_cluster_name") == "mock" and v >= 4 for lbl, v in samples)
    assert "starting main dispatch loop" in gw.log()
    assert [rec["path"] for rec in mock.requests()] == ["/v1/chat/completions"] * 4

    pid = e.proc.pid
    e.stop()
    assert not e.running and e.returncode is not None
    with pytest.raises(OSError):
        os.kill(pid, 0)
    with pytest.raises(OSError):
        http_request(gw.url, "GET", "/", timeout=1)
    assert not os.path.exists(f"/dev/shm/envoy_shared_memory_{e.base_id * 10}")


def test_envoy_startup_failure_is_reported(envoy_factory, tmp_path):
    bad = "static_resources:\n  clusters:\n  - name: x\n    type: NOT_A_TYPE\n"
    t0 = time.monotonic()
    with pytest.raises(HarnessError, match="exited with"):
        envoy_factory(bad)
    assert time.monotonic() - t0 < 10


def test_two_envoys_side_by_side(gateway, envoy_factory):
    if gateway.external:
        pytest.skip("launcher self-test: needs a locally started Envoy")
    mock = gateway.mocks("shared")
    e1 = envoy_factory(plain_config(free_port(), 0, mock.port), concurrency=1)
    e2 = envoy_factory(plain_config(free_port(), 0, mock.port), concurrency=1)
    assert e1.base_id != e2.base_id and e1.admin_url != e2.admin_url
    for e in (e1, e2):
        assert http_request(e.listener_url(), "POST", "/v1/chat/completions",
                            json={"model": "m"}).status == 200
    assert mock.request_count() == 2


def test_upstream_down_gives_503(gateway):
    if gateway.external:
        pytest.skip("launcher self-test: needs a locally started Envoy")
    mock = gateway.mocks("flaky")
    gw = gateway.start_bootstrap(plain_config(free_port(), 0, mock.port))
    assert gw.chat().status == 200
    mock.down()
    r = gw.chat()
    assert r.status == 503 and mock.request_count() == 1
    mock.up()
    assert gw.chat().status == 200
    with pytest.raises(NoResponse):
        # sanity of the client on a server that closes at once
        mock.enqueue(action="close")
        http_request(mock.url, "POST", "/x", json={})


FAKE_CLI = r'''#!{python}
"""Stand-in for `llm-failover render SRC --out OUT`: ${VAR} / ${VAR:-default} only."""
import os, re, sys
cmd, src, flag, out = sys.argv[1:5]
assert cmd == "render" and flag == "--out", sys.argv


def sub(m):
    value = os.environ.get(m.group(1), m.group(2))
    if value is None:
        sys.exit(f"{src}: variable {m.group(1)} is not set")
    return value


text = open(src).read()
open(out, "w").write(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}", sub, text))
'''


@pytest.fixture
def fake_cli(tmp_path, monkeypatch):
    import sys
    p = tmp_path / "fake-llm-failover"
    p.write_text(FAKE_CLI.replace("{python}", sys.executable))
    p.chmod(0o755)
    monkeypatch.setenv("LLM_FAILOVER_CLI", str(p))
    return p


def test_gateway_start_renders_with_port_env(gateway, fake_cli, tmp_path):
    """The scenario flow: mocks -> render (env: <NAME>_PORT, GATEWAY_PORT, ADMIN_PORT) -> Envoy."""
    if gateway.external:
        pytest.skip("launcher self-test: needs a locally started Envoy")
    primary = gateway.mocks("primary")
    template = (plain_config(1, 2, 3)
                .replace("port_value: 1}", "port_value: ${GATEWAY_PORT}}")
                .replace("port_value: 2}", "port_value: ${ADMIN_PORT:-0}}")
                .replace("port_value: 3}", "port_value: ${PRIMARY_PORT}}"))
    source = tmp_path / "plain.failover.yaml"
    source.write_text(template)
    gw = gateway.start(source)
    assert gw.url == f"http://127.0.0.1:{gateway.env['GATEWAY_PORT']}"
    assert gw.admin_url == f"http://127.0.0.1:{gateway.env['ADMIN_PORT']}"
    assert gateway.env["PRIMARY_PORT"] == str(primary.port)
    assert gw.chat().header("x-mock-provider") == "primary"


def test_render_fails_loudly_without_cli(gateway, monkeypatch, tmp_path):
    if gateway.external:
        pytest.skip("launcher self-test: needs a locally started Envoy")
    monkeypatch.setenv("LLM_FAILOVER_CLI", str(tmp_path / "no-such-cli"))
    (tmp_path / "x.failover.yaml").write_text("x: 1\n")
    with pytest.raises(HarnessError, match="CLI not found"):
        gateway.start(tmp_path / "x.failover.yaml")


def test_free_port_never_hands_out_one_port_twice():
    # One gateway takes three ports before its Envoy binds any of them (listener, admin,
    # status): a port handed out and not yet bound is free again to the kernel, so without
    # memory of what it handed out the harness gave two of them the same port now and then.
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
