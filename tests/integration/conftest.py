"""pytest fixtures for the integration suite.

One scenario suite, two launchers: with ``LLM_FAILOVER_GATEWAY_URL`` unset the
fixtures start their own mocks (in-process) and Envoy; with it set they attach
to an already-running gateway and to mocks found through
``LLM_FAILOVER_MOCK_<NAME>_CONTROL`` (see harness.py).  Scenarios only use the
``gateway`` fixture and never care which launcher is behind it::

    def test_falls_over_on_503(gateway):
        primary, secondary = gateway.mocks("primary", "secondary")
        primary.set_default(status=503)
        gw = gateway.start("envoy/demo.failover.yaml")   # PRIMARY_PORT etc. set for you
        r = gw.chat("gpt-4o")
        assert r.status == 200 and r.header("x-llm-provider") == "secondary"

Fixtures
--------
``mock_factory(*names, mode=None, local=False)``
                                     start mocks (one name -> one MockClient,
                                     several -> a tuple); stopped at teardown.
                                     In external mode: attach to the running
                                     mocks (and reset them) unless local=True
``envoy_factory(config, **kw)``      start an Envoy (harness.Envoy kwargs),
                                     ready on return; stopped at teardown
``render(source, env=None)``         harness.render_config into the test's tmp dir
``gateway``                          GatewaySetup: ``.mocks()``, ``.start()``,
                                     ``.start_bootstrap()``, ``.env``
``fleet_store``                      fleet_store.FleetStore: a real Redis and Envoy's
                                     rate-limit service on it, started (skipped when
                                     not installed, failed instead under CI=true);
                                     ``.env`` has RATELIMIT_HOST/RATELIMIT_PORT
On a failing test the tail of every Envoy log and each mock's request list are
attached to the report.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import fleet_store as fleet_store_mod
import gateway_control
import harness
from harness import (Envoy, Gateway, HarnessError, MockClient, RemoteEnvoy, external_mode,
                     env_key, free_port, render_config, start_mock)

_ENVOYS = pytest.StashKey[list]()
_MOCKS = pytest.StashKey[list]()
_STORES = pytest.StashKey[list]()


def pytest_configure(config):
    config.addinivalue_line("markers", "envoy: starts a real Envoy process")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    for e in item.stash.get(_ENVOYS, []):
        report.sections.append((f"envoy log tail ({e.log_path})", e.log_tail(80)))
    for store in item.stash.get(_STORES, []):
        report.sections.append(("fleet store logs", store.logs()))
    for m in item.stash.get(_MOCKS, []):
        try:
            lines = [f"#{r['id']} conn{r['connection']} {r['method']} {r['path']} -> "
                     f"{r['outcome']}{' client_gone' if r['client_gone'] else ''}"
                     for r in m.requests(bodies=False)]
        except Exception as exc:  # noqa: BLE001 - diagnostics only
            lines = [f"(cannot read: {exc!r})"]
        report.sections.append((f"mock {m.name} requests", "\n".join(lines) or "(none)"))


@pytest.fixture
def repo_root() -> Path:
    return harness.REPO_ROOT


@pytest.fixture
def mock_factory(request):
    created: list[MockClient] = []
    request.node.stash[_MOCKS] = created

    def make(*names: str, mode: str | None = None, local: bool = False):
        if not names:
            raise HarnessError("mock_factory needs at least one name")
        out = []
        for n in names:
            if external_mode() and not local:
                if not os.environ.get(f"LLM_FAILOVER_MOCK_{env_key(n)}_CONTROL"):
                    # The docker-compose harness runs a fixed set of mocks.
                    pytest.skip(f"the external gateway runs no mock {n!r}")
                m = MockClient.external(n)
                m.reset()
            else:
                m = start_mock(n, mode)
            created.append(m)
            out.append(m)
        return out[0] if len(out) == 1 else tuple(out)

    try:
        yield make
    finally:
        errors = []
        for m in reversed(created):
            try:
                m.stop()
            except Exception as e:  # noqa: BLE001 - stop the others anyway
                errors.append(e)
        if errors:
            raise errors[0]


@pytest.fixture
def envoy_factory(request, tmp_path):
    started: list[Envoy] = []
    request.node.stash[_ENVOYS] = started
    counter = iter(range(1, 1000))

    def make(config: str | Path, **kw: Any) -> Envoy:
        e = Envoy(config, kw.pop("workdir", tmp_path / f"envoy{next(counter)}"), **kw)
        started.append(e)
        return e.start()

    try:
        yield make
    finally:
        for e in reversed(started):
            e.stop()


@pytest.fixture
def render(tmp_path):
    def do(source: str | Path, env: dict | None = None) -> Path:
        return render_config(source, env, out_dir=tmp_path / "rendered")
    return do


class GatewaySetup:
    """Starts (or attaches to) the mocks and the gateway for one scenario.

    ``env`` holds the variables given to ``llm-failover render`` and Envoy:
    ``<NAME>_PORT`` for every mock started here, ``LISTEN_PORT`` (=
    ``GATEWAY_PORT`` = ``LISTENER_PORT``), ``ADMIN_PORT`` and ``MOCK_HOST``; ``start(env=...)``
    overrides or adds to them."""

    def __init__(self, mock_factory, envoy_factory, tmp_path: Path):
        self._mock_factory = mock_factory
        self._envoy_factory = envoy_factory
        self._tmp = tmp_path
        self.external = external_mode()
        self.mock_clients: dict[str, MockClient] = {}
        gw_port = free_port()
        self.env: dict[str, str] = {"GATEWAY_PORT": str(gw_port), "LISTEN_PORT": str(gw_port),
                                    "LISTENER_PORT": str(gw_port),
                                    "ADMIN_PORT": str(free_port()), "MOCK_HOST": harness.HOST,
                                    "STATUS_PORT": str(free_port())}

    def mocks(self, *names: str, mode: str | None = None):
        got = self._mock_factory(*names, mode=mode)
        got_t = got if isinstance(got, tuple) else (got,)
        for m in got_t:
            self.mock_clients[m.name] = m
            self.env[f"{env_key(m.name)}_PORT"] = str(m.port)
        return got

    def start(self, source: str | Path, env: dict | None = None, **envoy_kw: Any) -> Gateway:
        """Render a failover YAML and start Envoy on it (or use the external gateway)."""
        full_env = {**self.env, **{k: str(v) for k, v in (env or {}).items()}}
        if self.external and not gateway_control.control_dir():
            return self._external(source)
        path = render_config(source, full_env, out_dir=self._tmp / "rendered")
        if self.external:
            return self._restart_external(path, full_env)
        return self._start_envoy(path, full_env, envoy_kw)

    def start_bootstrap(self, config: str | Path, env: dict | None = None,
                        **envoy_kw: Any) -> Gateway:
        """Start Envoy on a complete bootstrap (file or YAML text), no rendering."""
        full_env = {**self.env, **{k: str(v) for k, v in (env or {}).items()}}
        if self.external and not gateway_control.control_dir():
            return self._external(config)
        if self.external:
            if not (isinstance(config, str) and "\n" in config):
                p = Path(config)
                config = p if p.is_absolute() else harness.REPO_ROOT / p
            return self._restart_external(config, full_env)
        return self._start_envoy(config, full_env, envoy_kw)

    def _restart_external(self, config, env: dict) -> Gateway:
        """The gateway runs in another container that restarts its Envoy on request
        (integration/gateway.sh): each scenario still gets a fresh gateway on its own config."""
        try:
            url, admin = gateway_control.restart(config, env["ADMIN_PORT"])
        except RuntimeError as e:
            raise HarnessError(str(e)) from None
        log = gateway_control.control_dir() / "envoy.log"
        return Gateway(url, admin, envoy=RemoteEnvoy(admin, log), log_path=str(log))

    def _start_envoy(self, config, env: dict, envoy_kw: dict) -> Gateway:
        listener = envoy_kw.pop("listener", None)
        e = self._envoy_factory(config, env=env, **envoy_kw)
        return Gateway(e.listener_url(listener), e.admin_url, envoy=e)

    def _external(self, source) -> Gateway:
        want = os.environ.get("LLM_FAILOVER_GATEWAY_CONFIG")
        name = Path(str(source)).name if "\n" not in str(source) else "<inline config>"
        if want and Path(want).name != name:
            pytest.skip(f"external gateway runs {want}; this scenario needs {name}")
        return Gateway(os.environ["LLM_FAILOVER_GATEWAY_URL"],
                       os.environ.get("LLM_FAILOVER_ADMIN_URL"),
                       log_path=os.environ.get("LLM_FAILOVER_ENVOY_LOG"))


@pytest.fixture
def gateway(mock_factory, envoy_factory, tmp_path) -> GatewaySetup:
    return GatewaySetup(mock_factory, envoy_factory, tmp_path)


@pytest.fixture
def fleet_store(request, tmp_path):
    """Redis and the rate-limit service, started; stopped (killed if need be) at teardown."""
    why = fleet_store_mod.missing()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the fleet's store must run under CI: {why}")
        pytest.skip(why)
    store = fleet_store_mod.FleetStore(tmp_path / "store")
    request.node.stash[_STORES] = [store]
    try:
        yield store.start()
    finally:
        store.stop()
