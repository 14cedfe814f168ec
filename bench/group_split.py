#!/usr/bin/env python3
"""How fairly a weighted group splits requests through a real Envoy with two workers
(BENCHMARKS.md "Groups of equal deployments"): one chain whose only position is the group
{group: [east, west, spare], weights: [2, 1, 1]}; N requests from 8 client threads (so both
workers pick, each from its own random sequence), counted by the mock that answered. Prints
each member's share against its weight's, in percentage points.

Run from the repository with the CLI, the venv and the module built (scripts/build.sh):
``PATH=$PWD/target/release:$PWD/.venv/bin:$PATH LLM_FAILOVER_WASM=$PWD/dist/llm_failover.wasm
.venv/bin/python bench/group_split.py --requests 10000``.
"""
import argparse
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
import harness  # noqa: E402

CONFIG = harness.GATEWAY_HEAD + """providers:
  - {name: east, endpoint: "127.0.0.1:${EAST_PORT}"}
  - {name: west, endpoint: "127.0.0.1:${WEST_PORT}"}
  - {name: spare, endpoint: "127.0.0.1:${SPARE_PORT}"}
chains:
  - {name: c, models: ["*"], providers: [{group: [east, west, spare], weights: [2, 1, 1]}]}
"""
WEIGHTS = {"east": 50.0, "west": 25.0, "spare": 25.0}
THREADS = 8


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10000)
    n = min(ap.parse_args().requests, 100_000)
    with tempfile.TemporaryDirectory() as tmp:
        gw = harness.MockedGateway(CONFIG, Path(tmp), list(WEIGHTS), concurrency=2)
        try:
            failed = []

            def client(count: int) -> None:
                for _ in range(count):
                    r = gw.gw.chat("m", timeout=10)
                    if r.status != 200:
                        failed.append(r.status)

            threads = [threading.Thread(target=client, args=(n // THREADS,)) for _ in range(THREADS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=600)
            counts = {name: gw.mocks[name].request_count() for name in WEIGHTS}
        finally:
            gw.stop()
    total = sum(counts.values())
    print(f"{total} requests, {len(failed)} not 200\n")
    print("| member | weight's share | measured | difference |\n|---|---:|---:|---:|")
    worst = 0.0
    for name, want in WEIGHTS.items():
        got = counts[name] * 100 / total
        worst = max(worst, abs(got - want))
        print(f"| {name} | {want:.1f} % | {got:.2f} % | {got - want:+.2f} pp |")
    print(f"\nlargest difference: {worst:.2f} percentage points")
    sys.exit(0 if worst <= 2.0 and not failed else 1)


if __name__ == "__main__":
    main()
