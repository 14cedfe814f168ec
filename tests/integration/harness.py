"""Integration-test plumbing: mock providers, Envoy launcher, gateway HTTP client.

Everything binds 127.0.0.1 and picks ports at run time; every wait loop is
bounded in time.  pytest fixtures wrapping these live in ``conftest.py``.

Main pieces
-----------
``free_port()``                    a currently free TCP port on 127.0.0.1
``MockClient``                     control-API client for one mock provider
                                   (``start_mock()`` launches one in-process or
                                   as a subprocess, ``MockClient.external()``
                                   attaches to an already-running one)
``Envoy``                          starts ``envoy`` on a config, waits for
                                   ``/ready``, reads stats/prometheus/log, stops
``render_config()``                runs ``llm-failover render`` on a failover YAML
``http_request()``                 raw-socket HTTP/1.1 client that timestamps
                                   every body chunk (SSE timing)
``Gateway``                        what a scenario talks to: URL + request
                                   helpers + admin/log access, whoever started it

Environment variables
---------------------
``ENVOY_BIN``                      envoy binary (default ``<repo>/.venv/bin/envoy``,
                                   then ``envoy`` next to the running Python)
``LLM_FAILOVER_CLI``               CLI binary (default ``<repo>/target/release/llm-failover``)
``ENVOY_VERSION``                  the Envoy under test (``1.36``; default 1.40): configs are
                                   rendered for it (``--envoy-version``), and
                                   ``envoy_version()`` lets scenarios skip what cannot apply
``LLM_FAILOVER_ENVOY_LOG_LEVEL``   default ``-l`` level (``info``)
``LLM_FAILOVER_MOCK_MODE``         ``inprocess`` (default) or ``process``
``LLM_FAILOVER_GATEWAY_URL``       external mode: use this running gateway ...
``LLM_FAILOVER_ADMIN_URL``         ... its admin endpoint (optional)
``LLM_FAILOVER_ENVOY_LOG``         ... a file holding its log (optional)
``LLM_FAILOVER_GATEWAY_CONFIG``    ... the example config it runs (optional;
                                   scenarios asking for another one are skipped)
``LLM_FAILOVER_MOCK_<NAME>_CONTROL``  ... control URL of mock NAME (upper case,
                                   non-alphanumerics as ``_``)
"""
from __future__ import annotations

import atexit
import collections
import ctypes
import itertools
import json as jsonlib
import os
import re
import select
import signal
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
HOST = "127.0.0.1"
sys.path.insert(0, str(HERE))
from mock_provider import MockProvider  # noqa: E402


class HarnessError(RuntimeError):
    """The test infrastructure itself could not do what was asked."""


# ----------------------------------------------------------------------- basics
def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


_EPHEMERAL = _ephemeral_range()
_rng = random.SystemRandom()
# The ports this process handed out lately: a port is free until its Envoy binds it, so two
# calls for one Envoy (its listener, admin and status ports) could otherwise get the same one.
_handed: collections.deque[int] = collections.deque(maxlen=2000)


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago, for a process started later (Envoy).

    Picked below the kernel's ephemeral range: a port from bind(0) is an ephemeral one, and the
    suite's own client connections can take it again before Envoy binds it ("Address already in
    use"). Ports outside that range are never handed out to outgoing connections."""
    low = 20000 if _EPHEMERAL[0] > 21000 else 1024
    high = min(_EPHEMERAL[0], 32768)
    # pytest-xdist workers (scripts/test.sh) pick from disjoint slices, so two workers never
    # hand the same port to two Envoys started at the same moment.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if count > 1 and worker[2:].isdigit():
        width = (high - low) // count
        low += int(worker[2:]) % count * width
        high = low + width
    for _ in range(200):
        port = _rng.randrange(low, high)
        if port in _handed:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
            _handed.append(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_until(pred: Callable[[], Any], timeout: float, what: str,
               interval: float = 0.05) -> Any:
    """Poll `pred` until it returns something truthy; bounded in time and count."""
    deadline = time.monotonic() + timeout
    max_polls = int(timeout / interval) + 2
    last_exc: BaseException | None = None
    for _ in range(max_polls):
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - reported below
            last_exc = e
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    raise HarnessError(f"timed out after {timeout:.1f}s waiting for {what}"
                       + (f" (last error: {last_exc!r})" if last_exc else ""))


def env_key(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()


_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()


def _kill_all_live() -> None:
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for p in procs:
        _terminate(p, grace=1.0)


atexit.register(_kill_all_live)


try:  # loaded here, not in the forked child (no imports/dlopen after fork)
    _LIBC = ctypes.CDLL(None, use_errno=True)
    _PRCTL = _LIBC.prctl
except (OSError, AttributeError):
    _PRCTL = None


def _pdeathsig() -> None:
    """preexec_fn: the child gets SIGKILL when the thread that spawned it dies
    (Linux PR_SET_PDEATHSIG), so even a SIGKILLed pytest leaves no Envoy behind.
    Spawn from the main thread (fixtures do)."""
    if _PRCTL is not None:
        _PRCTL(1, 9)  # PR_SET_PDEATHSIG, SIGKILL


def _spawn(args: list[str], **kw) -> subprocess.Popen:
    p = subprocess.Popen(args, start_new_session=True, preexec_fn=_pdeathsig, **kw)
    with _LIVE_LOCK:
        _LIVE.add(p)
    return p


def _terminate(p: subprocess.Popen, grace: float = 5.0) -> int | None:
    """SIGTERM the process group, SIGKILL after `grace` seconds, always reap."""
    try:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                p.terminate()
            try:
                p.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    p.kill()
                p.wait(timeout=5)
        return p.returncode
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(p)


def _http_json(method: str, url: str, body: Any = None, timeout: float = 5.0) -> Any:
    data = None if body is None else jsonlib.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return jsonlib.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        raise HarnessError(f"{method} {url} -> {e.code}: {e.read().decode(errors='replace')}")


def _http_text(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


# ------------------------------------------------------------------------ mocks
class MockClient:
    """Control-API client for one mock provider (wherever it runs)."""

    def __init__(self, name: str, control_url: str):
        self.name = name
        self.control_url = control_url.rstrip("/")
        try:
            self._health = self.health()
        except OSError as e:
            raise HarnessError(f"mock {name!r}: control API {self.control_url} unreachable: {e}")
        self.port: int = self._health["port"]

    @classmethod
    def external(cls, name: str) -> "MockClient":
        var = f"LLM_FAILOVER_MOCK_{env_key(name)}_CONTROL"
        url = os.environ.get(var)
        if not url:
            raise HarnessError(f"external gateway mode: mock {name!r} needs {var}=http://host:port")
        return cls(name, url)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        return _http_json(method, self.control_url + path, body)

    def health(self) -> dict:
        return self._call("GET", "/health")

    def set_default(self, behaviour: dict | None = None, **fields) -> dict:
        """Default behaviour, e.g. ``m.set_default(status=503)``."""
        return self._call("POST", "/behaviour", {**(behaviour or {}), **fields})

    def enqueue(self, *behaviours: dict, **fields) -> int:
        """Queue one-shot behaviours: ``m.enqueue({"status": 429}, {"action": "reset"})``
        or ``m.enqueue(status=500, times=2)``."""
        items = list(behaviours) + ([fields] if fields else [])
        return self._call("POST", "/enqueue", items)["queue_length"]

    def requests(self, since: int = 0, bodies: bool = True) -> list[dict]:
        q = f"?since={since}" + ("" if bodies else "&bodies=0")
        return self._call("GET", "/requests" + q)["requests"]

    def request_count(self) -> int:
        return self.health()["request_count"]

    def last_request(self) -> dict | None:
        r = self.requests()
        return r[-1] if r else None

    def wait_requests(self, n: int, timeout: float = 5.0) -> list[dict]:
        """Wait until at least `n` requests were recorded; returns them all."""
        def enough():
            r = self.requests(bodies=False)
            return (r,) if len(r) >= n else None
        return wait_until(enough, timeout, f"{n} request(s) at mock {self.name}")[0]

    def wait_settled(self, timeout: float = 5.0) -> list[dict]:
        """Wait until no recorded request is in progress; returns the records (no bodies)."""
        def settled():
            r = self.requests(bodies=False)
            return (r,) if all(x["outcome"] != "in_progress" for x in r) else None
        return wait_until(settled, timeout, f"mock {self.name} requests to settle")[0]

    def reset(self) -> dict:
        return self._call("POST", "/reset", {})

    def listener(self, up: bool, drop_connections: bool = True) -> dict:
        return self._call("POST", "/listener", {"up": up, "drop_connections": drop_connections})

    def down(self) -> dict:
        return self.listener(False)

    def up(self) -> dict:
        return self.listener(True)

    def stop(self) -> None:  # external mocks are not ours to stop
        pass

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} port={self.port} control={self.control_url}>"


class LocalMock(MockClient):
    """A mock provider running on threads of this process."""

    def __init__(self, name: str):
        self.server = MockProvider(name).start()
        super().__init__(name, self.server.control_url)

    def stop(self) -> None:
        self.server.stop()


class ProcessMock(MockClient):
    """A mock provider running as `python mock_provider.py` (as in a container)."""

    def __init__(self, name: str, startup_timeout: float = 10.0, extra_args: Iterable[str] = ()):
        self.proc = _spawn([sys.executable, "-u", str(HERE / "mock_provider.py"),
                            "--name", name, "--port", "0", "--control-port", "0", *extra_args],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            r, _, _ = select.select([self.proc.stdout], [], [], startup_timeout)
            line = self.proc.stdout.readline() if r else b""
            if not line:
                raise HarnessError(f"mock {name} did not start: "
                                   f"{self.proc.stderr.read1(4096).decode(errors='replace')}")
            info = jsonlib.loads(line)
            super().__init__(name, f"http://{HOST}:{info['control_port']}")
        except BaseException:
            _terminate(self.proc, grace=1)
            raise

    def stop(self) -> None:
        _terminate(self.proc, grace=3)
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()


def start_mock(name: str, mode: str | None = None) -> MockClient:
    mode = mode or os.environ.get("LLM_FAILOVER_MOCK_MODE", "inprocess")
    if mode == "inprocess":
        return LocalMock(name)
    if mode == "process":
        return ProcessMock(name)
    raise HarnessError(f"unknown mock mode {mode!r} (inprocess|process)")


# ------------------------------------------------------------------------ envoy
def envoy_bin() -> str:
    explicit = os.environ.get("ENVOY_BIN")
    if explicit:
        if not Path(explicit).exists():
            raise HarnessError(f"ENVOY_BIN={explicit} does not exist")
        return explicit
    for cand in (REPO_ROOT / ".venv" / "bin" / "envoy", Path(sys.executable).parent / "envoy"):
        if cand.exists():
            return str(cand)
    raise HarnessError(f"no envoy binary: expected {REPO_ROOT / '.venv/bin/envoy'} "
                       "(run scripts/setup.sh) or set ENVOY_BIN")


_base_ids = itertools.count(1)


def _unique_base_id() -> int:
    # Envoy multiplies the base id by 10 for its shared-memory / domain-socket names.
    return 100_000 + (os.getpid() % 100_000) * 16 + next(_base_ids) % 16


def _parse_stats_text(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for line in text.splitlines():
        k, sep, v = line.partition(": ")
        if not sep:
            continue
        v = v.strip()
        try:
            out[k] = int(v)
        except ValueError:
            out[k] = v
    return out


class Envoy:
    """One Envoy process on a bootstrap config.

    ``config`` is a ``Path`` to a file, or a ``str`` that is either a path
    (relative paths resolve against the repo root) or the YAML text itself
    (anything with a newline).  Envoy runs with cwd = repo root (configs refer
    to ``dist/llm_failover.wasm`` relative to it), ``--concurrency``,
    a unique ``--base-id`` and, unless ``hot_restart=True``,
    ``--disable-hot-restart`` (no shared memory left in /dev/shm by a killed
    run), ``--admin-address-path`` (so the admin port is
    known even if the config says port 0) and its output in ``workdir/envoy.log``.
    """

    def __init__(self, config: str | Path, workdir: str | Path, *, concurrency: int = 2,
                 log_level: str | None = None, env: dict | None = None,
                 cwd: str | Path = REPO_ROOT, extra_args: Iterable[str] = (),
                 binary: str | None = None, startup_timeout: float = 20.0,
                 hot_restart: bool = False):
        self.hot_restart = hot_restart
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        if isinstance(config, str) and "\n" in config:
            self.config_path = self.workdir / "envoy.yaml"
            self.config_path.write_text(config)
        else:
            p = Path(config)
            self.config_path = p if p.is_absolute() else (REPO_ROOT / p)
        self.concurrency = concurrency
        self.log_level = log_level or os.environ.get("LLM_FAILOVER_ENVOY_LOG_LEVEL", "info")
        self.env = {k: str(v) for k, v in (env or {}).items()}
        self.cwd = Path(cwd)
        self.extra_args = list(extra_args)
        self.binary = binary or envoy_bin()
        self.startup_timeout = startup_timeout
        self.log_path = self.workdir / "envoy.log"
        self.admin_address_path = self.workdir / "admin_address.txt"
        self.base_id = _unique_base_id()
        self.proc: subprocess.Popen | None = None
        self.admin_url: str | None = None
        self.returncode: int | None = None

    def command(self) -> list[str]:
        return [self.binary, "-c", str(self.config_path),
                "--concurrency", str(self.concurrency), "--base-id", str(self.base_id),
                "-l", self.log_level, "--admin-address-path", str(self.admin_address_path),
                *([] if self.hot_restart else ["--disable-hot-restart"]), *self.extra_args]

    def start(self) -> "Envoy":
        if not self.config_path.exists():
            raise HarnessError(f"envoy config {self.config_path} does not exist")
        self.admin_address_path.unlink(missing_ok=True)
        logf = open(self.log_path, "ab")
        try:
            self.proc = _spawn(self.command(), stdout=logf, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, cwd=str(self.cwd),
                               env={**os.environ, **self.env})
        finally:
            logf.close()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        for _ in range(int(self.startup_timeout / 0.05) + 2):
            if self.proc.poll() is not None:
                raise HarnessError(f"envoy exited with {self.proc.returncode} during startup:\n"
                                   + self.log_tail(40))
            if self.admin_url is None and self.admin_address_path.exists():
                addr = self.admin_address_path.read_text().strip()
                if addr:
                    self.admin_url = f"http://{addr}"
            if self.admin_url is not None:
                try:
                    status, text = _http_text(self.admin_url + "/ready", timeout=1)
                    if status == 200 and text.strip() == "LIVE":
                        return
                except OSError:
                    pass
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        raise HarnessError(f"envoy not ready after {self.startup_timeout}s:\n" + self.log_tail(40))

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 5.0) -> int | None:
        """Stop Envoy (SIGTERM, then SIGKILL) and reap it. Idempotent."""
        if self.proc is not None:
            self.returncode = _terminate(self.proc, grace=grace)
        # Envoy leaves its hot-restart shared memory behind.
        Path(f"/dev/shm/envoy_shared_memory_{self.base_id * 10}").unlink(missing_ok=True)
        return self.returncode

    def __enter__(self) -> "Envoy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---------------------------------------------------------------- admin
    def admin(self, path: str, timeout: float = 5.0) -> str:
        return admin_get(self.admin_url, path, timeout)

    def stats(self, filter: str | None = None) -> dict[str, Any]:
        return admin_stats(self.admin_url, filter)

    def prometheus(self) -> str:
        return self.admin("/stats/prometheus")

    def listener_url(self, name: str | None = None) -> str:
        """URL of the first (or the named) listener, from admin /listeners."""
        data = jsonlib.loads(self.admin("/listeners?format=json"))
        for ls in data.get("listener_statuses", []):
            if name and ls.get("name") != name:
                continue
            sa = (ls.get("local_address") or {}).get("socket_address") or {}
            if sa.get("port_value"):
                return f"http://{sa.get('address', HOST)}:{sa['port_value']}"
        raise HarnessError(f"envoy has no listener {name or ''} with a TCP address: {data}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 100) -> str:
        return "\n".join(self.log().splitlines()[-lines:])


def admin_get(admin_url: str | None, path: str, timeout: float = 5.0) -> str:
    """GET an admin path of an Envoy, local or in another container."""
    if admin_url is None:
        raise HarnessError("envoy admin address unknown (not started?)")
    status, text = _http_text(admin_url + path, timeout=timeout)
    if status != 200:
        raise HarnessError(f"admin {path} -> {status}: {text[:500]}")
    return text


def admin_stats(admin_url: str, filter: str | None = None) -> dict[str, Any]:
    """Counters and gauges from ``/stats?format=json`` as {name: value}.

    Histograms are left out (their JSON is a separate structure); a value that
    is not a number is kept as is.  Falls back to the text format."""
    q = "?format=json" + (f"&filter={urllib.parse.quote(filter)}" if filter else "")
    status, text = _http_text(admin_url.rstrip("/") + "/stats" + q)
    if status != 200:
        raise HarnessError(f"admin /stats -> {status}: {text[:300]}")
    try:
        data = jsonlib.loads(text)
    except ValueError:
        return _parse_stats_text(text)
    out: dict[str, Any] = {}
    for s in data.get("stats", []):
        if "name" in s:
            out[s["name"]] = s.get("value")
    return out


# ---------------------------------------------------------------------- render
DEFAULT_ENVOY_VERSION = (1, 40)


def envoy_version() -> tuple[int, int]:
    """(major, minor) of the Envoy under test, from ``ENVOY_VERSION`` (default 1.40)."""
    text = os.environ.get("ENVOY_VERSION", "").strip().lstrip("v")
    if not text:
        return DEFAULT_ENVOY_VERSION
    m = re.match(r"^(\d+)\.(\d+)(\.\d+)?$", text)
    if not m:
        raise HarnessError(f"ENVOY_VERSION={text!r} is not a version such as 1.38")
    return int(m.group(1)), int(m.group(2))


def grouping_mode() -> bool:
    """True when configs are rendered with grouping clusters (Envoy 1.36-1.38)."""
    return envoy_version() < (1, 39)


def holds_answers() -> bool:
    """False on Envoy 1.36, where the upstream role classifies on status and headers only:
    1.36.4 crashes when an attempt whose answer an upstream filter held is retried."""
    return envoy_version() >= (1, 37)


def cli_bin() -> Path:
    p = Path(os.environ.get("LLM_FAILOVER_CLI") or REPO_ROOT / "target/release/llm-failover")
    return p if p.is_absolute() else REPO_ROOT / p


def runtime() -> str:
    """Which build the suite runs: LLM_FAILOVER_RUNTIME=native renders every gateway with the
    Envoy dynamic module (dist/libllm_failover.so, or LLM_FAILOVER_NATIVE) in place of the
    wasm module; anything else (the default) the wasm module."""
    return "native" if os.environ.get("LLM_FAILOVER_RUNTIME") == "native" else "wasm"


def native_module() -> Path:
    p = Path(os.environ.get("LLM_FAILOVER_NATIVE") or REPO_ROOT / "dist/libllm_failover.so")
    return p if p.is_absolute() else REPO_ROOT / p


def runtime_args(args: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The `render` arguments for the build under test (none for wasm, nor for a render that
    names its own runtime or target)."""
    if runtime() != "native" or "--runtime" in args or "--target" in args:
        return ()
    return ("--runtime", "native", *(() if "--module" in args else ("--module", str(native_module()))))


def render_config(source: str | Path, env: dict | None = None, *,
                  out_dir: str | Path | None = None, out: str | Path | None = None,
                  timeout: float = 60.0, args: tuple[str, ...] = ()) -> Path:
    """Render a failover YAML (a path, repo-relative or absolute, or the YAML text)
    into an Envoy bootstrap with ``llm-failover render SRC --out OUT``; returns OUT.

    `env` is added to the environment for ``${VAR}`` substitution; `args` go to the command
    (e.g. ``("--otel-collector", "127.0.0.1:4317")``). Raises
    HarnessError (never skips) when the CLI is missing or fails."""
    cli = cli_bin()
    if not cli.exists():
        raise HarnessError(
            f"llm-failover CLI not found at {cli}: build it with "
            f"`cargo build --release -p llm-failover-cli` or set LLM_FAILOVER_CLI")
    out_dir = Path(out_dir) if out_dir else None
    if isinstance(source, str) and "\n" in source:
        if out_dir is None:
            raise HarnessError("render_config: out_dir is needed to render YAML text")
        out_dir.mkdir(parents=True, exist_ok=True)
        src = out_dir / "source.failover.yaml"
        src.write_text(source)
    else:
        src = Path(source)
        src = src if src.is_absolute() else REPO_ROOT / src
        if not src.exists():
            raise HarnessError(f"failover config {src} does not exist")
    if out is None:
        if out_dir is None:
            raise HarnessError("render_config: give out or out_dir")
        out_dir.mkdir(parents=True, exist_ok=True)
        name = src.name.replace(".failover.yaml", "").replace(".yaml", "")
        out = out_dir / f"{name}.envoy.yaml"
    out = Path(out)
    out.unlink(missing_ok=True)
    full_env = {**os.environ, **{k: str(v) for k, v in (env or {}).items()}}
    args = (*runtime_args(args), *args)
    try:
        major, minor = envoy_version()
        r = subprocess.run([str(cli), "render", str(src), "--out", str(out),
                            "--envoy-version", f"{major}.{minor}", *args], cwd=str(REPO_ROOT),
                           env=full_env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise HarnessError(f"llm-failover render {src} took more than {timeout}s")
    if r.returncode != 0:
        raise HarnessError(f"llm-failover render {src} failed ({r.returncode}):\n"
                           f"{r.stderr}\n{r.stdout}")
    if not out.exists():
        raise HarnessError(f"llm-failover render {src} succeeded but wrote no {out}")
    return out


def plain_bootstrap(listener_port: int, admin_port: int, route: str, endpoints: str,
                    cluster: str = "upstream") -> str:
    """An Envoy bootstrap without the filter: one listener, the router, one `cluster`.
    `route` is the route action's YAML flow mapping (naming that cluster), `endpoints` the
    cluster's `load_assignment.endpoints` as a YAML flow sequence."""
    return f"""
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: {admin_port}}}}}
static_resources:
  listeners:
  - name: gateway
    address: {{socket_address: {{address: 127.0.0.1, port_value: {listener_port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: gw
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                route: {route}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: {cluster}
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: {cluster}
      endpoints: {endpoints}
"""


def config_vars(text: str) -> dict[str, str | None]:
    """``${VAR}`` / ``${VAR:-default}`` references in a failover YAML: {VAR: default}."""
    return {m.group(1): m.group(3)
            for m in re.finditer(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}", text)}


# ----------------------------------------------------------------- HTTP client
class ResponseTimeout(TimeoutError):
    """No complete response within the deadline; `.partial` holds what arrived."""

    def __init__(self, msg: str, partial: "Response | None"):
        super().__init__(msg)
        self.partial = partial


class NoResponse(ConnectionError):
    """The connection closed or reset before a response head arrived."""


@dataclass
class Response:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes = b""
    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    t_headers: float = 0.0     # seconds from request sent to response head complete
    t_end: float | None = None
    complete: bool = False     # False: connection ended early (see `error`)
    error: str | None = None

    def header(self, name: str) -> str | None:
        name = name.lower()
        vals = [v for k, v in self.headers if k.lower() == name]
        return ", ".join(vals) if vals else None

    def header_names(self) -> set[str]:
        return {k.lower() for k, _ in self.headers}

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return jsonlib.loads(self.body)

    def sse_events(self) -> list[tuple[float, str]]:
        """[(arrival time, data)] for every complete SSE event, in order."""
        events, buf = [], ""
        for t, data in self.chunks:
            buf += data.decode("utf-8", errors="replace")
            buf = buf.replace("\r\n", "\n")
            while "\n\n" in buf:
                raw, buf = buf.split("\n\n", 1)
                lines = [ln[5:].lstrip(" ") if ln.startswith("data:") else None
                         for ln in raw.split("\n")]
                data_lines = [ln for ln in lines if ln is not None]
                if data_lines:
                    events.append((t, "\n".join(data_lines)))
        return events

    def sse_data(self) -> list[Any]:
        """Parsed SSE payloads (JSON objects; ``"[DONE]"`` as the string)."""
        out = []
        for _, d in self.sse_events():
            try:
                out.append(jsonlib.loads(d))
            except ValueError:
                out.append(d)
        return out

    def sse_content(self) -> str:
        """Concatenated ``choices[0].delta.content`` of the SSE chunks."""
        parts = []
        for d in self.sse_data():
            if isinstance(d, dict):
                for c in d.get("choices", []):
                    parts.append((c.get("delta") or {}).get("content") or "")
        return "".join(parts)


class _Reader:
    def __init__(self, sock: socket.socket, t0: float, deadline: float):
        self.sock, self.t0, self.deadline = sock, t0, deadline
        self.buf = bytearray()
        self.t_last = 0.0

    def fill(self) -> bool:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("deadline")
        self.sock.settimeout(left)
        data = self.sock.recv(65536)
        self.t_last = time.monotonic() - self.t0
        if not data:
            return False
        self.buf += data
        return True

    def until(self, marker: bytes) -> bytes | None:
        while True:
            i = self.buf.find(marker)
            if i >= 0:
                out = bytes(self.buf[: i + len(marker)])
                del self.buf[: i + len(marker)]
                return out
            if not self.fill():
                return None

    def take_some(self, n: int) -> bytes | None:
        """Up to n bytes: what is buffered, else one recv's worth."""
        if not self.buf and not self.fill():
            return None
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out


def http_request(url: str, method: str = "GET", path: str = "/", *, body: bytes | str | None = None,
                 json: Any = None, headers: dict | list | None = None,
                 timeout: float = 30.0) -> Response:
    """One HTTP/1.1 exchange on a fresh connection, timestamping body chunks.

    `url` is ``http://host:port`` (a path in it is prefixed to `path`).
    Returns a Response (``complete=False`` if the connection ended mid-body);
    raises ConnectionRefusedError, NoResponse (closed/reset before a response
    head) or ResponseTimeout (`timeout` seconds for the whole exchange)."""
    u = urllib.parse.urlsplit(url)
    host, port = u.hostname or HOST, u.port or 80
    full_path = (u.path.rstrip("/") + path) if u.path not in ("", "/") else path
    hdrs: list[tuple[str, str]] = list(headers.items()) if isinstance(headers, dict) \
        else list(headers or [])
    if json is not None:
        body = jsonlib.dumps(json).encode()
        if not any(k.lower() == "content-type" for k, _ in hdrs):
            hdrs.append(("content-type", "application/json"))
    if isinstance(body, str):
        body = body.encode()
    names = {k.lower() for k, _ in hdrs}
    if "host" not in names:
        hdrs.insert(0, ("host", f"{host}:{port}"))
    if body is not None and "content-length" not in names and "transfer-encoding" not in names:
        hdrs.append(("content-length", str(len(body))))
    if "connection" not in names:
        hdrs.append(("connection", "close"))
    head = f"{method} {full_path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs) + "\r\n"

    t0 = time.monotonic()
    deadline = t0 + timeout
    sock = socket.create_connection((host, port), timeout=timeout)
    resp: Response | None = None
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(head.encode("latin-1") + (body or b""))
        t0 = time.monotonic()
        rd = _Reader(sock, t0, deadline)
        try:
            while True:
                raw = rd.until(b"\r\n\r\n")
                if raw is None:
                    raise NoResponse(f"{method} {full_path}: connection closed before a response")
                lines = raw[:-4].decode("latin-1").split("\r\n")
                ver, _, rest = lines[0].partition(" ")
                code, _, reason = rest.partition(" ")
                status = int(code)
                if 100 <= status < 200 and status != 101:
                    continue  # interim response
                break
        except (ConnectionResetError, BrokenPipeError) as e:
            raise NoResponse(f"{method} {full_path}: {e!r} before a response") from e
        hlist = []
        for line in lines[1:]:
            k, _, v = line.partition(":")
            hlist.append((k.strip(), v.strip()))
        resp = Response(status, reason, hlist, t_headers=rd.t_last)
        _read_body(rd, resp, method)
        resp.t_end = time.monotonic() - t0
        resp.body = b"".join(c for _, c in resp.chunks)
        return resp
    except socket.timeout:
        if resp is not None:
            resp.body = b"".join(c for _, c in resp.chunks)
            resp.error = "timeout"
        raise ResponseTimeout(f"{method} {full_path}: no complete response in {timeout}s", resp)
    finally:
        sock.close()


def _read_body(rd: _Reader, resp: Response, method: str) -> None:
    te = (resp.header("transfer-encoding") or "").lower()
    cl = resp.header("content-length")
    if method == "HEAD" or resp.status in (204, 304):
        resp.complete = True
        return
    try:
        if "chunked" in te:
            while True:
                line = rd.until(b"\r\n")
                if line is None:
                    resp.error = "eof"
                    return
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    rd.until(b"\r\n")  # (no trailers expected)
                    resp.complete = True
                    return
                got = bytearray()
                while len(got) < size:
                    part = rd.take_some(size - len(got))
                    if part is None:
                        resp.error = "eof"
                        if got:
                            resp.chunks.append((rd.t_last, bytes(got)))
                        return
                    got += part
                resp.chunks.append((rd.t_last, bytes(got)))
                if rd.until(b"\r\n") is None:
                    resp.error = "eof"
                    return
        elif cl is not None:
            left = int(cl)
            while left > 0:
                part = rd.take_some(left)
                if part is None:
                    resp.error = "eof"
                    return
                resp.chunks.append((rd.t_last, part))
                left -= len(part)
            resp.complete = True
        else:
            while True:
                part = rd.take_some(65536)
                if part is None:
                    resp.complete = True
                    return
                resp.chunks.append((rd.t_last, part))
    except (ConnectionResetError, BrokenPipeError):
        resp.error = "reset"


# --------------------------------------------------------------------- gateway
DEFAULT_MODEL = "gpt-4o-mini"


class RemoteEnvoy:
    """What a scenario may touch of `gw.envoy` when Envoy runs in another container
    (docker-compose harness): its admin URL and its log, shared through a directory."""

    def __init__(self, admin_url: str, log_path: Path):
        self.admin_url = admin_url
        self.log_path = log_path
        self.running = True

    def stop(self) -> None:  # the next restart replaces it
        self.running = False

    def admin(self, path: str, timeout: float = 5.0) -> str:
        return admin_get(self.admin_url, path, timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, n: int = 40) -> str:
        return "".join(self.log().splitlines(True)[-n:])


class Gateway:
    """The system under test, as a scenario sees it."""

    def __init__(self, url: str, admin_url: str | None = None, envoy: Envoy | None = None,
                 log_path: str | None = None):
        self.url = url.rstrip("/")
        self.admin_url = admin_url.rstrip("/") if admin_url else None
        self.envoy = envoy
        self.log_path = log_path

    @property
    def external(self) -> bool:
        return self.envoy is None

    def request(self, method: str, path: str, **kw) -> Response:
        return http_request(self.url, method, path, **kw)

    def post(self, path: str, **kw) -> Response:
        return http_request(self.url, "POST", path, **kw)

    def chat(self, model: str = DEFAULT_MODEL, messages: list | None = None, *,
             stream: bool = False, headers: dict | None = None, timeout: float = 30.0,
             path: str = "/v1/chat/completions", **extra) -> Response:
        body = {"model": model, "messages": messages or [{"role": "user", "content": "hi"}],
                **extra}
        if stream:
            body["stream"] = True
        return self.post(path, json=body, headers=headers, timeout=timeout)

    def stats(self, filter: str | None = None) -> dict[str, Any]:
        if not self.admin_url:
            raise HarnessError("no admin URL for this gateway (set LLM_FAILOVER_ADMIN_URL)")
        return admin_stats(self.admin_url, filter)

    def prometheus_raw(self) -> str:
        if not self.admin_url:
            raise HarnessError("no admin URL for this gateway (set LLM_FAILOVER_ADMIN_URL)")
        status, text = _http_text(self.admin_url + "/stats/prometheus")
        if status != 200:
            raise HarnessError(f"admin /stats/prometheus -> {status}")
        return text

    def prometheus(self) -> str:
        """/stats/prometheus with the docs/behaviour.md labels only (see ``spec_prometheus``)."""
        return spec_prometheus(self.prometheus_raw())

    def log(self) -> str:
        if self.envoy is not None:
            return self.envoy.log()
        if self.log_path and Path(self.log_path).exists():
            return Path(self.log_path).read_text(errors="replace")
        return ""


class MockedGateway:
    """One Envoy in front of its own named mocks, for a whole test module (a module-scoped
    fixture makes one and stops it): starts the mocks (``start_mock``), calls
    ``mocks_started`` (a subclass may program or check them, or skip), renders `config` with
    the mocks' ports (``<NAME>_PORT``), a free ``LISTEN_PORT`` and ``ADMIN_PORT`` and `env`,
    and starts Envoy with `envoy_args` (``Envoy``'s keywords); stops all of it when any step
    fails. Nothing is shared with another module: every port is free when it is taken."""

    def __init__(self, config: str, tmp: Path, names: Iterable[str], *,
                 env: dict[str, str] | None = None, **envoy_args: Any):
        self.mocks: dict[str, MockClient] = {}
        try:
            for name in names:
                self.mocks[name] = start_mock(name)
            self.mocks_started()
            env = {"LISTEN_PORT": str(free_port()), "ADMIN_PORT": str(free_port()),
                   **(env or {}),
                   **{f"{env_key(n)}_PORT": str(m.port) for n, m in self.mocks.items()}}
            path = render_config(config, env, out_dir=tmp)
            self.envoy = Envoy(path, tmp / "envoy", env=env, **envoy_args).start()
        except BaseException:
            self.stop()
            raise
        self.gw = Gateway(self.envoy.listener_url(), self.envoy.admin_url, envoy=self.envoy)

    def mocks_started(self) -> None:
        """Runs once the mocks are up, before the config is rendered."""

    def stop(self) -> None:
        if getattr(self, "envoy", None):
            self.envoy.stop()
        for m in self.mocks.values():
            m.stop()

    def reset(self) -> None:
        for m in self.mocks.values():
            m.reset()

    def provider_status(self, port: int, path: str = "/llm-failover/status") -> dict[str, dict]:
        """{provider name: its entry} of the status endpoint on 127.0.0.1:`port`."""
        r = http_request(f"http://127.0.0.1:{port}", "GET", path)
        return {p["name"]: p for p in jsonlib.loads(r.body)["providers"]}

    def skipped(self) -> dict[tuple[str, str], float]:
        """{(provider, reason): count} of llm_failover_skipped_total."""
        return {(labels["provider"], labels["reason"]): value for labels, value in
                prometheus_samples(self.gw.prometheus(), "llm_failover_skipped_total")}

    def access_line(self, request_id: str) -> str:
        """The access log line of one request (matched by its x-request-id)."""
        def find():
            return next((line for line in self.gw.log().splitlines()
                         if f"request_id={request_id}" in line), None)
        return wait_until(find, 10, f"access log line of {request_id}")

    def walk(self, request_id: str) -> str:
        """The access log's llm_failover=... walk of one request, durations as 'N'."""
        line = self.access_line(request_id)
        m = re.search(r" llm_failover=(\S+)", line)
        if not m:
            raise HarnessError(f"no llm_failover= walk in {line!r}")
        return re.sub(r":\d+ms", ":Nms", m.group(1))


# On Envoy 1.36-1.38 the filter's metrics live in a cluster's stats scope and carry two more
# labels (docs/older-envoys.md): llm_failover_scope, always empty, first, and Envoy's
# envoy_cluster_name, last. Scenarios compare the docs/behaviour.md labels: spec_prometheus checks and
# removes these two (test_older_envoys checks the raw form).
_GROUPING_LABELS = re.compile(
    r'^(llm_failover_[a-z_]+)\{llm_failover_scope="",(.*?),?envoy_cluster_name="[^"]*"\}')


_SCOPE_LABELS = re.compile(r'llm_failover_scope="",|,?envoy_cluster_name="[^"]*"')


def native_prometheus(text: str) -> str:
    """The native module's metrics as the wasm build's router mode prints them (docs/internals.md
    "The native build"): the envoy_wasmcustom_ prefix taken off, and counters left out while 0
    (it defines every one at load) but the tokens' (made when first counted, as the wasm build's). Series in a provider cluster's scope (none since both roles
    count in the root scope) would lose the two scope labels, counters adding up and a gauge
    kept from the root scope."""
    out, sums = [], {}
    for line in text.splitlines():
        # Envoy 1.40 does not register a dynamic module's metrics namespace as a custom one,
        # so its Prometheus names keep the envoy_ prefix and the namespace.
        line = re.sub(r"^(# (?:TYPE|HELP) )?envoy_(?:cluster_)?wasmcustom_llm_failover_", r"\1llm_failover_", line)
        if line.startswith("llm_failover_") and "{" in line:
            key, _, value = _SCOPE_LABELS.sub("", line).rpartition(" ")
            if key not in sums:
                out.append(key)
                sums[key] = 0.0
            if "_total{" in key:
                sums[key] += float(value)
            elif "envoy_cluster_name=" not in line:
                # A gauge: the downstream role's (Envoy's root scope) is the one it keeps.
                sums[key] = float(value)
            continue
        out.append(line)
    # It defines every counter when the configuration loads (Envoy refuses a definition later),
    # so unused ones show at 0, where the wasm build defines each when first counted.
    # Exact: ":g" would print 7550249 as 7.55025e+06.
    exact = lambda v: str(int(v)) if v.is_integer() else repr(v)  # noqa: E731
    return "\n".join(f"{l} {exact(sums[l])}" if l in sums else l for l in out
                     if l not in sums or sums[l] or "_total{" not in l
                     or l.startswith("llm_failover_tokens_total{")) + "\n"


def spec_prometheus(text: str) -> str:
    """Prometheus text as router mode prints it: in grouping mode the two labels above are
    taken off the llm_failover_* samples (any other form of them is an error)."""
    if runtime() == "native":
        return native_prometheus(text)
    if not grouping_mode():
        return text
    out = []
    for line in text.splitlines():
        if line.startswith("llm_failover_") and "{" in line:
            m = _GROUPING_LABELS.match(line)
            if not m:
                raise HarnessError(f"grouping-mode metric without its scope labels: {line}")
            line = f"{m.group(1)}{{{m.group(2)}}}{line[m.end():]}"
        out.append(line)
    return "\n".join(out) + "\n"


def prometheus_samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """All samples of metric `name` in Prometheus text: [(labels, value)]."""
    out = []
    pat = re.compile(r"^" + re.escape(name) + r"(\{(.*)\})?\s+(\S+)")
    for line in text.splitlines():
        m = pat.match(line)
        if m:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            out.append((labels, float(m.group(3))))
    return out


# The head of a failover file for a gateway a test starts itself: its listener and admin on
# free ports (``MockedGateway`` fills LISTEN_PORT and ADMIN_PORT), and (STATUS_HEAD) the status
# endpoint on its own listener at STATUS_PORT.
GATEWAY_HEAD = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
"""
STATUS_HEAD = GATEWAY_HEAD + """status_path: /llm-failover/status
status_listen: {address: 127.0.0.1, port: "${STATUS_PORT}"}
"""


def external_mode() -> bool:
    return bool(os.environ.get("LLM_FAILOVER_GATEWAY_URL"))
