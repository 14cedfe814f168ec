#!/usr/bin/env python3
"""The fleet's sync's cost (docs/operations.md "Several gateways"): the CPU one idle Envoy (two
workers) spends per second with `fleet:` on (one sync a second: a gRPC call to the real
rate-limit service on Redis, 4 budgets and 4 providers' failure counts) and without it, read
from /proc over the same idle time. Run from the repository root (about 1 minute):

    .venv/bin/python bench/fleet_sync.py [--seconds 20]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from fleet_store import FleetStore  # noqa: E402
from harness import Envoy, free_port, render_config  # noqa: E402

CONFIG = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
providers:
""" + "".join(f'  - {{name: p{i}, endpoint: "127.0.0.1:9", budget: {{tokens: 1000000, window: 1h}}}}\n'
              for i in range(4)) + """chains:
  - {name: c, providers: [p0, p1, p2, p3]}
"""
FLEET = ('fleet: {address: "127.0.0.1:${RATELIMIT_PORT}", sync: 1s}\n'
         "breaker: {fleet_failures: 20, fleet_window: 1m}\n")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu(text: str, env: dict, work: Path, seconds: float) -> float:
    env = {"LISTEN_PORT": str(free_port()), "ADMIN_PORT": str(free_port()), **env}
    envoy = Envoy(render_config(text, env, out_dir=work), work / "envoy", concurrency=2).start()
    try:
        time.sleep(3)  # past start-up
        t0, c0 = time.monotonic(), cpu_seconds(envoy.proc.pid)
        time.sleep(seconds)
        return (cpu_seconds(envoy.proc.pid) - c0) / (time.monotonic() - t0)
    finally:
        envoy.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="llm-failover-fleet-sync-") as tmp:
        tmp = Path(tmp)
        store = FleetStore(tmp / "store").start()
        try:
            port = str(store.service.grpc_port)
            without = idle_cpu(CONFIG, {}, tmp / "without", args.seconds)
            with_ = idle_cpu(CONFIG + FLEET, {"RATELIMIT_PORT": port}, tmp / "with", args.seconds)
        finally:
            store.stop()
    print("| Envoy idle, 2 workers | CPU ms per second |")
    print("|---|---:|")
    print(f"| without fleet | {without * 1000:.2f} |")
    print(f"| with fleet (sync 1s, 4 budgets, 4 failure counts) | {with_ * 1000:.2f} |")
    print(f"| the sync's cost | {(with_ - without) * 1000:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
