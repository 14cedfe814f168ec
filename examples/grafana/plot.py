#!/usr/bin/env python3
"""Draws the panels of the Grafana dashboard (llm-failover.json, next to this file) from
Prometheus-format samples, without Grafana: what docs/dashboard.png shows.

    scripts/soak.sh --seconds 90 --scrape /tmp/scrape.jsonl
    python examples/grafana/plot.py /tmp/scrape.jsonl --out docs/dashboard.png

The samples are JSON lines {"t": seconds, "text": Prometheus text} (soak.py --scrape writes
them, one a second). Each panel's queries are evaluated as PromQL would for the forms the
dashboard uses: `sum by (labels) (rate(metric{selector}[window]))`, a quotient of two of those,
and `max by (labels) (gauge{selector})`; `$provider` is every provider and the rate windows
are --window seconds (a short run cannot fill 5 minutes). Needs matplotlib (PyPI)."""
from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLE = re.compile(r"^(llm_failover_\w+)(?:\{(.*)\})?\s+(\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
MATCHER = re.compile(r'(\w+)\s*(=~|!=|=)\s*"([^"]*)"')
SUM_RATE = re.compile(r"sum by \(([^)]*)\) \(rate\((\w+)(\{[^}]*\})?\[([^\]]+)\]\)\)")
MAX_BY = re.compile(r"max by \(([^)]*)\) \((\w+)(\{[^}]*\})?\)")


def load(path):
    """[(t, {metric: [(labels, value)]})]"""
    out = []
    for line in Path(path).read_text().splitlines():
        rec = json.loads(line)
        fams = defaultdict(list)
        for row in rec["text"].splitlines():
            m = SAMPLE.match(row)
            if m:
                fams[m.group(1)].append((dict(LABEL.findall(m.group(2) or "")), float(m.group(3))))
        out.append((rec["t"], fams))
    return out


def selected(labels, selector):
    for name, op, value in MATCHER.findall(selector or ""):
        have = labels.get(name, "")
        if op == "=" and have != value or op == "!=" and have == value:
            return False
        if op == "=~" and not re.fullmatch(value, have):
            return False
    return True


def series(samples, metric, selector):
    """{labels tuple: [(t, value)]} for one metric."""
    out = defaultdict(list)
    for t, fams in samples:
        for labels, value in fams.get(metric, []):
            if selected(labels, selector):
                out[tuple(sorted(labels.items()))].append((t, value))
    return out


def sum_rate(samples, by, metric, selector, window):
    """{group: [(t, per second)]}: rate of each counter over `window`, summed by `by`."""
    keys = [k.strip() for k in by.split(",")]
    groups = defaultdict(lambda: defaultdict(float))
    times = [t for t, _ in samples]
    for labels, points in series(samples, metric, selector).items():
        d = dict(labels)
        group = tuple(d.get(k, "") for k in keys)
        values = dict(points)
        for t in times:
            if t < times[0] + window:
                continue
            past = max((u for u in times if u <= t - window), default=None)
            now = values.get(t)
            if now is None:
                continue
            before = values.get(past, 0.0) if past is not None else 0.0
            groups[group][t] += max(now - before, 0.0) / window
    return {g: sorted(v.items()) for g, v in groups.items()}


def max_by(samples, by, metric, selector):
    keys = [k.strip() for k in by.split(",")]
    groups = defaultdict(dict)
    for labels, points in series(samples, metric, selector).items():
        d = dict(labels)
        group = tuple(d.get(k, "") for k in keys)
        for t, v in points:
            groups[group][t] = max(v, groups[group].get(t, v))
    return {g: sorted(v.items()) for g, v in groups.items()}


def evaluate(expr, samples, window):
    expr = expr.replace('"$provider"', '".*"')
    rates = [(m, sum_rate(samples, m.group(1), m.group(2), m.group(3), window))
             for m in SUM_RATE.finditer(expr)]
    if len(rates) == 2 and "/" in expr[rates[0][0].end():rates[1][0].start()]:
        num, den = rates[0][1], rates[1][1]
        out = {}
        for g, points in den.items():
            n = dict(num.get(g, []))
            out[g] = [(t, n.get(t, 0.0) / v) for t, v in points if v > 0]
        return out
    if len(rates) == 1:
        return rates[0][1]
    m = MAX_BY.search(expr)
    if m:
        return max_by(samples, m.group(1), m.group(2), m.group(3))
    raise SystemExit(f"plot.py does not evaluate this query: {expr}")


def legend(fmt, group, by):
    keys = [k.strip() for k in by.split(",")]
    d = dict(zip(keys, group))
    return re.sub(r"\{\{(\w+)\}\}", lambda m: d.get(m.group(1), ""), fmt) or ",".join(group)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("samples")
    ap.add_argument("--out", default="dashboard.png")
    ap.add_argument("--window", type=float, default=10.0, help="rate window, seconds")
    ap.add_argument("--title", default="llm-failover dashboard over a soak run")
    args = ap.parse_args(argv)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    dashboard = json.loads((HERE / "llm-failover.json").read_text())
    samples = load(args.samples)
    plt.style.use("dark_background")
    fig = plt.figure(figsize=(16, 14), facecolor="#111217")
    fig.suptitle(args.title, color="#d8d9da", fontsize=15, x=0.01, ha="left")
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    grid = fig.add_gridspec(rows, 24, hspace=1.6, wspace=0.8, left=0.04, right=0.99,
                            top=0.94, bottom=0.04)
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        ax = fig.add_subplot(grid[g["y"] + 1:g["y"] + g["h"], g["x"]:g["x"] + g["w"]])
        ax.set_facecolor("#181b1f")
        ax.set_title(panel["title"], loc="left", color="#d8d9da", fontsize=11)
        ax.tick_params(colors="#9fa7b3", labelsize=8)
        ax.set_xlabel("seconds", color="#9fa7b3", fontsize=8)
        if panel["type"] == "state-timeline":
            mapping = panel["fieldConfig"]["defaults"]["mappings"][0]["options"]
            [target] = panel["targets"]
            m = MAX_BY.search(target["expr"])
            result = evaluate(target["expr"], samples, args.window)
            names = sorted(result)
            for row, group in enumerate(names):
                points = result[group]
                for (t, v), nxt in zip(points, points[1:] + [(points[-1][0] + 1, None)]):
                    spec = mapping.get(str(int(v)), {"color": "grey"})
                    ax.broken_barh([(t, nxt[0] - t)], (row - 0.4, 0.8), color=spec["color"])
            ax.set_yticks(range(len(names)),
                          [legend(target["legendFormat"], g, m.group(1)) for g in names])
            ax.legend(handles=[Patch(color=s["color"], label=s["text"]) for s in mapping.values()],
                      loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=4, fontsize=8,
                      frameon=False)
            continue
        percent = panel["fieldConfig"]["defaults"].get("unit") == "percentunit"
        for target in panel["targets"]:
            by = re.search(r"by \(([^)]*)\)", target["expr"]).group(1)
            result = evaluate(target["expr"], samples, args.window)
            for group in sorted(result):
                points = result[group]
                if not points:
                    continue
                ts, vs = zip(*points)
                if percent:
                    vs = [v * 100 for v in vs]
                ax.plot(ts, vs, linewidth=1.2, label=legend(target["legendFormat"], group, by))
        ax.set_ylabel("% of attempts" if percent else "per second", color="#9fa7b3", fontsize=8)
        ax.grid(color="#2c3235", linewidth=0.5)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", ncol=4, fontsize=7, framealpha=0.7,
                      facecolor="#181b1f", edgecolor="#2c3235")
            ax.set_ylim(top=ax.get_ylim()[1] * 1.35)  # room for the legend
    fig.savefig(args.out, dpi=80, facecolor=fig.get_facecolor())
    print(f"wrote {args.out} ({len(samples)} samples)")


if __name__ == "__main__":
    main()
