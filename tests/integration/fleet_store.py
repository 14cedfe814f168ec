"""The fleet's store for the integration tests: a real Redis and Envoy's real rate-limit service.

``Redis(workdir)``            ``redis-server --port P --save '' --appendonly no`` on 127.0.0.1
``RateLimitService(redis, workdir, domain="llm-failover")``
                              envoyproxy/ratelimit (scripts/ratelimit.sh installs it in
                              tools/ratelimit) on that Redis, its config a file holding only
                              ``domain: <domain>`` (what ``llm-failover render`` writes beside
                              Envoy's config): the limits travel in each descriptor
``FleetStore(workdir)``       both, started in order (the service refuses to start without its
                              Redis); ``.env`` gives ``RATELIMIT_HOST``/``RATELIMIT_PORT`` (gRPC)
                              to render a failover file with
Each can be ``stop()``-ed (SIGTERM), ``kill()``-ed (SIGKILL) and ``start()``-ed again on the same
ports mid-test; every wait is bounded; whatever is left is killed at the end (harness._spawn's
process groups, the atexit hook and PR_SET_PDEATHSIG). ``missing()`` says what is not installed.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from harness import HOST, REPO_ROOT, HarnessError, _http_text, _spawn, _terminate, free_port

DOMAIN = "llm-failover"


def redis_bin() -> str | None:
    return os.environ.get("REDIS_SERVER_BIN") or shutil.which("redis-server")


def ratelimit_bin() -> str | None:
    explicit = os.environ.get("RATELIMIT_BIN")
    if explicit:
        return explicit if Path(explicit).exists() else None
    cand = REPO_ROOT / "tools" / "ratelimit" / "service_cmd"
    return str(cand) if cand.exists() else None


def missing() -> str | None:
    """Why the store cannot run here (None when it can)."""
    if not redis_bin():
        return "no redis-server (scripts/setup.sh installs Debian's as root)"
    if not ratelimit_bin():
        return "no rate-limit service in tools/ratelimit (scripts/ratelimit.sh)"
    return None


class _Process:
    """A child process with a log file, restartable on the same ports."""

    name = "process"

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / f"{self.name}.log"
        self.proc: subprocess.Popen | None = None

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _env(self) -> dict[str, str]:
        return dict(os.environ)

    def _ready(self) -> bool:
        raise NotImplementedError

    def start(self, timeout: float = 20.0) -> "_Process":
        if self.running:
            return self
        with open(self.log_path, "ab") as logf:
            self.proc = _spawn(self._command(), stdout=logf, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, env=self._env(), cwd=str(self.workdir))
        deadline = time.monotonic() + timeout
        for _ in range(int(timeout / 0.05) + 2):
            if self.proc.poll() is not None:
                raise HarnessError(f"{self.name} exited with {self.proc.returncode} during "
                                   f"startup:\n{self.log_tail(30)}")
            try:
                if self._ready():
                    return self
            except OSError:
                pass
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        self.kill()
        raise HarnessError(f"{self.name} not ready after {timeout}s:\n{self.log_tail(30)}")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM (SIGKILL after ``grace``) and reap. Idempotent."""
        if self.proc is not None:
            _terminate(self.proc, grace=grace)

    def kill(self) -> None:
        """SIGKILL at once: the crash a store can have."""
        self.stop(grace=0)

    def restart(self, timeout: float = 20.0) -> "_Process":
        self.kill()
        return self.start(timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])


class Redis(_Process):
    name = "redis"

    def __init__(self, workdir: Path, port: int | None = None):
        super().__init__(workdir)
        self.port = port or free_port()
        self.binary = redis_bin()
        if not self.binary:
            raise HarnessError(missing() or "no redis-server")

    def _command(self) -> list[str]:
        # No snapshot, no append-only file: a restart starts empty, as a lost Redis does.
        return [self.binary, "--port", str(self.port), "--bind", HOST, "--save", "",
                "--appendonly", "no", "--dir", str(self.workdir)]

    def _ready(self) -> bool:
        return self.command("PING") == "+PONG"

    def command(self, *words: str) -> str:
        """One inline command, its first reply line (e.g. ``+PONG``, ``:3``)."""
        with socket.create_connection((HOST, self.port), timeout=1) as s:
            s.sendall((" ".join(words) + "\r\n").encode())
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                reply += chunk
        return reply.decode(errors="replace").split("\r\n")[0]

    def keys(self, pattern: str = "*") -> int:
        """How many keys match (the rate-limit service keeps one per descriptor and window)."""
        return len(self.scan(pattern))

    def scan(self, pattern: str = "*") -> list[str]:
        with socket.create_connection((HOST, self.port), timeout=1) as s:
            s.sendall(f"KEYS {pattern}\r\n".encode())
            data = b""
            for _ in range(1000):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
                lines = data.split(b"\r\n")
                if lines[0].startswith(b"*") and len(lines) >= 2 * int(lines[0][1:]) + 2:
                    break
        lines = data.decode(errors="replace").split("\r\n")
        return [lines[i] for i in range(2, len(lines) - 1, 2)]


class RateLimitService(_Process):
    name = "ratelimit"

    def __init__(self, redis: Redis, workdir: Path, domain: str = DOMAIN,
                 log_level: str = "warn"):
        super().__init__(workdir)
        self.redis = redis
        self.domain = domain
        self.log_level = log_level
        self.grpc_port, self.http_port, self.debug_port = free_port(), free_port(), free_port()
        self.binary = ratelimit_bin()
        if not self.binary:
            raise HarnessError(missing() or "no rate-limit service")
        self.runtime_root = self.workdir / "runtime"
        self.config_path = self.runtime_root / "ratelimit" / "config" / f"{domain}.yaml"
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(f"domain: {domain}\n")

    @property
    def grpc_address(self) -> str:
        return f"{HOST}:{self.grpc_port}"

    def _command(self) -> list[str]:
        return [self.binary]

    def _env(self) -> dict[str, str]:
        return {**os.environ,
                "USE_STATSD": "false", "LOG_LEVEL": self.log_level,
                "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": f"{HOST}:{self.redis.port}",
                "RUNTIME_ROOT": str(self.runtime_root), "RUNTIME_SUBDIRECTORY": "ratelimit",
                "RUNTIME_WATCH_ROOT": "false",
                "HOST": HOST, "PORT": str(self.http_port),
                "GRPC_HOST": HOST, "GRPC_PORT": str(self.grpc_port),
                "DEBUG_HOST": HOST, "DEBUG_PORT": str(self.debug_port)}

    def _ready(self) -> bool:
        status, body = _http_text(f"http://{HOST}:{self.http_port}/healthcheck", timeout=1)
        if status != 200:
            return False
        with socket.create_connection((HOST, self.grpc_port), timeout=1):
            return True


class FleetStore:
    """Redis and the rate-limit service on it, as a fleet's replicas share them."""

    def __init__(self, workdir: Path, domain: str = DOMAIN, log_level: str = "warn"):
        workdir = Path(workdir)
        self.redis = Redis(workdir / "redis")
        self.service = RateLimitService(self.redis, workdir / "ratelimit", domain, log_level)

    def start(self) -> "FleetStore":
        self.redis.start()
        self.service.start()
        return self

    def stop(self) -> None:
        self.service.stop()
        self.redis.stop()

    @property
    def env(self) -> dict[str, str]:
        """Variables a failover file's ``fleet.rate_limit_service`` can be rendered with."""
        return {"RATELIMIT_HOST": HOST, "RATELIMIT_PORT": str(self.service.grpc_port)}

    def logs(self) -> str:
        return (f"--- redis\n{self.redis.log_tail()}\n"
                f"--- ratelimit service\n{self.service.log_tail()}")
