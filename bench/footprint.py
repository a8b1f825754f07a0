#!/usr/bin/env python3
"""Cached manifest footprint: bytes of memory per virtual reference once every block is cached.

Two layouts: `native-<size>.json` (SIZES, default 1e6,1e7: chunks one after another in 8 source
files) and `files-<size>.json` (FILE_SIZES, default 1e6: every chunk the one chunk of its own daily
file, with a declared S3-style MD5 ETag; registered with ?verify=false, and its blocks loaded with
HEAD, which never reads a source, so the million files need not exist).

For each store, a fresh PostgreSQL database holds it; then
RUNS (3) times, on a fresh server with the default block cache (512 MiB, or FOOTPRINT_CACHE_BYTES):
GET zarr.json, wait, note the RSS ("idle"); read one chunk in every tile of array `var` (so every
block is loaded once); let the cache settle; note zarrgate_cache_bytes{cache="blocks"} (the cache's
weight: what the server believes the blocks cost), zarrgate_cache_entries{cache="blocks"} and the
RSS again. Reported per virtual reference:
  weight B/ref     cache weight / references
  RSS B/ref        (RSS after - idle RSS) / references: what the process really grew by, allocator
                   overhead and transient buffers included
  stored B/ref     encoded block bytes in the database / references (before TOAST compression)

  python3 bench/footprint.py
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
from cold_read import STORE, register, settle, store_layout  # noqa: E402

TARGET = 24


def one(bench, url, meta, env):
    grid, tile, tiles = store_layout(meta, h.env_int("ZARRGATE_BLOCK_CHUNKS", 1024))
    keys = list(h.tile_keys(grid, tile))
    method = "HEAD" if meta.get("one_file_per_chunk") else "GET"
    with h.Server(bench, url, env=env) as server:
        status, _, _ = server.get(f"/{STORE}/zarr.json")
        assert status == 200
        time.sleep(1)
        idle = server.rss_kib()
        started = time.time()
        for key in keys:
            status, _, _ = server.request(method, f"/{STORE}/var/{key}")
            assert status == 200, (key, status)
        load_seconds = time.time() - started
        for _ in range(200):  # cache housekeeping runs on later operations
            server.request(method, f"/{STORE}/var/{keys[0]}")
        time.sleep(1)
        server.request(method, f"/{STORE}/var/{keys[0]}")
        hits, misses, weight, entries = server.cache()
        after = server.rss_kib()
        refs = meta["refs"]
        return {"tiles": len(keys), "entries": entries, "misses": misses, "weight": weight,
                "idle_rss_mib": idle / 1024, "rss_mib": after / 1024, "weight_per_ref": weight / refs,
                "rss_per_ref": (after - idle) * 1024 / refs, "load_seconds": load_seconds}


def main():
    sizes = [s for s in os.environ.get("SIZES", "1e6,1e7").split(",") if s]
    file_sizes = [s for s in os.environ.get("FILE_SIZES", "1e6").split(",") if s]
    runs = h.runs(3)
    env = {}
    if os.environ.get("FOOTPRINT_CACHE_BYTES"):
        env["ZARRGATE_CACHE_BLOCKS_BYTES"] = os.environ["FOOTPRINT_CACHE_BYTES"]
    bench = h.Bench()
    quiet = h.Quiet()
    results = []
    try:
        bench.generate(sizes, per_file_sizes=file_sizes)
        quiet.wait("footprint")
        for kind, size in [("native", s) for s in sizes] + [("files", s) for s in file_sizes]:
            meta = bench.meta(size, kind)
            with h.Postgres(f"footprint_{kind}_{size}") as db:
                if kind == "native":
                    register(bench, db.url, size)
                else:
                    with h.Server(bench, db.url) as server:
                        server.object_store(bench.data)
                        server.register(STORE, bench.manifest(size, kind), "?verify=false")
                    settle(db.url)
                stored = db.query("select coalesce(sum(octet_length(b.data)), 0) from tiles t "
                                  "join blocks b on b.id = t.block_id where t.node = 'var'")[0][0]
                for r in range(runs):
                    what = f"footprint {kind} {size} run {r + 1}/{runs}"
                    res = h.repeat_quietly(quiet, what, lambda: one(bench, db.url, meta, env))
                    res.update({"size": size, "layout": kind, "refs": meta["refs"],
                                "stored_per_ref": int(stored) / meta["refs"]})
                    h.log(f"{what}: weight {res['weight_per_ref']:.1f} B/ref, RSS {res['rss_per_ref']:.1f} B/ref")
                    results.append(res)
        bench.publish("footprint", results, render)
    finally:
        bench.cleanup()


def render(data):
    rows, verdicts = [], []
    groups = {}
    names = {"native": "8 files", "files": "a file per chunk"}
    for r in data["results"]:
        groups.setdefault((r.get("layout", "native"), r["size"]), []).append(r)
    for (layout, size), rs in groups.items():
        col = lambda k: [r[k] for r in rs]  # noqa: E731
        rows.append([names.get(layout, layout), f"{rs[0]['refs']:,}", len(rs), f"{rs[0]['tiles']:,} / {h.median(col('entries')):,.0f}",
                     h.fmt(h.median(col("weight")) / h.MIB, 1), h.fmt_spread(col("weight_per_ref"), 1),
                     h.fmt(h.median(col("idle_rss_mib")), 0), h.fmt(h.median(col("rss_mib")), 0),
                     h.fmt_spread(col("rss_per_ref"), 1), h.fmt(rs[0]["stored_per_ref"], 1)])
        w, rss = h.median(col("weight_per_ref")), h.median(col("rss_per_ref"))
        v = lambda x: "met" if x <= TARGET else f"missed by {x / TARGET:.2f}x"  # noqa: E731
        verdicts.append(f"- {rs[0]['refs']:,} references, {names.get(layout, layout)}: cache weight {w:.1f} B/ref ({v(w)}), "
                        f"RSS growth {rss:.1f} B/ref ({v(rss)}) vs <= {TARGET} B/ref")
    out = h.table(["sources", "references", "runs", "tiles / cached blocks", "cache weight MiB", "weight B/ref",
                   "idle RSS MiB", "RSS after MiB", "RSS growth B/ref", "stored B/ref"], rows)
    return out + "\n\n" + "\n".join(verdicts)


if __name__ == "__main__":
    main()
