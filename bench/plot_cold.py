#!/usr/bin/env python3
"""Plots bench/results/cold_read.json (bench/cold_read.py): cold-read latency percentiles against
store size, into bench/cold_read_latency.png. Needs matplotlib (bench/python-env.sh):

  "$(bench/python-env.sh | tail -1)/bin/python" bench/plot_cold.py
"""

import json
import os
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

BENCH = os.path.dirname(os.path.abspath(__file__))


def percentile(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def main():
    with open(os.path.join(BENCH, "results", "cold_read.json")) as f:
        data = json.load(f)
    results = sorted(data["results"], key=lambda r: r["refs"])
    refs = [r["refs"] for r in results]
    fig, ax = plt.subplots(figsize=(8, 6.2), dpi=120)
    colors = {"p50": "tab:blue", "p90": "tab:orange", "p99": "tab:red"}
    for p, color in colors.items():
        runs = [[x["latency_us"][p] / 1000 for x in r["cache_off"]] for r in results]
        med = [statistics.median(v) for v in runs]
        lo = [m - min(v) for m, v in zip(med, runs)]
        hi = [max(v) - m for m, v in zip(med, runs)]
        ax.errorbar(refs, med, yerr=[lo, hi], marker="o", color=color, capsize=3,
                    label=f"{p}, block cache off (median of {len(runs[0])} runs, min-max)")
        fresh = [percentile([t for b in r["fresh"] for t in b["chunk_ms"]], float(p[1:])) for r in results]
        ax.plot(refs, fresh, marker="s", linestyle="--", color=color, alpha=0.6, label=f"{p}, fresh server per batch")
    warm = [statistics.median([x["latency_us"]["p50"] / 1000 for x in r["warm"]]) for r in results]
    ax.plot(refs, warm, marker="^", linestyle=":", color="tab:green", label="p50, warm (block cached)")
    ax.axhline(5, color="tab:blue", linewidth=0.8, linestyle="-.", alpha=0.5)
    ax.axhline(20, color="tab:red", linewidth=0.8, linestyle="-.", alpha=0.5)
    ax.text(refs[0], 5 * 1.08, "target p50 5 ms", color="tab:blue", fontsize=8)
    ax.text(refs[0], 20 * 1.08, "target p99 20 ms", color="tab:red", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("virtual references in the store")
    ax.set_ylabel("latency of one chunk GET (ms)")
    ax.set_title(f"zarrgate cold chunk reads, local PostgreSQL ({data['machine']['cores']} cores, "
                 f"{data['machine']['date'][:10]}, {data['commit']})", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
    fig.tight_layout()
    out = os.path.join(BENCH, "cold_read_latency.png")
    fig.savefig(out)
    print(out)


if __name__ == "__main__":
    main()
