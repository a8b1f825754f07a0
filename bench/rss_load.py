#!/usr/bin/env python3
"""Server memory under a random-read load over a 10,000,000-reference store.

The store (native-1e7.json, SIZE) is registered once in a fresh PostgreSQL database. Then, for
each block cache size in CACHES (default 64 MiB, smaller than the store's 160 MB of blocks, and
512 MiB, the default, larger than it), RUNS (3) times on a fresh server: wrk -t2 -c32 for SECONDS
(60) of random chunk reads, VmRSS sampled every 0.5 s; reported: idle RSS, the largest sampled
RSS, VmHWM, the block cache's size and hit ratio, and the target: RSS <= cache size + 150 MB.
A last variant ("after ingest") registers the store through the same process first (with the
smallest cache), then runs the same load: what a single replica that ingests and serves looks like.

  python3 bench/rss_load.py
  CACHES=67108864 SECONDS=30 python3 bench/rss_load.py
"""

import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
from cold_read import STORE, register  # noqa: E402

SLACK_MB = 150


def load(bench, server, meta, seconds, after_ingest=False):
    status, _, _ = server.get(f"/{STORE}/zarr.json")
    assert status == 200
    time.sleep(0.5)
    idle = server.rss_kib()
    hwm0 = server.hwm_kib()
    samples = []
    stop = threading.Event()

    def sample():
        while not stop.wait(0.5):
            samples.append(server.rss_kib())
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        res = h.wrk(server.base, "zarr", [f"/{STORE}/var", *meta["grid"]], connections=32, threads=2,
                    seconds=seconds)
    finally:
        stop.set()
        t.join()
    h.check_wrk(res, "rss load")
    hits, misses, size, entries = server.cache()
    res.update({"idle_rss_mib": idle / 1024, "max_rss_mib": max(samples) / 1024, "hwm_mib": server.hwm_kib() / 1024,
                "hwm_before_mib": hwm0 / 1024, "last_rss_mib": samples[-1] / 1024, "cache_weight_mib": size / h.MIB,
                "cache_entries": entries, "hit_ratio": hits / max(hits + misses, 1),
                "rss_series_mib": [round(s / 1024) for s in samples[:: max(1, len(samples) // 60)]]})
    return res


def main():
    size = os.environ.get("SIZE", "1e7")
    caches = [int(c) for c in os.environ.get("CACHES", f"{64 * h.MIB},{512 * h.MIB}").split(",")]
    runs = h.runs(3)
    seconds = h.env_int("SECONDS", 60)
    bench = h.Bench()
    quiet = h.Quiet()
    results = []
    try:
        bench.generate([size])
        meta = bench.meta(size)
        quiet.wait("rss under load")
        with h.Postgres("rss_load") as db:
            register(bench, db.url, size)
            for cache in caches:
                env = {"ZARRGATE_CACHE_BLOCKS_BYTES": str(cache)}
                for r in range(runs):
                    what = f"rss load cache {cache // h.MIB} MiB run {r + 1}/{runs}"

                    def run():
                        with h.Server(bench, db.url, env=env) as server:
                            return load(bench, server, meta, seconds)
                    res = h.repeat_quietly(quiet, what, run)
                    res.update({"cache_bytes": cache, "variant": "fresh server"})
                    h.log(f"{what}: max RSS {res['max_rss_mib']:.0f} MiB, {res['rps']:,.0f} req/s, "
                          f"hits {res['hit_ratio']:.0%}")
                    results.append(res)
            # The same process registers the store, then serves it.
            cache = min(caches)
            env = {"ZARRGATE_CACHE_BLOCKS_BYTES": str(cache)}
            with h.Postgres("rss_load_ingest") as db2:
                for r in range(runs):
                    what = f"rss load after ingest, cache {cache // h.MIB} MiB run {r + 1}/{runs}"

                    def run():
                        with h.Server(bench, db2.url, env=env) as server:
                            server.object_store(bench.data)
                            server.register(f"{STORE}", bench.manifest(size))
                            return load(bench, server, meta, seconds, after_ingest=True)
                    res = h.repeat_quietly(quiet, what, run)
                    res.update({"cache_bytes": cache, "variant": "after ingest"})
                    h.log(f"{what}: max RSS {res['max_rss_mib']:.0f} MiB (idle {res['idle_rss_mib']:.0f})")
                    results.append(res)
        bench.publish("rss_load", results, render, seconds=seconds, size=size)
    finally:
        bench.cleanup()


def render(data):
    rows, verdicts = [], []
    groups = {}
    for r in data["results"]:
        groups.setdefault((r["variant"], r["cache_bytes"]), []).append(r)
    for (variant, cache), rs in groups.items():
        col = lambda k: [r[k] for r in rs]  # noqa: E731
        limit = cache / h.MIB + SLACK_MB * 1e6 / h.MIB
        peak = h.median(col("max_rss_mib"))
        rows.append([variant, h.fmt(cache / h.MIB, 0), len(rs), h.fmt(h.median(col("idle_rss_mib")), 0),
                     h.fmt_spread(col("max_rss_mib"), 0), h.fmt(h.median(col("hwm_mib")), 0), h.fmt(limit, 0),
                     h.fmt(h.median(col("cache_weight_mib")), 0), f"{h.median(col('hit_ratio')):.0%}",
                     h.fmt_spread(col("rps"), 0), h.fmt(h.median([r["latency_us"]["p99"] / 1000 for r in rs]), 1)])
        verdicts.append(f"- {variant}, cache {cache / h.MIB:.0f} MiB: peak RSS {peak:.0f} MiB vs <= {limit:.0f} MiB "
                        f"(cache + {SLACK_MB} MB): " + ("met" if peak <= limit else f"missed by {peak - limit:.0f} MiB"))
    out = h.table(["variant", "cache MiB", "runs", "idle RSS MiB", "max RSS MiB", "VmHWM MiB", "limit MiB",
                   "cache weight MiB", "block hits", "req/s", "p99 ms"], rows)
    return f"{data['size']} references, wrk -t2 -c32 -d{data['seconds']}s random chunks\n\n" + out + "\n\n" + "\n".join(verdicts)


if __name__ == "__main__":
    main()
