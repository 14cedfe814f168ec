#!/usr/bin/env python3
"""Counted instructions per request of the whole Envoy process (every thread), each
configuration under valgrind's callgrind, for the same requests from the same client: the plain
route, the native module, the wasm module (and the others bench.py knows). This VM has no
hardware counters (`perf stat -e instructions` is not supported), and timed figures move with
the neighbours; instruction counts do not, to a fraction of a percent. Run by
`scripts/bench.sh --instructions` (see BENCHMARKS.md, "The native build"); ports from
$BENCH_PORT_BASE + 70.

Each Envoy (`--concurrency 1`) starts under callgrind with instrumentation off, takes
--warmup requests, then callgrind counts --requests requests sent one after another on one
keep-alive connection (each answer checked as bench.py's probe checks it), and dumps. The
instructions per request are that dump's total over the requests: Envoy's own, the module's,
the C library's; idle work (timers, the native module's one-second tick) is in it too, a few
hundred instructions per request at callgrind's pace (--idle measures it).

  --only plain,native,success     configurations (bench.py's keys; also `native_noop`, the
                                  native filters' places taken by a dynamic module that does
                                  nothing, and the native rows of the translated requests)
  --annotate                      also the profile: instructions per object (Envoy, the module,
                                  libc...), the module's hooks and Envoy's callbacks
                                  (inclusive) and the module's own functions, per request
  --native X.so --module X.wasm   the builds to measure (default dist/)
Bounded: every Envoy is stopped by its pid; each load has a timeout.
"""

import argparse
import http.client
import os
import re
import subprocess
import sys
import time
from pathlib import Path

os.environ["BENCH_PORT_BASE"] = str(int(os.environ.get("BENCH_PORT_BASE", "19400")) + 70)
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as B  # noqa: E402

NOOP_SRC = B.ROOT / "bench" / "noop_native.rs"
NOOP = B.WORK / "libnoop_native.so"


def build_noop():
    """The do-nothing dynamic module (bench/noop_native.rs), built with the host's rustc."""
    if NOOP.exists() and NOOP.stat().st_mtime > NOOP_SRC.stat().st_mtime:
        return
    subprocess.run(["rustc", "--edition", "2021", "--crate-type", "cdylib", "-C", "opt-level=3",
                    "-C", "panic=abort", "-o", str(NOOP), str(NOOP_SRC)], check=True, timeout=300)


def native_noop(cfg):
    """The rendered native config with the do-nothing module in both filters' places, on the
    matcher route whose first slot falls to `primary` (as bench.py's `route_only`)."""
    spec = B.hcm(cfg)["route_config"]["virtual_hosts"][0]["routes"][0]["route"][
        "inline_cluster_specifier_plugin"]["extension"]["typed_config"]
    spec["cluster_matcher"]["on_no_match"]["matcher"]["on_no_match"] = {"action": {
        "name": "cluster", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.router.cluster_specifiers.matcher.v3.ClusterAction",
            "cluster": "primary"}}}
    filters = list(B.hcm(cfg)["http_filters"])
    for c in cfg["static_resources"]["clusters"]:
        filters += B.upstream_opts(c).get("http_filters", [])
    for f in filters:
        dm = f["typed_config"].get("dynamic_module_config")
        if dm:
            dm["name"] = "noop_native"
            dm["module"]["local"]["filename"] = str(NOOP)


B.TARGETS["native_noop"] = lambda: B.Target(
    "native_noop", "do-nothing dynamic module in both places, matcher route", B.NGINX_OK,
    native_noop, runtime="native")


def callgrind(pid, *args):
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, timeout=120,
                   stdout=subprocess.DEVNULL)


def send(t, body, n, timeout):
    """n requests on one keep-alive connection, each checked; seconds taken."""
    path = B.REQUESTS[t.request][0]
    conn = http.client.HTTPConnection("127.0.0.1", t.port, timeout=timeout)
    headers = {"content-type": "application/json", "authorization": "Bearer sk-bench"}
    start = time.monotonic()
    for i in range(n):
        conn.request("POST", path, body, headers)
        r = conn.getresponse()
        answer = r.read()
        if r.status != t.expect_status or (
                t.expect_provider and r.getheader("x-llm-provider") != t.expect_provider) or (
                t.expect_body and t.expect_body not in answer):
            raise SystemExit(f"native_profile: {t.key}: request {i}: {r.status} "
                             f"{r.getheader('x-llm-provider')!r} {answer[:200]!r}")
    conn.close()
    return time.monotonic() - start


def dump_total(path):
    for line in path.read_text(errors="replace").splitlines():
        m = re.match(r"(?:summary|totals): (\d+)", line)
        if m:
            return int(m.group(1))
    raise SystemExit(f"native_profile: no total in {path}")


def profile(path):
    """A callgrind dump read whole: self cost per object and per function, and the calls
    between functions with their inclusive cost."""
    names = {}
    selfc, per_fn = {}, {}
    edges = {}  # (caller, callee) -> [calls, inclusive]
    ob = fn = cfn = calls = None

    def name(kind, rest):
        m = re.match(r"\((\d+)\)(?: (.*))?", rest)
        if not m:
            return rest
        if m.group(2) is not None:
            names[(kind, m.group(1))] = m.group(2)
        return names.get((kind, m.group(1)), "?")
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            key, _, rest = line.partition("=")
            if key in ("ob", "cob"):
                v = name("ob", rest)
                ob = v if key == "ob" else ob
            elif key in ("fn", "cfn"):
                v = name("fn", rest)
                if key == "fn":
                    fn = (ob, v)
                else:
                    cfn = v
            elif key in ("fl", "fi", "fe", "cfi", "cfl"):
                name("fl", rest)
            elif key == "calls":
                calls = int(rest.split()[0])
            elif (line[:1].isdigit() or line[:1] in "+-*") and len(line.split()) > 1:
                cost = int(line.split()[1])
                if calls is not None:
                    e = edges.setdefault((fn, cfn), [0, 0])
                    e[0] += calls
                    e[1] += cost
                    calls = None
                else:
                    selfc[ob] = selfc.get(ob, 0) + cost
                    per_fn[fn] = per_fn.get(fn, 0) + cost
    return selfc, per_fn, edges


def annotate(path, n):
    """Per object; the module's hooks and Envoy's callbacks (inclusive); the module's own
    functions (self): per request."""
    selfc, per_fn, edges = profile(path)
    hooks, callbacks = {}, {}
    for ((ob, caller), callee), (calls, incl) in edges.items():
        if callee.startswith("envoy_dynamic_module_on_") and "_bin/envoy" in (ob or ""):
            h = hooks.setdefault(callee, [0, 0])
        elif callee.startswith("envoy_dynamic_module_callback_"):
            h = callbacks.setdefault(callee, [0, 0])
        else:
            continue
        h[0] += calls
        h[1] += incl
    lines = ["per object (self):"]
    for ob, c in sorted(selfc.items(), key=lambda x: -x[1])[:8]:
        lines.append(f"  {c / n:10,.0f}  {ob}")
    for title, table in (("the module's hooks, inclusive", hooks),
                         ("Envoy's callbacks from the module, inclusive", callbacks)):
        lines.append(f"{title} (calls per request, instructions per request):")
        for f, (calls, incl) in sorted(table.items(), key=lambda x: -x[1][1]):
            lines.append(f"  {incl / n:10,.0f}  {calls / n:5.2f}x  {f}")
    lines.append("the module's own functions, self (top 30):")
    own = [(c, f) for (ob, f), c in per_fn.items() if ob and "llm_failover" in ob]
    for c, f in sorted(own, reverse=True)[:30]:
        lines.append(f"  {c / n:10,.0f}  {f[:120]}")
    return "\n".join(lines)


def run(key, body_files, args, index):
    t = B.TARGETS[key]()
    if t.runtime == "native" and key != "native_noop":
        t.module = Path(args.native).resolve()
    elif key != "native_noop":
        t.module = B.MODULE
    t.port, t.admin = B.PORT_BASE + 10 + 2 * index, B.PORT_BASE + 11 + 2 * index
    cfg = B.render(t.primary, t.secondary, t.port, t.admin, t.module, t.api, t.runtime)
    if t.transform:
        t.transform(cfg)
    path = B.RUN / f"envoy-{key}.yaml"
    path.write_text(B.yaml.safe_dump(cfg, sort_keys=False))
    out = B.RUN / f"callgrind-{key}.out"
    vg = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
          "--dump-line=no"]
    if t.runtime != "native" and key != "plain" and "noop" not in key:
        vg.append("--smc-check=all-non-file")  # V8 writes the code it runs
    t.proc = B.start(f"envoy-{key}", vg + [args.envoy, "-c", str(path), "--concurrency", "1",
                                          "-l", "warning", "--disable-hot-restart",
                                          "--log-path", str(B.RUN / f"envoy-{key}.err")])
    t.pids = [t.proc.pid]
    try:
        def up():
            if t.proc.poll() is not None:
                raise SystemExit(f"native_profile: envoy {key} exited; see {B.RUN}/envoy-{key}.*")
            return B.http("GET", f"http://127.0.0.1:{t.admin}/ready")[0] == 200
        B.wait_for(f"envoy {key} under valgrind", up, 600)
        body = body_files[args.body + B.REQUESTS[t.request][1]].read_bytes()
        send(t, body, args.warmup, 120)
        callgrind(t.proc.pid, "--instr=on")
        # Each dump zeroes the counts after writing them (callgrind_control --zero left some
        # threads' counts in place here).
        callgrind(t.proc.pid, "--dump=before")
        if args.idle:
            time.sleep(args.idle)
            callgrind(t.proc.pid, "--dump=idle")
        took = send(t, body, args.requests, 120)
        callgrind(t.proc.pid, "--dump=load")
    finally:
        t.proc.terminate()
        try:
            t.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            t.proc.kill()
    dumps = sorted(B.RUN.glob(f"callgrind-{key}.out*"))
    def trigger(d, what):
        return f"Trigger: dump {what}\n" in d.read_text(errors="replace")[:4000]
    load = [d for d in dumps if trigger(d, "load")]
    idle = [d for d in dumps if trigger(d, "idle")]
    res = {"key": key, "label": t.label, "per_request": dump_total(load[0]) / args.requests,
           "seconds": took, "dump": load[0]}
    if idle:
        res["idle_per_s"] = dump_total(idle[0]) / args.idle
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="plain,native,success")
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--body", default="1KB", choices=["1KB", "50KB"])
    ap.add_argument("--idle", type=float, default=0, help="also count N seconds with no load")
    ap.add_argument("--annotate", action="store_true")
    ap.add_argument("--native", default=str(B.NATIVE_MODULE))
    ap.add_argument("--module", default=str(B.MODULE))
    ap.add_argument("--envoy", default=str(B.ROOT / ".venv" / "bin" / "envoy"))
    ap.add_argument("--cli", default=str(B.CLI))
    args = ap.parse_args()
    # valgrind runs the ELF itself, not the Python launcher in .venv/bin.
    if Path(args.envoy).read_bytes()[:2] == b"#!":
        import glob
        venv = Path(args.envoy).absolute().parent.parent
        found = glob.glob(str(venv / "lib" / "python*" / "site-packages" / "envoy" / "_bin" / "envoy"))
        if not found:
            raise SystemExit(f"native_profile: {args.envoy} is a script; pass the binary")
        args.envoy = found[0]
    B.RUN = B.WORK / "native_profile"
    if B.RUN.exists():
        B.shutil.rmtree(B.RUN)
    B.RUN.mkdir(parents=True)
    B.MODULE = B.RUN / "llm_failover.wasm"
    B.shutil.copyfile(args.module, B.MODULE)
    args.native_copy = B.RUN / "libllm_failover.so"
    B.shutil.copyfile(args.native, args.native_copy)
    args.native = str(args.native_copy)
    B.CLI = Path(args.cli).resolve()
    B.atexit.register(B.stop_all)
    keys = args.only.split(",")
    unknown = [k for k in keys if k not in B.TARGETS]
    if unknown:
        raise SystemExit(f"native_profile: unknown configuration(s) {unknown}")
    if "native_noop" in keys:
        build_noop()
    body_files = B.make_body_files()
    B.start_nginx(None)
    results = []
    for i, key in enumerate(keys):
        B.log(f"{key}: Envoy under callgrind, {args.warmup} + {args.requests} requests")
        results.append(run(key, body_files, args, i))
    base = next((r["per_request"] for r in results if r["key"] == "plain"), None)
    print(f"\nInstructions per request, the whole Envoy process (callgrind, --concurrency 1, "
          f"{args.body} body, {args.requests} requests on one connection)\n")
    print("| configuration | instructions/request | over plain | vs plain |\n|---|---:|---:|---:|")
    for r in results:
        over = f"{r['per_request'] - base:+,.0f}" if base else "-"
        ratio = f"{r['per_request'] / base:.2f}x" if base else "-"
        print(f"| {r['label']} | {r['per_request']:,.0f} | {over} | {ratio} |")
    for r in results:
        if "idle_per_s" in r:
            print(f"\n{r['key']}: {r['idle_per_s']:,.0f} instructions per second idle")
    if args.annotate:
        for r in results:
            print(f"\n### {r['key']}: instructions per request\n")
            print(annotate(r["dump"], args.requests))
    print(f"\n(callgrind outputs in {B.RUN})")


if __name__ == "__main__":
    main()
