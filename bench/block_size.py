#!/usr/bin/env python3
"""Alternatives: the manifest block size (ZARRGATE_BLOCK_CHUNKS) and PostgreSQL TOAST compression of
`blocks.data`, measured on the 10,000,000-reference store (SIZE, default 1e7). The cold reads use the default
connection (TLS, as sqlx negotiates with Debian's PostgreSQL) and, interleaved, VARIANTS (default
"plain": sslmode=disable), see bench/cold_read.py.

For each block size in BLOCKS (1024, 4096, 16384, 65536) and each storage in STORAGES:
  compressed `alter table blocks alter column data set storage extended` before registering: TOAST
             may compress with pglz (the server's default_toast_compression) and moves large values
             out of line (PostgreSQL's default for bytea, and the migrations' before 0002)
  external   the migrations' column as it is since 0002: out of line, never compressed
a fresh database, registration (PUT time), the stored size (encoded bytes, bytes after TOAST, the
blocks and tiles tables on disk), then cold reads with the block cache off, as bench/cold_read.py
measures them (wrk, 1 connection, RUNS (3) x SECONDS (10), random chunks): p50/p90/p99, and the
mean time of the catalog's block query (zarrgate_catalog_query_duration_seconds{operation="block"})
next to the mean request time, whose difference is decoding the block and reading the chunk.

  python3 bench/block_size.py
  BLOCKS=4096,65536 STORAGES=external SIZE=1e6 python3 bench/block_size.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
from cold_read import block_stats, lat, measure_cache_off, register, store_layout  # noqa: E402

ALTER = {"compressed": "alter table blocks alter column data set storage extended", "external": None}


def main():
    size = os.environ.get("SIZE", "1e7")
    blocks = [int(b) for b in os.environ.get("BLOCKS", "1024,4096,16384,65536").split(",")]
    storages = os.environ.get("STORAGES", "compressed,external").split(",")
    runs = h.runs(3)
    variants = ["tls"] + [v for v in os.environ.get("VARIANTS", "plain").split(",") if v]
    seconds = h.env_int("SECONDS", 10)
    bench = h.Bench()
    quiet = h.Quiet()
    results = []
    try:
        bench.generate([size])
        meta = bench.meta(size)
        quiet.wait("block sizes")
        for storage in storages:
            for chunks in blocks:
                env = {"ZARRGATE_BLOCK_CHUNKS": str(chunks)}
                label = f"{size} blocks of {chunks} {storage}"
                grid, tile, tiles = store_layout(meta, chunks)
                with h.Postgres(f"blocks_{chunks}_{storage}") as db:
                    quiet.wait_idle(label)
                    reg = register(bench, db.url, size, env=env, alter=ALTER[storage])
                    stats = block_stats(db)
                    h.log(f"{label}: registered in {reg['seconds']:.2f} s, {stats['rows']} blocks, "
                          f"{stats['stored_bytes'] / h.MIB:.0f} MiB stored")
                    measured = measure_cache_off(bench, quiet, db.url, meta, runs, seconds, label, env=env,
                                                 variants=variants)
                results.append({"size": size, "refs": meta["refs"], "block_chunks": chunks, "storage": storage,
                                "tile": tile, "tiles": tiles, "register": reg, "blocks": stats,
                                "cache_off": measured.pop("tls"), "variants": measured})
        bench.publish("block_size", results, render, seconds=seconds)
    finally:
        bench.cleanup()


def render(data):
    rows = []
    for r in data["results"]:
        off, b = r["cache_off"], r["blocks"]
        rows.append([
            f"{r['block_chunks']:,}", r["storage"], f"{'x'.join(map(str, r['tile']))} ({b['rows']:,})",
            h.fmt(r["register"]["seconds"]), h.fmt(b["raw_bytes"] / h.MIB, 0), h.fmt(b["stored_bytes"] / h.MIB, 0),
            h.fmt((b["blocks_relation_bytes"] + b["tiles_relation_bytes"]) / h.MIB, 0),
            h.fmt_spread(lat(off, "p50")), h.fmt_spread(lat(off, "p90")), h.fmt_spread(lat(off, "p99")),
            h.fmt(h.median([x["latency_us"]["mean"] / 1000 for x in off])),
            h.fmt(h.median([x["catalog_block_mean_ms"] for x in off])),
            h.fmt(h.median([x["rps"] for x in off]), 0),
        ] + [h.fmt_spread(lat(v, p)) for v in r.get("variants", {}).values() for p in ("p50", "p99")])
    out = h.table(["block chunks", "TOAST", "tile (blocks)", "PUT s", "encoded MiB", "stored MiB",
                   "blocks+tiles on disk MiB", "cold p50 ms", "p90 ms", "p99 ms", "mean ms", "block query mean ms",
                   "reads/s (1 conn)"] + [f"{v} {p} ms" for v in data["results"][0].get("variants", {})
                                          for p in ("p50", "p99")], rows)
    best = min(data["results"], key=lambda r: h.median(lat(r["cache_off"], "p50")))
    return (out + f"\n\nLowest cold p50: {best['block_chunks']:,} chunks per block, TOAST {best['storage']} "
            f"({h.median(lat(best['cache_off'], 'p50')):.2f} ms).")


if __name__ == "__main__":
    main()
