#!/usr/bin/env python3
"""Time to the first byte a hedge buys (BENCHMARKS.md "Hedged first tokens"): one Envoy, a
chain [primary, secondary]; primary's first token comes at 4 s in every fifth request and after
150 ms otherwise, secondary's after 150 ms. Sequential failover (`first_token: 1s`) against
hedging (`hedge_after: 500ms`, `first_token: 8s`), N sequential streamed requests after one
warm-up each: the time to the first SSE event's arrival, p50/p90/p99, and the attempts made
beyond one per request (secondary's calls) per 100 requests. The breaker is set out of reach
so that both runs keep trying primary. Run from the repository root after scripts/build.sh,
with the built CLI and the module on the harness's usual paths (about 1 minute for 100):
`.venv/bin/python bench/hedge_ttfb.py --requests 100`.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
import harness  # noqa: E402

CONFIG = harness.GATEWAY_HEAD + """providers:
  - {name: primary, endpoint: "127.0.0.1:${PRIMARY_PORT}"}
  - {name: secondary, endpoint: "127.0.0.1:${SECONDARY_PORT}"}
breaker: {failures: 1000, window: 10s}
timeouts: TIMEOUTS
chains:
  - {name: c, models: ["*"], providers: [primary, secondary]HEDGE}
"""
CASES = {
    "sequential (`first_token: 1s`)": ("{first_token: 1s}", ""),
    "hedged (`hedge_after: 500ms`, `first_token: 8s`)": ("{first_token: 8s}",
                                                         ", hedge_after: 500ms"),
}
FAST = {"stream": True, "first_chunk_delay_ms": 150}
SLOW = {"stream": True, "first_chunk_delay_ms": 4000}


def run(requests: int, timeouts: str, hedge: str) -> tuple[list[float], int]:
    config = CONFIG.replace("TIMEOUTS", timeouts).replace("HEDGE", hedge)
    with tempfile.TemporaryDirectory() as tmp:
        gw = harness.MockedGateway(config, Path(tmp), ["primary", "secondary"], concurrency=2)
        try:
            primary, secondary = gw.mocks["primary"], gw.mocks["secondary"]
            secondary.set_default(FAST)
            primary.enqueue(FAST)
            gw.gw.chat("m", stream=True)  # warm-up
            secondary.reset()
            secondary.set_default(FAST)
            primary.enqueue(*[SLOW if i % 5 == 0 else FAST for i in range(requests)])
            times = []
            for _ in range(min(requests, 1000)):
                r = gw.gw.chat("m", stream=True)
                assert r.status == 200 and r.sse_events(), r.status
                times.append(r.sse_events()[0][0] * 1000)
            return times, secondary.request_count()
        finally:
            gw.stop()


def pct(sorted_times: list[float], p: float) -> float:
    return sorted_times[min(len(sorted_times) - 1, int(p / 100 * len(sorted_times)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100)
    n = ap.parse_args().requests
    print("| case | p50 ms | p90 ms | p99 ms | extra attempts per 100 |\n|---|---:|---:|---:|---:|")
    for name, (timeouts, hedge) in CASES.items():
        t, extra = run(n, timeouts, hedge)
        t.sort()
        print(f"| {name} | {pct(t, 50):.0f} | {pct(t, 90):.0f} | {pct(t, 99):.0f} | "
              f"{100 * extra / len(t):.0f} |")


if __name__ == "__main__":
    main()
