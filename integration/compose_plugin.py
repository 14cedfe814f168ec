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
