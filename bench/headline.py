#!/usr/bin/env python3
"""BENCHMARKS.md's opening table, written from the last benchmark run's numbers.

    scripts/bench.sh --no-build --no-experiments     # the run (about 8 min on 2 cores)
    python3 bench/headline.py --write                # the table, between BENCHMARKS.md's markers

It reads .work/bench/results.json (written by bench/bench.py at the end of every run), so the
table always says which commit, module and machine its figures come from. Each row names the
configuration bench.py measured for it; a row whose configuration the run did not measure says
so instead of showing an old figure.
"""
import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / ".work" / "bench" / "results.json"
DOC = ROOT / "BENCHMARKS.md"
START, END = "<!-- headline:start -->", "<!-- headline:end -->"

# (what, configuration measured, its base, body, connections)
ROWS = [
    ("success path, CPU per request", "success", "plain", "1KB", 32),
    ("success path, CPU per request", "success", "plain", "50KB", 32),
    ("success path, CPU per request", "success", "plain", "1KB", 1),
    ("success path, CPU per request", "success", "plain", "50KB", 1),
    ("failover (primary 503), HTTP/1.1 providers", "failover", "plain", "1KB", 32),
    ("failover (primary 503), HTTP/2 providers", "failover_h2", "plain_h2", "1KB", 32),
    ("translated request (Chat caller, Messages provider)", "xv_json", "success", "1KB", 32),
    ("translated stream (Chat caller, Messages provider)", "xv_sse", "sse", "1KB", 32),
]


def ratio(runs, key, base, body, conns):
    """Median of per-round CPU/request ratios (the two ran in the same rounds)."""
    a, b = runs.get(f"{key}|{body}|{conns}"), runs.get(f"{base}|{body}|{conns}")
    if not a or not b or len(a) != len(b):
        return None
    return statistics.median(x["cpu_us_per_req"] / y["cpu_us_per_req"]
                             for x, y in zip(a, b) if y["cpu_us_per_req"])


def table(res, commit):
    rows, runs = res["rows"], res["runs"]
    m = res["machine"]
    out = [f"Measured on commit `{commit}`, module {res['module_bytes']:,} bytes, "
           f"{m['nproc']} CPUs ({m['cpu']}), {res['rounds']} rounds x {res['duration']} s, "
           "medians; every row from one run of `scripts/bench.sh --no-build --no-experiments`, "
           "written here by `python3 bench/headline.py --write`.", "",
           "| what | body, connections | CPU per request | vs | p50 ms | p99 ms |",
           "|---|---|---:|---|---:|---:|"]
    for what, key, base, body, conns in ROWS:
        r = rows.get(f"{key}|{body}|{conns}")
        v = ratio(runs, key, base, body, conns)
        if r is None or v is None:
            out.append(f"| {what} | {body}, {conns} | not measured in this run | {base} | - | - |")
            continue
        out.append(f"| {what} | {body}, {conns} | {r['cpu_us_per_req']:.1f} µs, **{v:.2f}x** | "
                   f"{base} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} |")
    fb = res.get("first_byte_ms") or []
    if len(fb) >= 3:
        plain, held = fb[0]["p50"], fb[2]["p50"]
        out += ["", "| stream's first byte (1 connection) | p50 ms | over |", "|---|---:|---|",
                f"| {fb[2]['configuration']} | {held:.3f} | plain route {held - plain:+.3f} ms |"]
        out += [f"| {row['configuration']} | {row['p50']:.3f} | held same-API stream "
                f"{row['p50'] - held:+.3f} ms |" for row in fb[3:]]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="replace the table in BENCHMARKS.md")
    ap.add_argument("--results", default=str(RESULTS))
    args = ap.parse_args()
    try:
        res = json.loads(Path(args.results).read_text())
    except OSError:
        sys.exit(f"headline: no {args.results}: run scripts/bench.sh first")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "?"
    text = table(res, commit)
    if not args.write:
        print(text)
        return
    doc = DOC.read_text()
    if START not in doc or END not in doc:
        sys.exit(f"headline: BENCHMARKS.md has no {START} ... {END} block")
    head, rest = doc.split(START, 1)
    DOC.write_text(head + START + "\n" + text + "\n" + END + rest.split(END, 1)[1])
    print(f"headline: BENCHMARKS.md's table written from {args.results} (commit {commit})")


if __name__ == "__main__":
    main()
