"""`envoy --mode validate` on every example config under envoy/.

* ``envoy/*.yaml`` (Envoy bootstraps) are validated as they are;
* ``envoy/*.failover.yaml`` (llm-failover sources) are first rendered with
  ``llm-failover render`` (every ``${VAR}`` without a default gets a free port if
  its name ends in PORT, a dummy string otherwise), then validated.

``LLM_FAILOVER_CONFIG_DIR`` points it at another directory.  Validation runs
with cwd = repo root, against which configs' relative wasm ``filename``s
resolve (a missing module fails with a clear message); it loads the module and
runs the plugin's configure callback.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from harness import (REPO_ROOT, HarnessError, config_vars, envoy_bin, free_port, grouping_mode,
                     render_config, runtime)

ENVOY_DIR = Path(os.environ.get("LLM_FAILOVER_CONFIG_DIR") or REPO_ROOT / "envoy")
WASM_REF = re.compile(r"filename:\s*[\"']?([^\s\"']+\.wasm)")
HOST_ENV_KEYS = re.compile(r"host_env_keys:\s*\n((?:\s*-\s*\S+\s*\n)+)")
CREDENTIAL_ENV = re.compile(r'\\?"env\\?":\s*\\?"([A-Za-z_][A-Za-z0-9_]*)')


def _credential_env(text):
    """Fake values for the credential variables a config passes into the wasm VM (or the native
    module reads from Envoy's environment: its configuration names them, `"env":"NAME"`): the
    filter refuses to configure when one is unset, exactly as it should in production."""
    names = set(CREDENTIAL_ENV.findall(text)) if runtime() == "native" else set()
    for block in HOST_ENV_KEYS.findall(text):
        names.update(re.findall(r"-\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)", block))
    return {name: "validate-dummy-key" for name in names}


def _all_yaml():
    return sorted(p for p in ENVOY_DIR.glob("*.yaml")) + sorted(ENVOY_DIR.glob("*.yml"))


BOOTSTRAPS = [p for p in _all_yaml() if not p.name.endswith((".failover.yaml", ".failover.yml"))]
SOURCES = [p for p in _all_yaml() if p.name.endswith((".failover.yaml", ".failover.yml"))]
# Failover files the renderer must refuse for Envoy 1.36-1.38, with the message naming the fix:
# Bedrock signed by Envoy's aws_request_signing needs router mode (docs/clouds.md).
ROUTER_MODE_ONLY = {"clouds.failover.yaml": "needs Envoy 1.39+"}


def _validate(path):
    missing = sorted({m for m in WASM_REF.findall(path.read_text())
                      if not (REPO_ROOT / m).exists()})
    if missing:
        pytest.fail(f"{path.name} needs {', '.join(missing)}, not built: run scripts/build.sh first")
    env = {**os.environ, **_credential_env(path.read_text())}
    r = subprocess.run([envoy_bin(), "--mode", "validate", "-c", str(path), "-l", "warning"],
                       cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=60, env=env)
    out = (r.stdout + r.stderr)[-4000:]
    assert r.returncode == 0, f"envoy --mode validate {path} failed ({r.returncode}):\n{out}"
    assert "OK" in r.stdout + r.stderr, out


def _params():
    items = [pytest.param(p, id=p.name) for p in BOOTSTRAPS + SOURCES]
    return items or [pytest.param(None, id="none", marks=pytest.mark.skip(
        reason=f"no example configs under {ENVOY_DIR} yet"))]


@pytest.mark.parametrize("path", _params())
def test_example_config_validates(path, tmp_path):
    if path in BOOTSTRAPS and grouping_mode():
        # Checked-in bootstraps are rendered for Envoy 1.40 (router mode): an older Envoy must
        # refuse them rather than run them with every retry on the first provider.
        r = subprocess.run([envoy_bin(), "--mode", "validate", "-c", str(path), "-l", "warning"],
                           cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=60,
                           env={**os.environ, **_credential_env(path.read_text())})
        assert r.returncode != 0, "an Envoy before 1.39 accepted a router-mode bootstrap"
        assert "refresh_cluster_on_retry" in r.stdout + r.stderr, (r.stdout + r.stderr)[-2000:]
        return
    if path in SOURCES:
        env = {}
        for var, default in config_vars(path.read_text()).items():
            if default is None:
                env[var] = str(free_port()) if var.upper().endswith("PORT") else "validate-dummy"
        if path.name in ROUTER_MODE_ONLY and grouping_mode():
            with pytest.raises(HarnessError, match=re.escape(ROUTER_MODE_ONLY[path.name])):
                render_config(path, env, out_dir=tmp_path)
            return
        path = render_config(path, env, out_dir=tmp_path)
    _validate(path)
