#!/usr/bin/env python3
"""Soak with faults: real Envoy running the built filter, three mock providers that
misbehave at random, at least 200 concurrent callers (streaming and not), for a bounded time.

Every request is checked:
  * exactly one answer: a complete response, or a stream that ends early after its provider
    failed mid-way (a clear end: the connection closes before the last chunk);
  * no answer mixing two providers (every content chunk names the provider in x-llm-provider);
  * no request at the same provider more than twice (once, plus its in-place retry), nor at
    more providers than max_attempts;
  * each provider sees only its own credential (never another's, never the caller's key or
    cookie);
  * the public headers match what the mocks saw (x-llm-provider answered it, x-llm-attempts
    counts at least the attempts the mocks saw and at most max_attempts);
and over the run: the filter's attempt counters (what feeds the breakers) match the failures
the mocks served, ``llm_failover_tokens_total`` per provider and kind equals exactly the usage
the mocks reported in the answers callers got whole (docs/behaviour.md section 15), Envoy's
memory is flat (its heap after warm-up, and its RSS over the run's second half: check_memory),
and Envoy's log has no panic.

``--runtime native`` runs the native build (docs/native.md) instead of the wasm module, and checks
the attempts that got no answer as one class (it tells a timeout from a connection error by
duration alone).

Hedging: one caller in ten asks for HEDGE_MODEL, the chain [h1, h2] with ``hedge_after`` 250 ms
(docs/behaviour.md section 5). h1 stalls its first token past it at random (400-750 ms), h2 now
and then too (300-550 ms after the hedge starts), and neither fails, so every such request must
be answered whole by one of them (none lost, no answer with the other's bytes), and over the run
(check_hedging) each answer's provider's mock served it, a request its answer says raced
(``x-llm-attempts: 2``) was won by that provider and lost by the other, whose mock saw its
client go, sent its answer before the reset reached it, or never saw it; one that did not race
reached h1 only; a loser whose first_token ran out before the winner's first token was due
(a starved machine) failed instead, a timeout. llm_failover_hedges_total and the status
endpoint's ``hedges`` count exactly those won, lost and failed, and the attempts counted for h1
and h2 are only ``ok``, one per answer, and those timeouts, with no other failure in their
breakers: a loser never counts as a failure.

Usage: every answer a mock serves reports its own drawn usage (the mock's ``usage`` behaviour,
cache tokens included, Anthropic's in each of its three event shapes, some streams cut into
13-byte pieces whatever the event boundaries); the mock's request record keeps the usage it
sent once the whole answer was sent. p3 speaks Anthropic Messages, so its answers reach the
Chat callers translated. What counts (docs/behaviour.md section 15): an answer the caller got
whole and successfully (a complete JSON answer, a stream to its ``[DONE]``); failed attempts,
answers cut mid-way count nothing. Half the stream callers ask for usage, half do not (the
gateway asks for them, ``ask_stream_usage``, and their streams count too: the mock's record
says what it sent). Some stream callers go away after the first content chunk of an answer that is still
being sent (its mock sends a chunk a second, chosen by the caller's ``x-mock-behaviour``): its
last chunk never passes the filter, so it counts nothing.
Prints a table; exits 1 on any violation. Run it with scripts/soak.sh.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import harness  # noqa: E402
from harness import (Envoy, ProcessMock, free_port, http_request,  # noqa: E402
                     prometheus_samples, render_config)

PROVIDERS = ["p1", "p2", "p3"]
# The hedging chain's providers (HEDGE_AFTER): h1 stalls its first token past it at random, h2
# (the hedge) now and then too, so races are won both ways; neither ever fails.
HEDGING = ["h1", "h2"]
MOCKS = PROVIDERS + HEDGING
# The API each provider speaks (p3's answers are translated for the Chat callers).
API = {"p1": "chat", "p2": "chat", "p3": "messages", "h1": "chat", "h2": "chat"}
KINDS = ("input", "output", "cached_input")
KEYS = {"p1": ("authorization", "Bearer sk-p1"), "p2": ("authorization", "Bearer sk-p2"),
        "p3": ("x-api-key", "sk-p3"), "h1": ("authorization", "Bearer sk-h1"),
        "h2": ("authorization", "Bearer sk-h2")}
HEDGE_MODEL = "hedge-4o"
MAX_ATTEMPTS = 3
ATTEMPT_S = 1.0

FAILOVER = """
listen: {address: 127.0.0.1, port: "${LISTEN_PORT}"}
admin: {address: 127.0.0.1, port: "${ADMIN_PORT}"}
status_path: /llm-failover/status
status_listen: {address: 127.0.0.1, port: "${STATUS_PORT}"}
providers:
  - {name: p1, endpoint: "127.0.0.1:${P1_PORT}", credential: {header: authorization, prefix: "Bearer ", value: sk-p1},
     forward_headers: [x-mock-behaviour]}   # what a caller leaving mid-way asks (LEAVING)
  - {name: p2, endpoint: "127.0.0.1:${P2_PORT}", credential: {header: authorization, prefix: "Bearer ", value: sk-p2},
     forward_headers: [x-mock-behaviour]}
  - {name: p3, endpoint: "127.0.0.1:${P3_PORT}", api: anthropic, credential: {header: x-api-key, value: sk-p3},
     forward_headers: [x-mock-behaviour]}   # Anthropic Messages: translated for the Chat callers
  - {name: h1, endpoint: "127.0.0.1:${H1_PORT}", credential: {header: authorization, prefix: "Bearer ", value: sk-h1}}
  - {name: h2, endpoint: "127.0.0.1:${H2_PORT}", credential: {header: authorization, prefix: "Bearer ", value: sk-h2}}
chains:
  - name: hedge                         # the hedge callers' model only
    models: ["hedge-*"]
    providers: [h1, h2]
    max_attempts: 2
    hedge_after: 250ms
  - name: soak
    providers: [p1, p2, p3]
    max_attempts: 3
    retry_in_place: {back_off: 200ms}   # 500/503/reset retried once in place (a 429
                                        # asking for 1 s moves on: more than half the 1 s wait)
timeouts: {attempt: 1s, budget: 10s, min_remaining: 1s, first_token: 1s}
breaker: {failures: 150, window: 5s, cooldown: 1s, max_cooldown: 2s}
"""

# What each provider does, drawn per request (weights). p1 is the sick one.
FAULTS = {
    "ok": {},
    "500": {"status": 500},
    "503": {"status": 503},
    "429": {"status": 429, "headers": {"Retry-After": "1"}},
    "reset": {"action": "reset"},
    "hang": {"action": "hang"},
    "abort0": {"abort_after_chunks": 0},
    "abort1": {"abort_after_chunks": 1, "chunk_interval_ms": 20},
    "slow": {"chunks": 5, "first_chunk_delay_ms": 100, "chunk_interval_ms": 150},
    # Usage events cut anywhere: 13-byte pieces whatever the event boundaries.
    "split": {"chunk_bytes": 13},
    # The hedging chain's: a first token past hedge_after (250 ms), drawn in STALL_MS, within
    # first_token (1 s): h2's, started at 250 ms, is due by 800 ms, before h1's first_token.
    "stall": {},
}
STALL_MS = {"h1": (400, 750), "h2": (300, 550)}
# The soak's first_token, and how near it a race can go either way on a starved machine (the
# mocks' clocks against Envoy's).
FIRST_TOKEN_S = 1.0
MARGIN_S = 0.15
# What a caller that goes away mid-way asks its provider for: a chunk a second, so the answer
# is far from its end when the caller leaves after the first.
LEAVING = {"chunks": 6, "chunk_interval_ms": 1000}
WEIGHTS = {
    "p1": {"ok": 25, "500": 10, "503": 10, "429": 10, "reset": 10, "hang": 5, "abort0": 10,
           "abort1": 10, "slow": 5, "split": 5},
    "p2": {"ok": 55, "500": 5, "503": 5, "429": 5, "reset": 5, "hang": 3, "abort0": 5,
           "abort1": 7, "slow": 5, "split": 5},
    "p3": {"ok": 80, "500": 3, "429": 2, "reset": 2, "abort1": 3, "slow": 5, "split": 5},
    "h1": {"ok": 55, "stall": 40, "split": 5},
    "h2": {"ok": 75, "stall": 20, "split": 5},
}
PANIC = re.compile(r"panicked|wasm.*(crash|VM failed|failed to)|Function: proxy_on_\w+ failed",
                   re.I)


def draw_usage(rng: random.Random, api: str) -> dict:
    """A usage object in `api`'s own field names (cache tokens included), and for Anthropic
    where its stream puts it (``usage_events``)."""
    cached, prompt, out = rng.randint(0, 2000), rng.randint(1, 3000), rng.randint(0, 600)
    if api == "messages":
        return {"usage": {"input_tokens": prompt, "output_tokens": out,
                          "cache_read_input_tokens": cached,
                          "cache_creation_input_tokens": rng.randint(0, 50)},
                "usage_events": rng.choice(["start", "delta", "both"])}
    return {"usage": {"prompt_tokens": prompt + cached, "completion_tokens": out,
                      "total_tokens": prompt + cached + out,
                      "prompt_tokens_details": {"cached_tokens": cached}}}


def counted_kinds(api: str, usage: dict | None) -> tuple[int, int, int]:
    """(input, output, cached_input) the filter counts for `usage` (docs/observability.md,
    "Tokens": input is every prompt token, cached ones included; Anthropic reports the three
    apart)."""
    if not usage:
        return (0, 0, 0)
    if api == "messages":
        cached = usage.get("cache_read_input_tokens", 0)
        return (usage.get("input_tokens", 0) + cached + usage.get("cache_creation_input_tokens", 0),
                usage.get("output_tokens", 0), cached)
    return (usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0),
            (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0))


def hedge_caller(index: int) -> bool:
    """One caller in ten asks for HEDGE_MODEL: the hedging chain (never one that leaves)."""
    return index % 10 == 9


def caller_index(rid: str) -> int:
    try:
        return int(rid.split("-")[1])
    except (IndexError, ValueError):
        return -1


def is_stream(rid: str) -> bool:
    """Callers alternate: request n of caller i streams when i + n is even."""
    try:
        _, i, n = rid.split("-")
        return (int(i) + int(n)) % 2 == 0
    except ValueError:
        return False


# With --fleet: the budgets every replica shares through the fleet's store (docs/operations.md
# "The fleet's store"), too large to be spent, so the soak's walks are as without it while every
# answer of p2 and p3 is reported at each sync.
FLEET_BUDGET = 4_000_000_000
FLEET = f"""
fleet: {{address: "${{RATELIMIT_HOST}}:${{RATELIMIT_PORT}}", sync: 1s}}
"""
FLEET_BUDGETED = ("p2", "p3")


# Flat memory (check_memory): Envoy's RSS grows by less than this over the run's second half
# (the mean of its last third of samples against its first third's). About 5% of the native
# build's Envoy (85 MiB in the soak), under what a leak of 1 KB a request adds in CI's 30 s
# native run (about 450 requests a second over the 10 s between the thirds: 4.4 MiB).
RSS_GROWTH_MAX = 4 * 2**20


class Soak:
    def __init__(self, seconds: float, callers: int, workdir: Path, seed: int,
                 fleet: bool = False):
        self.seconds, self.callers, self.workdir = seconds, callers, workdir
        self.fleet = fleet
        self.store = None
        self.table_out: str | None = None
        self.scrape_out: str | None = None
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.results: list[dict] = []
        self.violations: collections.Counter = collections.Counter()
        self.examples: dict[str, str] = {}
        self.mem: list[tuple[float, int, int]] = []
        self.down_windows: list[tuple[float, float]] = []
        # (provider, mock request id) of every answer a caller got whole and successfully.
        self.whole: list[tuple[str, int]] = []
        self.left_mid_way = 0
        self.rss_growth_max = RSS_GROWTH_MAX
        # When each hedged request was sent (time.time(), as the mocks' records).
        self.sent: dict[str, float] = {}

    def violation(self, kind: str, detail: str) -> None:
        with self.lock:
            self.violations[kind] += 1
            self.examples.setdefault(kind, detail[:400])

    # ------------------------------------------------------------------ set-up
    def start(self) -> None:
        self.mocks = {n: ProcessMock(n, extra_args=["--max-records", "20000"])
                      for n in MOCKS}
        self.harvested = {n: 0 for n in MOCKS}
        # Records read before they finished (their usage is known once they have), and the
        # usage each finished record reports.
        self.unfinished: dict[str, set[int]] = {n: set() for n in MOCKS}
        self.usage: dict[tuple[str, int], dict | None] = {}
        # The hedging chain's finished records: {request id: {provider: (outcome, arrived,
        # first token due)}}.
        self.raced: dict[str, dict[str, str]] = collections.defaultdict(dict)
        self.seen: dict[str, list[str]] = collections.defaultdict(list)
        self.served = {n: collections.Counter() for n in MOCKS}
        self.status_port = free_port()
        env = {"LISTEN_PORT": str(free_port()), "ADMIN_PORT": str(free_port()),
               "STATUS_PORT": str(self.status_port)}
        env.update({f"{n.upper()}_PORT": str(m.port) for n, m in self.mocks.items()})
        failover = FAILOVER
        if self.fleet:
            from fleet_store import FleetStore
            self.store = FleetStore(self.workdir / "store").start()
            env.update(self.store.env)
            failover += FLEET
            for n in FLEET_BUDGETED:
                failover = failover.replace(
                    f"{{name: {n}, ", f"{{name: {n}, budget: {{tokens: {FLEET_BUDGET}, window: 1h}}, ")
        config = render_config(failover, env, out_dir=self.workdir / "rendered")
        self.envoy = Envoy(config, self.workdir / "envoy", concurrency=2).start()
        self.url = self.envoy.listener_url()

    def close(self) -> None:
        for m in self.mocks.values():
            m.stop()
        self.envoy.stop()
        if self.store:
            self.store.stop()

    # ------------------------------------------------------------------ chaos
    def feed(self) -> None:
        """Keeps each mock's one-shot queue full of randomly drawn behaviours."""
        names = {n: list(WEIGHTS[n]) for n in MOCKS}
        while not self.stop.is_set():
            for n, m in self.mocks.items():
                try:
                    if m.health()["queue_length"] < 300:
                        picks = self.rng.choices(names[n], [WEIGHTS[n][k] for k in names[n]],
                                                 k=600)
                        m.enqueue(*[{**self.fault(n, p), **draw_usage(self.rng, API[n])}
                                    for p in picks])
                except Exception as e:  # noqa: BLE001 - a control hiccup is reported, not fatal
                    self.violation("harness", f"feeding {n}: {e!r}")
            self.stop.wait(0.2)

    def fault(self, n: str, pick: str) -> dict:
        if pick == "stall":
            return {"first_chunk_delay_ms": self.rng.randint(*STALL_MS[n])}
        return FAULTS[pick]

    def flap(self) -> None:
        """p2 goes down (connections refused) for 2 s every 10 s."""
        while not self.stop.wait(8.0):
            t0 = time.monotonic()
            self.mocks["p2"].down()
            self.stop.wait(2.0)
            self.mocks["p2"].up()
            self.down_windows.append((t0, time.monotonic()))

    def scrape(self) -> None:
        """With --scrape FILE: the filter's metrics from /stats/prometheus every second, one
        JSON line each ({"t": seconds since the start, "text": the llm_failover lines}), what
        examples/grafana/plot.py draws the dashboard's panels from."""
        t0 = time.monotonic()
        with open(self.scrape_out, "w") as out:
            while not self.stop.wait(1.0):
                try:
                    text = self.envoy.admin("/stats/prometheus")
                except Exception as e:  # noqa: BLE001
                    self.violation("harness", f"scrape: {e!r}")
                    continue
                ours = "\n".join(ln for ln in text.splitlines() if "llm_failover_" in ln)
                out.write(json.dumps({"t": round(time.monotonic() - t0, 2), "text": ours}) + "\n")
                out.flush()

    def metrics(self) -> str:
        """/stats/prometheus, the native build's names as the wasm build prints them."""
        return harness.spec_prometheus(self.envoy.admin("/stats/prometheus"))

    def sample_memory(self) -> None:
        pid = self.envoy.proc.pid
        t0 = time.monotonic()
        # Every second in a short run (CI's native one: 30 s), enough samples for check_memory.
        every = 1.0 if self.seconds <= 120 else 2.0
        while not self.stop.wait(every):
            try:
                rss = int(re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
                          .group(1)) * 1024
                heap = int(json.loads(self.envoy.admin("/memory"))["allocated"])
                self.mem.append((time.monotonic() - t0, rss, heap))
            except Exception as e:  # noqa: BLE001
                self.violation("harness", f"memory sample: {e!r}")

    # ------------------------------------------------------------------ callers
    def caller(self, index: int) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            rid = f"soak-{index}-{n}"
            stream = (index + n) % 2 == 0
            body = {"model": HEDGE_MODEL if hedge_caller(index) else "gpt-4o",
                    "messages": [{"role": "user", "content": rid}]}
            if stream:
                body["stream"] = True
                if index % 2:
                    body["stream_options"] = {"include_usage": True}
                if index % 10 in (4, 7) and n % 4 == index % 2:  # (every 4th of theirs)
                    self.leave_mid_way(rid, body)
                    continue
            t0 = time.monotonic()
            if hedge_caller(index):
                self.sent[rid] = time.time()  # the mocks' clock (check_hedging)
            try:
                r = http_request(self.url, "POST", "/v1/chat/completions", json=body, timeout=20,
                                 headers={"x-request-id": rid, "authorization": "Bearer caller",
                                          "cookie": "session=caller"})
            except Exception as e:  # noqa: BLE001 - no answer at all is a violation
                self.violation("no answer", f"{rid}: {e!r}")
                continue
            self.check_answer(rid, stream, r, time.monotonic() - t0)

    def leave_mid_way(self, rid: str, body: dict) -> None:
        """A stream whose caller goes away after its first content chunk: the answer (a chunk
        a second, LEAVING) is far from its end, so it counts no tokens."""
        # Usage in both APIs' names, whichever provider serves it (the Chat reader takes
        # input_tokens as prompt_tokens, the same number).
        own = {**LEAVING, "usage": {"prompt_tokens": 100, "completion_tokens": 10,
                                    "total_tokens": 110, "input_tokens": 100, "output_tokens": 10}}
        u = self.url.split("//", 1)[1]
        host, port = u.split(":")
        data = json.dumps(body).encode()
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: {u}\r\nx-request-id: {rid}\r\n"
                f"x-mock-behaviour: {json.dumps(own)}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(data)}\r\n\r\n").encode()
        got = b""
        try:
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                sock.sendall(head + data)
                deadline = time.monotonic() + 10
                while b'"content"' not in got.partition(b"\r\n\r\n")[2] and \
                        time.monotonic() < deadline and not self.whole_error(got):
                    piece = sock.recv(65536)
                    if not piece:
                        break
                    got += piece
        except OSError as e:
            self.violation("no answer", f"{rid} (leaving mid-way): {e!r} after {got[:300]!r}")
            return
        with self.lock:
            self.left_mid_way += 1

    @staticmethod
    def whole_error(got: bytes) -> bool:
        """Whether `got` is a whole answer other than a 200 (every provider's breaker open: a
        503 with its JSON error, on a connection kept open), which a caller leaving mid-way
        gets instead of a stream."""
        head, sep, body = got.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        return bool(sep and not head.startswith(b"HTTP/1.1 200") and length
                    and len(body) >= int(length.group(1)))

    def check_answer(self, rid: str, stream: bool, r, took: float) -> None:
        provider = r.header("x-llm-provider")
        attempts = int(r.header("x-llm-attempts") or 0)
        mock = r.header("x-mock-provider")
        kind = "error"
        if r.status == 200:
            if mock is None or mock != provider:
                self.violation("answer not from x-llm-provider", f"{rid}: {provider} vs {mock}")
            if stream:
                names = set(re.findall(rb'"content": ?"([ph]\d):\d+ ', r.body))
                if names - {(provider or "").encode()}:
                    self.violation("mixed providers", f"{rid}: {names} header {provider}")
                done = b"data: [DONE]" in r.body
                kind = "stream" if r.complete and done else "stream cut"
                if kind == "stream":
                    self.served_whole(rid, provider, r)
                if not r.complete and r.error is None:
                    self.violation("stream ended unclearly", rid)
            elif not r.complete:
                # Gathered from the provider's stream under first_token: a provider that fails
                # after the first output ends the answer as a stream's (reset: the client
                # raises), never with a complete-looking body.
                kind = "json cut"
                if r.error is None:
                    self.violation("answer ended unclearly", rid)
            else:
                try:
                    content = json.loads(r.body)["choices"][0]["message"]["content"]
                except Exception:  # noqa: BLE001
                    self.violation("unreadable answer", f"{rid}: {r.body[:200]!r}")
                    content = ""
                # Gathered from the provider's stream under first_token: its pieces, all from
                # the provider that answered.
                pieces = set(re.findall(r"([ph]\d):\d+ ", content))
                if f"Hello from {provider} " not in content and pieces != {provider}:
                    self.violation("mixed providers", f"{rid}: {content!r} header {provider}")
                kind = "json"
                if not r.complete:
                    self.violation("incomplete answer", rid)
                else:
                    self.served_whole(rid, provider, r)
        else:
            if not r.complete:
                self.violation("incomplete error answer", f"{rid}: {r.status}")
            try:
                kind = f"{r.status} {json.loads(r.body)['error'].get('code')}"
            except Exception:  # noqa: BLE001
                self.violation("error answer without a JSON error", f"{rid}: {r.status} {r.body[:200]!r}")
        if hedge_caller(caller_index(rid)) and kind not in ("json", "stream"):
            # The hedging chain's providers never fail: anything but a whole answer is a lost
            # request.
            self.violation("hedged request lost", f"{rid}: {r.status} {kind} {r.body[:200]!r}")
        if attempts > MAX_ATTEMPTS:
            self.violation("more attempts than max_attempts", f"{rid}: {attempts}")
        if took > 10 + ATTEMPT_S + 6:  # budget + one attempt + the slowest stream, with slack
            self.violation("answer too late", f"{rid}: {took:.1f}s")
        with self.lock:
            self.results.append((rid, r.status, kind, provider, attempts, took))

    def served_whole(self, rid: str, provider: str | None, r) -> None:
        """The caller got this answer whole: what its mock reported counts."""
        try:
            mid = int(r.header("x-mock-request-id") or "")
        except ValueError:
            self.violation("answer without x-mock-request-id", rid)
            return
        with self.lock:
            self.whole.append((provider or "?", mid))

    # ------------------------------------------------------------------ the run
    def run(self) -> int:
        jobs = [self.feed, self.flap, self.sample_memory, self.harvester]
        if self.scrape_out:
            jobs.append(self.scrape)
        helpers = [threading.Thread(target=f, daemon=True) for f in jobs]
        for t in helpers:
            t.start()
        time.sleep(0.5)
        callers = [threading.Thread(target=self.caller, args=(i,), daemon=True)
                   for i in range(self.callers)]
        t0 = time.monotonic()
        for t in callers:
            t.start()
        self.stop.wait(self.seconds)
        self.stop.set()
        for t in callers:
            t.join(30)
        self.elapsed = time.monotonic() - t0
        for t in helpers:
            t.join(5)
        for m in self.mocks.values():
            m.up()
        time.sleep(1.5)  # the last attempts' reports land
        self.check_providers()
        self.check_metrics()
        self.check_hedging()
        self.check_tokens()
        if self.fleet:
            self.check_fleet()
        self.check_memory()
        self.check_log()
        return self.report()

    def harvest(self) -> None:
        """Reads the mocks' new request records (they keep only the last 20000) and checks
        each one: credentials, private headers; remembers which providers saw which request."""
        for n, m in self.mocks.items():
            # From the oldest record still unfinished last time: its usage is known once the
            # whole answer was sent.
            unfinished = self.unfinished[n]
            since = min(unfinished, default=self.harvested[n] + 1) - 1
            recs = m.requests(since=since, bodies=False)
            new = [r for r in recs if r["id"] > self.harvested[n]]
            if new and new[0]["id"] > self.harvested[n] + 1:
                self.violation("harness", f"{n}: records {self.harvested[n] + 1}.. were dropped")
            oldest = recs[0]["id"] if recs else since + 1
            unfinished.difference_update({i for i in unfinished if i < oldest})
            for rec in recs:
                if rec["completed_time"] is None:
                    unfinished.add(rec["id"])
                else:
                    unfinished.discard(rec["id"])
                    self.usage[(n, rec["id"])] = rec.get("usage")
                    if n in HEDGING:
                        rid = next((v for k, v in rec["headers"] if k.lower() == "x-request-id"),
                                   "?")
                        # (outcome, when it arrived, when its first token was due)
                        due = (rec.get("behaviour") or {}).get("first_chunk_delay_ms", 0) / 1000
                        self.raced[rid][n] = (rec["outcome"], rec["time"], rec["time"] + due)
            if new:
                self.harvested[n] = new[-1]["id"]
            self.check_records(n, new)

    def harvester(self) -> None:
        while not self.stop.wait(2.0):
            try:
                self.harvest()
            except Exception as e:  # noqa: BLE001
                self.violation("harness", f"harvest: {e!r}")

    def check_records(self, n: str, recs: list[dict]) -> None:
        seen = self.seen
        key_header, key = KEYS[n]
        for rec in recs:
            b = rec.get("behaviour") or {}
            status = b.get("status", 200)
            rid = next((v for k, v in rec["headers"] if k.lower() == "x-request-id"), "?")
            if n in HEDGING:
                pass  # what each attempt of a race came to: check_hedging, from finished records
            elif b.get("action") == "hang":
                self.served[n]["timeout"] += 1
            elif b.get("abort_after_chunks") == 0:
                # Reset before the first event: the filter holds the first event, so this is
                # a connection error that falls over, not an answer. With first_token set every
                # attempt is streamed from its provider, requests that did not ask for a stream
                # too (gathered into one JSON answer).
                self.served[n]["reset"] += 1
            elif b.get("action") == "reset":
                self.served[n]["reset"] += 1
            elif status == 429:
                self.served[n]["429"] += 1
            elif status >= 500:
                self.served[n]["5xx"] += 1
            else:
                self.served[n]["200"] += 1
            h = collections.defaultdict(list)
            for k, v in rec["headers"]:
                h[k.lower()].append(v)
            rid = (h.get("x-request-id") or ["?"])[0]
            seen[rid].append(n)
            if h.get(key_header) != [key]:
                self.violation("wrong credential", f"{n} {rid}: {dict(h)}")
            for other, (oh, ok) in KEYS.items():
                if other != n and ok in h.get(oh, []):
                    self.violation("another provider's key", f"{n} {rid} got {other}'s key")
            if "cookie" in h or "Bearer caller" in h.get("authorization", []):
                self.violation("caller's private header reached a provider", f"{n} {rid}")

    def check_providers(self) -> None:
        self.harvest()
        seen = self.seen
        for rid, providers in seen.items():
            # In-place retry tries a provider at most twice (behaviour.md 5).
            if max(collections.Counter(providers).values()) > 2:
                self.violation("same provider three times", f"{rid}: {providers}")
            if len(providers) > MAX_ATTEMPTS:
                self.violation("more providers than max_attempts", f"{rid}: {providers}")
        for rid, status, _, provider, attempts, _ in self.results:
            at = seen.get(rid, [])
            if status == 200 and provider not in at:
                self.violation("answer from a provider that never saw the request", rid)
            if attempts < len(at):
                self.violation("x-llm-attempts below the attempts providers saw",
                               f"{rid}: {attempts} < {at}")

    def check_metrics(self) -> None:
        samples = prometheus_samples(self.metrics(),
                                     "llm_failover_attempts_total")
        got = collections.Counter()
        for labels, v in samples:
            got[(labels.get("provider"), labels.get("outcome"))] += int(v)
        self.metric_rows = []
        for n in PROVIDERS:
            served = self.served[n]
            m = {k: sum(v for (p, o), v in got.items() if p == n and o in outcomes)
                 for k, outcomes in {"200": {"ok"}, "5xx": {"server_error", "overloaded"},
                                     "429": {"rate_limited"}, "timeout": {"timeout"},
                                     "reset": {"connection_error"}}.items()}
            m["client_disconnect"] = got[(n, "client_disconnect")]
            counted = sum(m[k] for k in ("200", "5xx", "429", "timeout", "reset"))
            total = sum(served.values())
            # Every attempt the mock saw is counted once (p2 also has refused ones it never saw).
            if counted != total if n != "p2" else counted < total:
                self.violation("counters differ from what the mocks served",
                               f"{n}: {counted} attempts counted, {total} served")
            # Per class: on a starved machine a few attempts end otherwise than the mock meant:
            # an answer sent after the attempt timeout is Envoy's timeout, and a hang cut by the
            # per-try timeout can reach the filter a moment early and read as a connection error
            # (the filter tells them apart by duration, docs/features.md, "Known limits"). The 30-minute run
            # at load 13 on 2 cores saw 6 of 11k hangs and 27 of 650k answers so; a class that is
            # really wrong is far beyond this margin.
            slack = max(3, total // 1000)
            # The native build cannot read an attempt's transport failure reason: it tells a
            # timeout from a connection error by the time the attempt took alone (docs/
            # internals.md "The native build"), so the two are checked together there.
            got_m, want_m, no_answer = m, served, ("timeout", "reset")
            if harness.runtime() == "native":
                both = lambda c: {**c, "no answer": c["timeout"] + c["reset"]}  # noqa: E731
                got_m, want_m, no_answer = both(m), both(served), ("no answer",)
            checks = [(got_m[k], want_m[k], k) for k in ("5xx", "429")]
            if n != "p2":
                checks += [(got_m[k], want_m[k], k) for k in ("200", *no_answer)]
            else:
                # Going down drops open connections (a hang or a stream before its first event
                # then ends as a connection error): those classes can only shrink.
                checks += [(min(m[k], served[k]), m[k], k) for k in ("200", "timeout")]
            for metric, mock, k in checks:
                if abs(metric - mock) > slack:
                    self.violation("counters differ from what the mocks served",
                                   f"{n} {k}: metric {metric} vs served {mock} ({m} / {dict(served)})")
            self.metric_rows.append((n, served, m))

    def check_hedging(self) -> None:
        """The hedging chain over the whole run, from what its mocks saw (the splice and lost
        request checks are check_answer's): each answer's provider's mock served it; a request
        whose answer says it raced (x-llm-attempts 2) was won by that provider, and the other
        lost it (its mock saw its client go, sent its answer before the reset reached it, or
        never saw the request), unless the other's first_token (1 s from its start) ran out
        before the winner's first token was due (FIRST_TOKEN_S; the mocks' clocks): then it
        failed, a timeout, before the race was decided. One that did not race reached h1 only.
        llm_failover_hedges_total and the status endpoint's ``hedges`` count exactly that,
        llm_failover_attempts_total only ``ok`` (one per answer) and those timeouts, and the
        breakers saw no other failure: a loser never counts as a failure. A race decided within
        MARGIN_S of the loser's first_token may have gone either way (a starved machine), and so
        may one decided between the first_token counted from the request's sending and from
        its mock seeing it (the attempt started in Envoy in between)."""
        answers = {r[0]: r for r in self.results if hedge_caller(caller_index(r[0]))}
        want = {n: collections.Counter() for n in HEDGING}
        self.losers = collections.Counter()
        for rid, (_, status, kind, provider, attempts, _) in answers.items():
            raced = self.raced.get(rid, {})
            if status != 200 or provider not in HEDGING:
                continue  # check_answer reported it
            want[provider]["ok"] += 1
            won = raced.get(provider)
            if not won or won[0] not in ("streamed", "responded"):
                self.violation("answer from a provider whose mock did not serve it",
                               f"{rid}: answered by {provider}, mocks {raced}")
                continue
            other = next(n for n in HEDGING if n != provider)
            if attempts == 2:
                want[provider]["won"] += 1
                lost = raced.get(other)
                self.losers[lost[0] if lost else "never reached"] += 1
                verdict = "lost"
                if lost:
                    if lost[0] not in ("client_gone", "streamed"):
                        self.violation("a race's loser ended otherwise than lost",
                                       f"{rid}: answered by {provider}, mocks {raced}")
                    # The loser's first_token runs from its start in Envoy: after the request
                    # was sent, before its mock saw it (later on a starved machine).
                    late = won[2] - (lost[1] + FIRST_TOKEN_S)
                    early = won[2] - (self.sent.get(rid, lost[1]) + FIRST_TOKEN_S)
                    verdict = "failed" if late > MARGIN_S else "either" if early > -MARGIN_S \
                        else "lost"
                want[other][verdict] += 1
                if verdict != "lost":
                    self.losers[f"its first_token out first: {verdict}"] += 1
            elif attempts != 1 or provider != HEDGING[0] or other in raced:
                self.violation("a request's attempts differ from what the mocks saw",
                               f"{rid}: answered by {provider}, attempts {attempts}, mocks {raced}")
        asked = sum(1 for rid in self.seen if hedge_caller(caller_index(rid)))
        if len(answers) != asked:
            self.violation("hedged request lost",
                           f"{asked} reached a provider, {len(answers)} answered")
        unfinished = {n: len(self.unfinished[n]) for n in HEDGING if self.unfinished[n]}
        if unfinished:
            self.violation("a race's attempt never ended", f"unfinished records: {unfinished}")
        text = self.metrics()
        got = {n: collections.Counter() for n in HEDGING}
        for labels, v in prometheus_samples(text, "llm_failover_hedges_total"):
            if labels.get("provider") in got:
                got[labels["provider"]][labels.get("outcome")] += int(v)
        for labels, v in prometheus_samples(text, "llm_failover_attempts_total"):
            if labels.get("provider") in got and v:
                got[labels["provider"]][f"attempt {labels.get('outcome')}"] += int(v)
        status = {p["name"]: p for p in http_request(
            f"http://127.0.0.1:{self.status_port}", "GET", "/llm-failover/status").json()["providers"]}
        self.hedge_rows = []
        for n in HEDGING:
            w = want[n]
            expect = {"won": w["won"], "lost": w["lost"], "failed": w["failed"]}
            metric = {k: got[n][k] for k in expect}
            attempts = {k.split(" ", 1)[1]: v for k, v in got[n].items() if k.startswith("attempt ")}
            entry = status.get(n, {})
            shown = entry.get("hedges")
            self.hedge_rows.append((n, w["ok"], {**expect, "either": w["either"]}, metric, shown,
                                    attempts, entry.get("failures_in_window")))
            # The races decided within MARGIN_S of the loser's first_token go either way.
            if metric["won"] != w["won"] or \
                    metric["lost"] + metric["failed"] != w["lost"] + w["failed"] + w["either"] or \
                    not w["failed"] <= metric["failed"] <= w["failed"] + w["either"]:
                self.violation("hedge counts differ from what the mocks saw",
                               f"{n}: llm_failover_hedges_total {metric}, mocks {expect}, "
                               f"either way {w['either']}")
            if shown != metric:
                self.violation("hedge counts differ from what the mocks saw",
                               f"{n}: status endpoint {shown}, llm_failover_hedges_total {metric}")
            timeouts = {"timeout": metric["failed"]} if metric["failed"] else {}
            if attempts != {"ok": w["ok"], **timeouts}:
                self.violation("a hedging provider's attempts counted otherwise than answered",
                               f"{n}: llm_failover_attempts_total {attempts}, answers {w['ok']}, "
                               f"races failed {metric['failed']}")
            last = (entry.get("last_failure") or {}).get("class")
            if entry.get("state") != "closed" or (last != "timeout" if metric["failed"] else
                                                  last is not None):
                self.violation("a hedging provider's breaker saw a failure",
                               f"{n}: {json.dumps(entry)[:300]}")

    def expected_tokens(self) -> dict[tuple[str, str], int]:
        """{(provider, kind): tokens} the mocks reported in the answers callers got whole."""
        expected = collections.Counter()
        for provider, mid in self.whole:
            if (provider, mid) not in self.usage:
                self.violation("harness", f"{provider} record {mid}: served, usage not known")
                continue
            for kind, v in zip(KINDS, counted_kinds(API[provider], self.usage[(provider, mid)])):
                expected[(provider, kind)] += v
        return expected

    def counted_tokens(self) -> dict[tuple[str, str], int]:
        """{(provider, kind): tokens} in llm_failover_tokens_total (every model)."""
        counted = collections.Counter()
        for labels, v in prometheus_samples(self.metrics(),
                                            "llm_failover_tokens_total"):
            counted[(labels.get("provider"), labels.get("kind"))] += int(v)
        return counted

    def check_tokens(self) -> None:
        """The tokens counted equal, exactly, what the mocks reported in the answers callers got
        whole (docs/behaviour.md section 15), per provider and kind. Each worker adds what it
        counted once a second (its tick): waits up to 5 s for the counters to get there."""
        expected = self.expected_tokens()
        want = {(n, k): expected[(n, k)] for n in MOCKS for k in KINDS}
        deadline = time.monotonic() + 5
        while True:
            counted = self.counted_tokens()
            got = {(n, k): counted[(n, k)] for n in MOCKS for k in KINDS}
            if got == want or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        stray = {key: v for key, v in counted.items() if key not in want and v}
        self.token_rows = [(n, [want[(n, k)] for k in KINDS], [got[(n, k)] for k in KINDS])
                           for n in MOCKS]
        for n, reported, counts in self.token_rows:
            if reported != counts:
                diff = ", ".join(f"{k} {c - r:+d} ({c} counted, {r} reported)"
                                 for k, r, c in zip(KINDS, reported, counts) if r != c)
                self.violation("tokens counted differ from what the mocks reported",
                               f"{n}: {diff}")
        if stray:
            self.violation("tokens counted differ from what the mocks reported",
                           f"counted for no provider the soak knows: {stray}")

    def check_fleet(self) -> None:
        """With the store on: the syncs answered all along, and the store counted at least what
        the filter counted for each budgeted provider (never less: docs/operations.md says a
        sync retried after a slow answer may count twice)."""
        from ratelimit_client import Descriptor, RateLimitClient
        time.sleep(2.5)  # two syncs: the last spend reported
        syncs = collections.Counter()
        for labels, v in prometheus_samples(self.metrics(),
                                            "llm_failover_fleet_sync_total"):
            syncs[labels.get("result")] += int(v)
        self.fleet_syncs = dict(syncs)
        if syncs["ok"] < self.seconds / 2:
            self.violation("the fleet's store did not sync", f"syncs by result: {dict(syncs)}")
        if sum(v for k, v in syncs.items() if k != "ok"):
            self.violation("a sync with the fleet's store failed", f"syncs by result: {dict(syncs)}")
        counted = collections.Counter()
        for labels, v in prometheus_samples(self.metrics(),
                                            "llm_failover_tokens_total"):
            if labels.get("kind") in ("input", "output"):
                counted[labels.get("provider")] += int(v)
        self.fleet_rows = []
        with RateLimitClient(self.store.service.grpc_address) as rl:
            for n in FLEET_BUDGETED:
                status = rl.should_rate_limit("llm-failover", [Descriptor(
                    [("budget", n)], limit=FLEET_BUDGET, unit="HOUR", hits=0)]).statuses[0]
                stored = FLEET_BUDGET - status.limit_remaining
                self.fleet_rows.append((n, counted[n], stored))
                if stored < counted[n]:
                    self.violation("the fleet's store counted less than was spent",
                                   f"{n}: store {stored}, counted {counted[n]}")

    def check_memory(self) -> None:
        """Flat memory: Envoy's heap after warm-up grows by at most 10% (or 16 MiB), and its RSS
        over the run's second half (RSS_GROWTH_MAX: the mean of the half's last third of
        samples against its first third's) by less than ``rss_growth_max`` bytes. Sampled once a
        second (twice past 2 minutes), a run too short to give the half six samples fails."""
        half = [s[1] for s in self.mem if s[0] >= self.seconds / 2]
        self.rss_half = None
        if len(half) < 6:
            self.violation("memory not sampled", f"{len(half)} RSS samples in the second half")
        else:
            third = len(half) // 3
            before, after = statistics.mean(half[:third]), statistics.mean(half[-third:])
            self.rss_half = (before, after)
            if after - before >= self.rss_growth_max:
                self.violation("memory grows in the run's second half",
                               f"RSS {before / 2**20:.1f} -> {after / 2**20:.1f} MiB, "
                               f"bound {self.rss_growth_max / 2**20:g} MiB")
        warm = [s for s in self.mem if s[0] >= max(10.0, 0.2 * self.seconds)]
        self.mem_summary = None
        if len(warm) < 6:
            return
        third = len(warm) // 3
        first, last = warm[:third], warm[-third:]
        rss0, rss1 = statistics.mean(s[1] for s in first), statistics.mean(s[1] for s in last)
        heap0, heap1 = statistics.mean(s[2] for s in first), statistics.mean(s[2] for s in last)
        self.mem_summary = (rss0, rss1, heap0, heap1, max(s[1] for s in self.mem))
        allowed = max(0.10 * heap0, 16 * 2**20)
        if heap1 - heap0 > allowed:
            self.violation("memory grows after warm-up",
                           f"heap {heap0 / 2**20:.1f} -> {heap1 / 2**20:.1f} MiB")

    def check_log(self) -> None:
        self.panics = [line for line in self.envoy.log().splitlines() if PANIC.search(line)]
        for line in self.panics[:3]:
            self.violation("wasm panic or VM failure in Envoy's log", line)

    def report(self) -> int:
        res = self.results
        kinds = collections.Counter(r[2] for r in res)
        errors = collections.Counter(r[2] for r in res if r[1] != 200)
        took = sorted(r[5] for r in res) or [0.0]
        pct = lambda q: took[min(len(took) - 1, int(q * len(took)))]  # noqa: E731
        lines = [f"soak: {self.elapsed:.0f} s, {self.callers} concurrent callers, Envoy --concurrency 2",
                 "",
                 "| figure | value |", "|---|---|",
                 f"| requests answered | {len(res)} ({len(res) / max(self.elapsed, 1):.0f}/s) |",
                 f"| 200 JSON / JSON cut mid-way (gathered) / 200 stream complete / stream cut mid-way | {kinds['json']} / {kinds['json cut']} / {kinds['stream']} / {kinds['stream cut']} |",
                 f"| error answers (status code: count) | {', '.join(f'{k}: {c}' for k, c in sorted(errors.items())) or '-'} |",
                 f"| latency p50 / p99 / max | {pct(0.5) * 1000:.0f} / {pct(0.99) * 1000:.0f} / {took[-1] * 1000:.0f} ms |",
                 f"| attempts at providers (mock records) | {sum(sum(c.values()) for c in self.served.values())} |",
                 f"| answers callers got whole (their usage counts) / streams left mid-way by their caller (count nothing) | {len(self.whole)} / {self.left_mid_way} |",
                 f"| p2 down windows | {len(self.down_windows)} |"]
        if self.mem_summary:
            rss0, rss1, heap0, heap1, rss_max = self.mem_summary
            lines.append(f"| Envoy RSS after warm-up, first third -> last third (max) | {rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MiB ({rss_max / 2**20:.1f}) |")
            lines.append(f"| Envoy heap allocated, first third -> last third | {heap0 / 2**20:.1f} -> {heap1 / 2**20:.1f} MiB |")
        if self.rss_half:
            before, after = self.rss_half
            lines.append(f"| Envoy RSS in the second half, first third -> last third (bound: grows < {self.rss_growth_max / 2**20:g} MiB) | {before / 2**20:.1f} -> {after / 2**20:.1f} MiB (+{(after - before) / 2**20:.1f}) |")
        lines.append(f"| wasm panics / VM failures in the log | {len(self.panics)} |")
        if self.fleet:
            lines.append(f"| fleet syncs by result | {getattr(self, 'fleet_syncs', {})} |")
            for n, counted, stored in getattr(self, "fleet_rows", []):
                lines.append(f"| {n}: tokens counted / the fleet's store's count | {counted} / {stored} |")
        lines += ["", "| provider | served 200 / 5xx / 429 / hang / reset | counted ok / 5xx / 429 / timeout / connection_error / client_disconnect |",
                  "|---|---|---|"]
        for n, served, m in self.metric_rows:
            lines.append(f"| {n} | {served['200']} / {served['5xx']} / {served['429']} / {served['timeout']} / {served['reset']} "
                         f"| {m['200']} / {m['5xx']} / {m['429']} / {m['timeout']} / {m['reset']} / {m['client_disconnect']} |")
        lines += ["", "| hedging provider | answers | races won / lost / failed: the mocks' | llm_failover_hedges_total | status endpoint | llm_failover_attempts_total | breaker failures in window |",
                  "|---|---|---|---|---|---|---|"]
        fmt = lambda d: " / ".join(str(d.get(k)) for k in ("won", "lost", "failed")) if d else str(d)  # noqa: E731
        for n, ok, expect, metric, shown, attempts, failures in getattr(self, "hedge_rows", []):
            lines.append(f"| {n} | {ok} | {fmt(expect)} (either way {expect['either']}) | {fmt(metric)} | {fmt(shown)} | {attempts} | {failures} |")
        losers = getattr(self, "losers", {})
        lines.append(f"\nraces: {sum(losers.values())}; what the loser's mock saw: "
                     f"{', '.join(f'{k} {v}' for k, v in sorted(losers.items())) or '-'}")
        lines += ["", "| provider (API) | tokens the mocks reported in answers got whole: input / output / cached_input | llm_failover_tokens_total: input / output / cached_input |",
                  "|---|---|---|"]
        for n, reported, counts in self.token_rows:
            lines.append(f"| {n} ({API[n]}) | {' / '.join(map(str, reported))} | {' / '.join(map(str, counts))} |")
        lines += ["", "| violation | count | first example |", "|---|---|---|"]
        if not self.violations:
            lines.append("| none | 0 | |")
        for kind, count in self.violations.most_common():
            lines.append(f"| {kind} | {count} | {self.examples[kind]} |")
        print("\n".join(lines))
        if self.table_out:
            Path(self.table_out).write_text("\n".join(lines) + "\n")
        return 1 if self.violations else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--minutes", type=float)
    ap.add_argument("--callers", type=int, default=200)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--table-out", help="also write the table to this file")
    ap.add_argument("--fleet", action="store_true", help="with the fleet's store (Redis and "
                    "Envoy's rate-limit service): budgets on p2 and p3 counted by it")
    ap.add_argument("--rss-growth-max", type=float, default=RSS_GROWTH_MAX / 2**20,
                    metavar="MIB", help="the most Envoy's RSS may grow over the run's second "
                    "half (default %(default)g MiB)")
    ap.add_argument("--runtime", choices=("wasm", "native"), default="wasm",
                    help="the build Envoy runs: the wasm module or the native dynamic module "
                    "(docs/native.md; Envoy 1.40/1.41)")
    ap.add_argument("--scrape", help="write the filter's Prometheus metrics every second to "
                    "this file (JSON lines; examples/grafana/plot.py draws them)")
    args = ap.parse_args(argv)
    # The harness renders every gateway for the build it names (harness.runtime()).
    os.environ["LLM_FAILOVER_RUNTIME"] = args.runtime
    seconds = args.minutes * 60 if args.minutes else args.seconds
    if args.callers < 1 or seconds <= 0 or seconds > 24 * 3600:
        ap.error("--callers >= 1 and a duration up to 24 h")
    with tempfile.TemporaryDirectory(prefix="llm-failover-soak-") as tmp:
        soak = Soak(seconds, args.callers, Path(tmp), args.seed, fleet=args.fleet)
        soak.table_out = args.table_out
        soak.rss_growth_max = args.rss_growth_max * 2**20
        soak.scrape_out = args.scrape
        soak.start()
        try:
            return soak.run()
        finally:
            soak.stop.set()
            soak.close()


if __name__ == "__main__":
    sys.exit(main())
