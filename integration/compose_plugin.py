"""pytest plugin loaded by the compose runner (`-p compose_plugin`), never by the native harness.

The `tests` container has Python but neither the `envoy` binary nor the `llm-failover` CLI.
Scenarios in external-gateway mode need neither; the few tests that start their own Envoy or
render a config locally (launcher self-tests, config validation) would fail there for want of
a tool. This plugin turns exactly that condition (harness.envoy_bin() / the CLI missing) into a
skip with a reason; every other failure stays a failure.

It must be imported before conftest.py and the test modules bind these names
(`from harness import envoy_bin, render_config`); `-p` plugins are.
"""
from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest

_SUITE = Path(__file__).resolve().parent.parent / "tests" / "integration"
if str(_SUITE) not in sys.path:
    sys.path.insert(0, str(_SUITE))

import harness  # noqa: E402

_envoy_bin = harness.envoy_bin
_render_config = harness.render_config


_runs: dict[str, bool] = {}


def _runnable(path: str, flag: str = "--version") -> bool:
    # The mounted repo may hold the host's .venv/bin/envoy, a script whose interpreter path
    # does not exist in the container: only a program that answers `flag` counts.
    if path not in _runs:
        try:
            _runs[path] = subprocess.run([path, flag], capture_output=True,
                                         timeout=20).returncode == 0
        except (OSError, subprocess.SubprocessError):
            _runs[path] = False
    return _runs[path]


@functools.wraps(_envoy_bin)
def envoy_bin(*a, **kw):
    try:
        path = _envoy_bin(*a, **kw)
    except harness.HarnessError as e:
        pytest.skip(f"needs a local envoy binary (not in the compose test runner): {e}")
    if not _runnable(path):
        pytest.skip(f"needs a local envoy binary; {path} does not run in the compose test runner")
    return path


@functools.wraps(_render_config)
def render_config(*a, **kw):
    cli = str(harness.cli_bin())
    if not (Path(cli).exists() and _runnable(cli, "--help")):
        pytest.skip(f"needs the llm-failover CLI (not in the compose test runner): {harness.cli_bin()}")
    return _render_config(*a, **kw)


harness.envoy_bin = envoy_bin
harness.render_config = render_config


# --- one fresh gateway per scenario ------------------------------------------------------
# Natively every scenario starts its own Envoy (fresh breaker state, its own knobs through the
# render environment). In compose, `gateway.start(source, env)` in external mode renders the
# config here (the CLI from the mounted repo) and has integration/gateway.sh restart the
# gateway container's Envoy on it. Without a control directory the conftest behaviour stays.

class ComposeEnvoy:
    """What a scenario may touch of `gw.envoy` when the Envoy runs in another container."""

    def __init__(self, admin_url: str, log_path: Path):
        self.admin_url = admin_url
        self.log_path = log_path
        self.running = True

    def stop(self) -> None:  # the next start() replaces it
        self.running = False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, n: int = 40) -> str:
        return "".join(self.log().splitlines(True)[-n:])


def _install_restarting_gateway(conftest) -> None:
    import gateway_control

    cls = conftest.GatewaySetup
    orig_start, orig_bootstrap = cls.start, cls.start_bootstrap

    def _restart(self, config, env) -> harness.Gateway:
        try:
            url, admin = gateway_control.restart(config, env["ADMIN_PORT"])
        except gateway_control.GatewayExited as e:
            raise harness.HarnessError(str(e)) from None
        except RuntimeError as e:
            raise harness.HarnessError(str(e)) from None
        log = gateway_control.control_dir() / "envoy.log"
        return harness.Gateway(url, admin, envoy=ComposeEnvoy(admin, log), log_path=str(log))

    def start(self, source, env=None, **envoy_kw):
        if not (self.external and gateway_control.control_dir()):
            return orig_start(self, source, env, **envoy_kw)
        full = {**self.env, **{k: str(v) for k, v in (env or {}).items()}}
        path = harness.render_config(source, full, out_dir=self._tmp / "rendered")
        return _restart(self, path, full)

    def start_bootstrap(self, config, env=None, **envoy_kw):
        if not (self.external and gateway_control.control_dir()):
            return orig_bootstrap(self, config, env, **envoy_kw)
        full = {**self.env, **{k: str(v) for k, v in (env or {}).items()}}
        if not (isinstance(config, str) and "\n" in config):
            p = Path(config)
            config = p if p.is_absolute() else harness.REPO_ROOT / p
        return _restart(self, config, full)

    cls.start, cls.start_bootstrap = start, start_bootstrap


def pytest_configure(config):
    for mod in list(sys.modules.values()):
        if getattr(mod, "__file__", None) and Path(mod.__file__).resolve() == _SUITE / "conftest.py":
            if hasattr(mod, "GatewaySetup"):
                _install_restarting_gateway(mod)
            break
