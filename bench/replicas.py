#!/usr/bin/env python3
"""Many gateways in front of one failing provider (docs/operations.md "Several gateways"): N Envoy replicas behind a
round-robin "load balancer", each with its own breaker (docs/behaviour.md section 4), one provider that starts
failing every request at t=0 and a healthy fallback. Per replica it measures, from the mock's
request records and each replica's status endpoint:

  * hits: requests the failing provider still got from the replica until its breaker opened;
  * open after: seconds from the outage to the replica's breaker opening (open_until - cooldown);
  * probes: requests the failing provider got from the replica after that, per cooldown (one
    probe per cooldown per replica: N replicas send N).

Bounded: each scenario runs --seconds (default 14) of traffic at --rate requests per second in
total. Prints a markdown table (README's scale-out section). Run from the repository root:

    .venv/bin/python bench/replicas.py                 # the README's scenarios (about 2 min)
    .venv/bin/python bench/replicas.py --replicas 3 --failures 10 --window 30s --rate 30
    .venv/bin/python bench/replicas.py --fleet         # the same with the fleet's store: every
                                                       # replica also opens once the fleet's
                                                       # failures reach `failures` in 1m
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from harness import Envoy, LocalMock, free_port, http_request, render_config  # noqa: E402

CONFIG = ROOT / "bench" / "replicas.failover.yaml"
COOLDOWN_S = 4


def seconds(text: str) -> float:
    return float(text[:-2]) / 1000 if text.endswith("ms") else float(text.rstrip("s"))


def fleet_config(store) -> str:
    """The replica's file with the fleet's store on (`breaker.fleet_failures` = `failures`)."""
    text = CONFIG.read_text().replace(
        "  failures: ${FAILURES}\n",
        "  failures: ${FAILURES}\n  fleet_failures: ${FAILURES}\n  fleet_window: 1m\n")
    return text + f'fleet: {{address: "127.0.0.1:{store.service.grpc_port}", sync: 1s}}\n'


def scenario(replicas: int, failures: int, window: str, rate: float, run_s: float,
             work: Path, fleet: bool = False) -> list[dict]:
    primary, secondary = LocalMock("primary"), LocalMock("secondary")
    envoys = []
    store = None
    try:
        source = CONFIG
        if fleet:
            from fleet_store import FleetStore
            store = FleetStore(work / "store").start()
            source = fleet_config(store)
        for r in range(replicas):
            env = {"LISTEN_PORT": free_port(), "ADMIN_PORT": free_port(), "STATUS_PORT": free_port(),
                   "PRIMARY_PORT": primary.port, "SECONDARY_PORT": secondary.port,
                   "REPLICA": f"replica-{r}", "FAILURES": failures, "WINDOW": window,
                   "COOLDOWN": f"{COOLDOWN_S}s"}
            env = {k: str(v) for k, v in env.items()}
            config = render_config(source, env, out_dir=work / f"r{r}")
            envoys.append((Envoy(config, work / f"envoy{r}", concurrency=2).start(), env))
        urls = [e.listener_url() for e, _ in envoys]
        # Warm: every replica's connections and first requests, before the outage.
        for url in urls * 3:
            http_request(url, "POST", "/v1/chat/completions", json={"model": "m"})
        primary.set_default(status=500)
        since = primary.request_count()
        t0 = time.time()
        opened: dict[int, float] = {}
        stop = threading.Event()

        def watch():
            while not stop.wait(0.05):
                for r, (_, env) in enumerate(envoys):
                    if r in opened:
                        continue
                    s = json.loads(http_request(f"http://127.0.0.1:{env['STATUS_PORT']}", "GET",
                                                "/llm-failover/status").body)
                    p = s["providers"][0]
                    if p["open_until_ms"]:
                        opened[r] = p["open_until_ms"] / 1000 - COOLDOWN_S

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        answers = []
        with ThreadPoolExecutor(32) as pool:
            rr = itertools.cycle(urls)
            for k in range(int(run_s * rate)):
                delay = t0 + k / rate - time.time()
                if delay > 0:
                    time.sleep(delay)
                answers.append(pool.submit(http_request, next(rr), "POST", "/v1/chat/completions",
                                           json={"model": "m"}, timeout=10))
            statuses = [f.result().status for f in answers]
        end = time.time()
        stop.set()
        watcher.join(2)
        records = [rec for rec in primary.requests(since=since, bodies=False)]
        rows = []
        for r in range(replicas):
            key = f"Bearer replica-{r}"
            times = [rec["time"] for rec in records
                     if any(k.lower() == "authorization" and v == key for k, v in rec["headers"])]
            at = opened.get(r)
            before = [t for t in times if at is None or t <= at + 0.005]
            after = [t for t in times if at is not None and t > at + 0.005]
            cooldowns = (end - at) / COOLDOWN_S if at is not None else 0
            rows.append({"replica": r, "hits": len(before),
                         "open_after_s": None if at is None else at - t0,
                         "probes": len(after), "cooldowns": cooldowns,
                         "errors": sum(1 for s in statuses if s != 200)})
        return rows
    finally:
        for e, _ in envoys:
            e.stop()
        primary.stop()
        secondary.stop()
        if store:
            store.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=int, action="append")
    ap.add_argument("--failures", type=int)
    ap.add_argument("--window")
    ap.add_argument("--rate", type=float)
    ap.add_argument("--seconds", type=float, default=14)
    ap.add_argument("--fleet", action="store_true",
                    help="the fleet's store (Redis and the rate-limit service) shared by the replicas")
    args = ap.parse_args(argv)
    if args.replicas or args.failures or args.window or args.rate:
        runs = [(n, args.failures or 10, args.window or "30s", args.rate or 30)
                for n in (args.replicas or [3])]
    else:  # README's table: busy and quiet traffic, 1 and 3 replicas, default and lowered failures
        runs = [(1, 10, "30s", 30), (3, 10, "30s", 30), (3, 4, "30s", 30),
                (1, 10, "5s", 3), (3, 10, "5s", 3), (3, 4, "5s", 3)]
    if not all(1 <= n <= 5 for n, *_ in runs) or not 2 <= args.seconds <= 60:
        ap.error("1 to 5 replicas and 2 to 60 seconds per scenario")
    print(f"| replicas | failures / window | load (req/s, all replicas) | hits on the failing provider per replica | total hits | breaker open after (s) | probes per cooldown ({COOLDOWN_S} s), all replicas |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="llm-failover-replicas-") as tmp:
        for i, (n, failures, window, rate) in enumerate(runs):
            rows = scenario(n, failures, window, rate, args.seconds, Path(tmp) / str(i),
                            args.fleet)
            hits = " / ".join(str(r["hits"]) for r in rows)
            opened = [r["open_after_s"] for r in rows]
            shown = " / ".join("never" if o is None else f"{o:.1f}" for o in opened)
            probes = sum(r["probes"] for r in rows)
            cooldowns = min((r["cooldowns"] for r in rows if r["open_after_s"] is not None),
                            default=0)
            per = f"{probes / cooldowns:.1f}" if cooldowns >= 1 else "-"
            print(f"| {n} | {failures} / {window} | {rate:g} | {hits} | {sum(r['hits'] for r in rows)} "
                  f"| {shown} | {per} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
