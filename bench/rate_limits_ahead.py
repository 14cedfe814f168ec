#!/usr/bin/env python3
"""What an announced empty rate limit saves per request (BENCHMARKS.md "Rate limits announced
in advance"): one Envoy, a chain [limited, fallback] where `limited` answers 429 after 150 ms
and `fallback` answers at once. Without the headers every request waits for the 429 first;
with `x-ratelimit-remaining-requests: 0` (reset 60 s) on the 429 the next requests skip it.
Prints the median and p90 latency of N sequential requests in each case, after one warm-up.

    PATH=$PWD/target/release:$PWD/.venv/bin:$PATH LLM_FAILOVER_WASM=$PWD/dist/llm_failover.wasm \\
        .venv/bin/python bench/rate_limits_ahead.py --requests 40
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import harness  # noqa: E402

CONFIG = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
providers:
  - {name: limited, endpoint: "127.0.0.1:${LIMITED_PORT}"}
  - {name: fallback, endpoint: "127.0.0.1:${FALLBACK_PORT}"}
chains:
  - {name: c, models: ["*"], providers: [limited, fallback]}
"""
ANNOUNCED = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "60s"}


def run(requests: int, announce: bool) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        gw = harness.MockedGateway(CONFIG, Path(tmp), ["limited", "fallback"], concurrency=2)
        try:
            gw.mocks["limited"].set_default(status=429, delay_ms=150,
                                            headers=ANNOUNCED if announce else {})
            gw.gw.chat("m")  # warm-up: the 429 that announces (or not)
            times = []
            for _ in range(requests):
                start = time.perf_counter()
                r = gw.gw.chat("m")
                times.append((time.perf_counter() - start) * 1000)
                assert r.status == 200 and r.header("x-llm-provider") == "fallback", r.status
            return times
        finally:
            gw.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=40)
    n = ap.parse_args().requests
    print("| case | median ms | p90 ms |\n|---|---:|---:|")
    for announce in (False, True):
        t = sorted(run(n, announce))
        name = "429 announces x-ratelimit-remaining-requests: 0" if announce else "429 without headers"
        print(f"| {name} | {statistics.median(t):.1f} | {t[int(len(t) * 0.9) - 1]:.1f} |")


if __name__ == "__main__":
    main()
