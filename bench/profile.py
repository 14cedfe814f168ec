#!/usr/bin/env python3
"""Counts wasm callbacks and hostcalls per request on the success and failover paths, from
Envoy's wasm trace log (`--component-log-level wasm:trace` logs every host->vm callback and
vm->host hostcall). Run by `scripts/bench.sh --profile`; ports from $BENCH_PORT_BASE + 50.

Output: per filter role (downstream / upstream), callbacks and hostcalls per request, by name.
The trace logs stay in .work/bench/profile/ (trace-success.log is what `node bench/module_bench.mjs
--trace` checks its host against). BENCH_PROFILE_BODY=50KB sends the 50 KiB body instead of 1 KiB.
"""

import collections
import os
import re
import sys
import time
from pathlib import Path

os.environ["BENCH_PORT_BASE"] = str(int(os.environ.get("BENCH_PORT_BASE", "19400")) + 50)
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as B  # noqa: E402

N = int(os.environ.get("BENCH_PROFILE_REQUESTS", "20"))
LINE = re.compile(r"\[(host->vm|vm->host)\] (?:env\.|wasi_snapshot_preview1\.)?(\w+)\(([^)]*)\)$")


def count(log_text):
    """Per-request averages over every request in the log (requests = downstream contexts)."""
    roots, ctx_root, downstream_roots = {}, {}, set()
    per = collections.defaultdict(collections.Counter)  # role -> Counter
    current = None
    events = []
    for line in log_text.splitlines():
        m = LINE.search(line)
        if not m:
            continue
        direction, name, args = m.groups()
        args = [a.strip() for a in args.split(",") if a.strip()]
        if direction == "host->vm":
            if name == "proxy_on_context_create" and len(args) == 2:
                ctx_root[args[0]] = args[1]
            if name != "proxy_on_memory_allocate" and args:
                current = args[0]
        elif name == "proxy_call_foreign_function" and current in ctx_root:
            downstream_roots.add(ctx_root[current])
        events.append((direction, name, current))
    for direction, name, ctx in events:
        root = ctx_root.get(ctx)
        if root is None or root == "0":
            continue  # root contexts: configure, ticks
        role = "downstream" if root in downstream_roots else "upstream"
        kind = "callback" if direction == "host->vm" else "hostcall"
        per[role][(kind, name)] += 1
    n = sum(1 for c, r in ctx_root.items() if r in downstream_roots)
    return n, {role: {k: v / n for k, v in c.items()} for role, c in per.items()}


def run(key, body):
    t = B.TARGETS[key]()
    idx = B.ENVOY_KEYS.index(key)
    t.port, t.admin = B.PORT_BASE + 10 + 2 * idx, B.PORT_BASE + 11 + 2 * idx
    cfg = B.render(t.primary, t.secondary, t.port, t.admin)
    path = B.RUN / f"envoy-{key}.yaml"
    path.write_text(B.yaml.safe_dump(cfg, sort_keys=False))
    trace = B.RUN / f"trace-{key}.log"
    t.proc = B.start(f"envoy-{key}", [str(B.ROOT / ".venv" / "bin" / "envoy"), "-c", str(path),
                                      "--concurrency", "1", "-l", "warning",
                                      "--component-log-level", "wasm:trace",
                                      "--disable-hot-restart", "--log-path", str(trace)])
    t.pids = [t.proc.pid]
    B.ready_envoy(t)
    for _ in range(N):
        B.probe(t, body)
    t.proc.terminate()  # flushes the log
    t.proc.wait(timeout=10)
    return count(trace.read_text(errors="replace"))


def main():
    B.RUN = B.WORK / "profile"
    if B.RUN.exists():
        B.shutil.rmtree(B.RUN)
    B.RUN.mkdir(parents=True)
    ap = B.argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--module", default=str(B.ROOT / "dist" / "llm_failover.wasm"))
    ap.add_argument("--cli", default=str(B.CLI))
    args = ap.parse_args()
    B.MODULE = B.RUN / "llm_failover.wasm"
    B.shutil.copyfile(args.module, B.MODULE)
    B.CLI = Path(args.cli).resolve()
    B.atexit.register(B.stop_all)
    B.start_nginx(None)
    # The request body as bench.py sends it (OpenAI chat, padded to exactly 1 KiB or 50 KiB);
    # BENCH_PROFILE_BODY=50KB traces the large one (how Envoy hands a 50 KB body over).
    size = {"1KB": 1024, "50KB": 50 * 1024}[os.environ.get("BENCH_PROFILE_BODY", "1KB")]
    head = ('{"model":"gpt-4o-mini","temperature":0.2,"messages":[{"role":"system",'
            '"content":"You are terse."},{"role":"user","content":"')
    tail = '"}]}'
    body_file = B.RUN / "body-1KB.json"  # bench.probe reads the body from a file, by this name
    body_file.write_text(head + "x" * (size - len(head) - len(tail)) + tail)
    body = {"1KB": body_file}
    results = {key: run(key, body) for key in ("success", "failover")}
    print("\nwasm callbacks and hostcalls per request (1 KB body, from the wasm trace log)\n")
    for key, (n, roles) in results.items():
        print(f"### {key} path ({n} requests)\n")
        print("| filter | kind | name | per request |\n|---|---|---|---:|")
        totals = collections.Counter()
        for role in ("downstream", "upstream"):
            for (kind, name), v in sorted(roles.get(role, {}).items()):
                print(f"| {role} | {kind} | {name} | {v:g} |")
                totals[(role, kind)] += v
        print()
        for (role, kind), v in sorted(totals.items()):
            print(f"- {role}: {v:g} {kind}s per request")
        print()


if __name__ == "__main__":
    main()
