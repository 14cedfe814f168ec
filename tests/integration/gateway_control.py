"""Client side of integration/gateway.sh: restart the compose harness's Envoy on a config.

Used by conftest's GatewaySetup when the gateway runs in another container (external mode
with a control directory): every scenario still gets a fresh gateway on its own config. The
control directory (LLM_FAILOVER_GATEWAY_DIR, /gw in the compose file) is shared with the envoy
container at the same path.
"""
from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request
from pathlib import Path

_count = 0


class GatewayExited(RuntimeError):
    """Envoy exited during startup (bad config)."""


def control_dir() -> Path | None:
    d = os.environ.get("LLM_FAILOVER_GATEWAY_DIR")
    return Path(d) if d and Path(d, "started").exists() else None


def _started(d: Path) -> str:
    try:
        return (d / "started").read_text().strip()
    except OSError:
        return ""


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=2) as r:
        return r.status, r.read().decode(errors="replace")


def restart(config: str | Path, admin_port: int | str, timeout: float = 30.0) -> tuple[str, str]:
    """Restart the gateway on `config` (a bootstrap file or YAML text) whose admin listens on
    `admin_port`; returns (listener URL, admin URL) once Envoy is ready."""
    global _count
    d = control_dir()
    if d is None:
        raise RuntimeError("no gateway control directory (LLM_FAILOVER_GATEWAY_DIR)")
    _count += 1
    target = d / f"config-{os.getpid()}-{_count}.yaml"
    if isinstance(config, str) and "\n" in config:
        target.write_text(config)
    else:
        shutil.copyfile(config, target)
    before = _started(d)
    tmp = d / "restart.tmp"
    tmp.write_text(str(target))
    tmp.rename(d / "restart")
    admin = f"http://127.0.0.1:{admin_port}"
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        now = _started(d)
        if now and now != before and not (d / "restart").exists():
            try:
                ex = (d / "exited").read_text().split()
            except OSError:
                ex = []
            if ex and ex[0] == now.split()[0]:
                log = (d / "envoy.log").read_text(errors="replace")[-3000:]
                raise GatewayExited(f"envoy exited with {ex[1]} during startup:\n{log}")
            try:
                status, text = _get(admin + "/ready")
                if status == 200 and text.strip() == "LIVE":
                    break
            except OSError as e:
                last = repr(e)
        time.sleep(0.05)
    else:
        log = (d / "envoy.log").read_text(errors="replace")[-3000:] if (d / "envoy.log").exists() else ""
        raise RuntimeError(f"gateway not ready on {target.name} within {timeout}s ({last}):\n{log}")
    _, text = _get(admin + "/listeners?format=json")
    for ls in json.loads(text).get("listener_statuses", []):
        sa = (ls.get("local_address") or {}).get("socket_address") or {}
        if sa.get("port_value"):
            return f"http://{sa.get('address', '127.0.0.1')}:{sa['port_value']}", admin
    raise RuntimeError(f"gateway on {target.name} has no TCP listener")
