#!/usr/bin/env python3
"""Cold chunk reads: latency of reading a random chunk whose manifest block is not in the cache,
for stores of 1e4 to 1e7 references in PostgreSQL (a fresh database per store size).

Two ways of being cold, both measured:
  cache off     the server runs with ZARRGATE_CACHE_BLOCKS_BYTES=0 (COLD_CACHE_BYTES), so every chunk
                read loads its block from PostgreSQL and decodes it: the steady state of a server
                whose cache never holds the block asked for. wrk, 1 connection, SECONDS (10) per run,
                random chunks, RUNS (5) runs each on a fresh server; the block cache's hit and miss
                counters confirm that (nearly) every read missed.
  fresh server  a new server per batch (BATCHES, 20) with the default cache: one GET of the store's
                zarr.json (loading the version and its metadata: "first request"), then K (20) chunk
                reads in K distinct random tiles (so each is a block miss) over one connection with
                curl. This adds what a server that has just started pays: prepared statements not yet
                cached on the pooled connection, new memory to fault in.
  warm          for reference, the same wrk run with the default cache after every block was read
                once: what a read costs when the block is cached.
  restarted     for the largest store, the fresh-server batches again (RESTART_BATCHES, 10), each
                after restarting PostgreSQL (pg_ctlcluster ... restart): its shared buffers are empty
                too, so every block comes from the operating system's page cache (RESTART_PG=0
                skips this; it restarts the machine's PostgreSQL, so nothing else may be using it).
The page cache is never emptied (/proc/sys/vm/drop_caches is not writable here).

  python3 bench/cold_read.py                  # 1e4,1e5,1e6,1e7; then python3 bench/plot_cold.py
  SIZES=1e6 RUNS=3 SECONDS=5 python3 bench/cold_read.py
PERF=1 records a perf profile of the server during one cache-off run on the largest store.
"""

import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

STORE = "s"
VARIANT_NAMES = {"plain": "no TLS", "nodelay": "TLS + TCP_NODELAY"}
TARGET_P50_MS, TARGET_P99_MS = 5.0, 20.0


def store_layout(meta, block_chunks):
    grid = meta["grid"]
    tile = h.default_tile(grid, block_chunks)
    tiles = 1
    for g, t in zip(grid, tile):
        tiles *= -(-g // t)
    return grid, tile, tiles


def register(bench, url, size, env=None, alter=None):
    """Registers native-<size>.json as store `s`; `alter` runs SQL after migration, before it."""
    with h.Server(bench, url, env=env) as server:
        if alter:
            subprocess.run(["psql", "-qAt", "-v", "ON_ERROR_STOP=1", url, "-c", alter], check=True,
                           capture_output=True)
        server.object_store(bench.data)
        status, seconds, answer = server.register(STORE, bench.manifest(size))
        write_seconds = server.registered_seconds()
        peak = server.hwm_kib() / 1024
    settle(url)
    return {"seconds": seconds, "write_seconds": write_seconds, "peak_rss_mib": peak, "answer": answer}


def settle(url):
    """After a registration: VACUUM ANALYZE and CHECKPOINT, so that autovacuum and the checkpointer
    do not work through the new rows during the measurements that follow."""
    subprocess.run(["psql", "-qAt", url, "-c", "vacuum analyze", "-c", "checkpoint"], check=True, capture_output=True)


def wrk_run(bench, url, meta, env, seconds, perf=None, warm_keys=None):
    """One wrk run (1 connection) of random chunk reads on a fresh server."""
    with h.Server(bench, url, env=env) as server:
        status, _, _ = server.get(f"/{STORE}/zarr.json")
        assert status == 200, status
        for key in warm_keys or ():
            status, _, _ = server.get(f"/{STORE}/var/{key}")
            assert status == 200, (key, status)
        server.get(f"/{STORE}/var/c/" + "/".join("0" for _ in meta["grid"]))
        hits0, misses0, _, _ = server.cache()
        stages0 = stage_sums(server)
        rec = None
        if perf:
            rec, data = h.perf_record(server.pid, seconds + 5, perf)
            time.sleep(0.3)
        res = h.wrk(server.base, "zarr", [f"/{STORE}/var", *meta["grid"]], connections=1, threads=1,
                    seconds=seconds)
        if rec:
            rec.wait()
            res["perf"] = h.perf_report(data, perf)
        h.check_wrk(res, "cold read")
        hits1, misses1, size, entries = server.cache()
        res["block_hits"], res["block_misses"] = hits1 - hits0, misses1 - misses0
        res["miss_fraction"] = res["block_misses"] / max(res["block_hits"] + res["block_misses"], 1)
        res["rss_mib"] = server.rss_kib() / 1024
        stages1 = stage_sums(server)
        for name in stages1:
            (s0, c0), (s1, c1) = stages0[name], stages1[name]
            res[f"{name}_mean_ms"] = (s1 - s0) / max(c1 - c0, 1) * 1000
        return res


def stage_sums(server):
    """(sum seconds, count) of the catalog block query, of upstream reads (to their first byte) and
    of data-plane requests (to the response head), from /metrics."""
    m = server.metrics()

    def get(name, **labels):
        want = frozenset(labels.items())
        return sum(v for (n, l), v in m.items() if n == name and want <= l)
    return {
        "catalog_block": (get("zarrgate_catalog_query_duration_seconds_sum", operation="block"),
                          get("zarrgate_catalog_query_duration_seconds_count", operation="block")),
        "upstream": (get("zarrgate_upstream_request_duration_seconds_sum"),
                     get("zarrgate_upstream_request_duration_seconds_count")),
        "http": (get("zarrgate_http_request_duration_seconds_sum", route="/{store}/{*key}"),
                 get("zarrgate_http_request_duration_seconds_count", route="/{store}/{*key}")),
    }


def fresh_batch(bench, url, meta, block_chunks, k, rng):
    """A new server: zarr.json, then k chunk reads in distinct random tiles; latencies in ms."""
    grid, tile, tiles = store_layout(meta, block_chunks)
    starts = list(h.tile_keys(grid, tile))
    picks = rng.sample(starts, min(k, len(starts)))
    keys = []
    for key in picks:
        # a random chunk inside the picked tile
        coords = [int(c) for c in key.split("/")[1:]]
        coords = [c + rng.randrange(min(t, g - c)) for c, t, g in zip(coords, tile, grid)]
        keys.append("c/" + "/".join(map(str, coords)))
    with h.Server(bench, url) as server:
        base = f"{server.base}/{STORE}"
        urls = [f"{base}/zarr.json"] + [f"{base}/var/{k}" for k in keys]
        r = subprocess.run(["curl", "-sS", "-w", "%{http_code} %{time_total}\n", *curl_discard(urls)],
                           capture_output=True, text=True, check=True)
        lines = [line.split() for line in r.stdout.splitlines() if line]
        assert all(code == "200" for code, _ in lines), lines
        times = [float(t) * 1000 for _, t in lines]
        _, misses, _, _ = server.cache()
        assert misses >= len(keys), (misses, len(keys))
        return {"first_ms": times[0], "chunk_ms": times[1:]}


def restart_postgres():
    """Restarts this machine's PostgreSQL (empty shared buffers) and waits until it answers."""
    version = sorted(os.listdir("/etc/postgresql"))[0]
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"], check=True,
                   capture_output=True)
    for _ in range(100):
        if subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1"]).returncode == 0:
            return
        time.sleep(0.1)
    raise RuntimeError("PostgreSQL did not come back after its restart")


def curl_discard(urls):
    args = []
    for u in urls:
        args += ["-o", "/dev/null", u]
    return args


def connection_variant(bench, url, variant):
    """The database URL and environment of a PostgreSQL connection variant:
    tls      the default: sqlx's sslmode=prefer, TLS when the server offers it (Debian's does)
    plain    ?sslmode=disable: no TLS
    nodelay  TLS, and TCP_NODELAY set on the sockets by bench/tcp_nodelay.c (LD_PRELOAD)"""
    if variant == "tls":
        return url, {}
    if variant == "plain":
        return url + ("&" if "?" in url else "?") + "sslmode=disable", {}
    if variant == "nodelay":
        lib = os.path.join(bench.work, "tcp_nodelay.so")
        if not os.path.exists(lib):
            subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", lib, os.path.join(h.BENCH, "tcp_nodelay.c"),
                            "-ldl"], check=True)
        return url, {"LD_PRELOAD": lib}
    raise SystemExit(f"unknown connection variant {variant}")


def measure_cache_off(bench, quiet, url, meta, runs, seconds, label, perf_out=None, env=None, variants=("tls",)):
    """RUNS cache-off wrk runs of each connection variant, interleaved (tls, plain, nodelay, tls...)
    so that a slow phase of the machine or of PostgreSQL does not land on one variant only.
    Returns {variant: [wrk results]}."""
    env = dict(env or {}, ZARRGATE_CACHE_BLOCKS_BYTES=os.environ.get("COLD_CACHE_BYTES", "0"))
    out = {v: [] for v in variants}
    for r in range(runs):
        for variant in variants:
            vurl, venv = connection_variant(bench, url, variant)
            what = f"{label} cache-off {variant} run {r + 1}/{runs}"
            res = h.repeat_quietly(quiet, what, lambda: wrk_run(bench, vurl, meta, dict(env, **venv), seconds))
            h.log(f"{what}: p50 {res['latency_us']['p50'] / 1000:.2f} ms, p99 {res['latency_us']['p99'] / 1000:.2f} ms, "
                  f"{res['requests']} reads, {res['miss_fraction']:.1%} block misses")
            out[variant].append(res)
    if perf_out:
        quiet.wait_idle("perf")
        wrk_run(bench, url, meta, env, seconds, perf=perf_out)
        h.log(f"{label}: perf profile of a cache-off run in {perf_out}")
    return out


def main():
    sizes = os.environ.get("SIZES", "1e4,1e5,1e6,1e7").split(",")
    runs = h.runs(5)
    seconds = h.env_int("SECONDS", 10)
    batches = h.env_int("BATCHES", 20)
    k = h.env_int("K", 20)
    block_chunks = h.env_int("ZARRGATE_BLOCK_CHUNKS", 1024)
    bench = h.Bench()
    quiet = h.Quiet()
    rng = random.Random(7)
    results = []
    try:
        bench.generate(sizes)
        quiet.wait("cold reads")
        for size in sizes:
            meta = bench.meta(size)
            grid, tile, tiles = store_layout(meta, block_chunks)
            with h.Postgres(f"cold_{size}") as db:
                reg = register(bench, db.url, size)
                h.log(f"{size}: registered in {reg['seconds']:.2f} s; grid {grid}, tiles {tile} x {tiles}")
                perf = None
                if os.environ.get("PERF") == "1" and size == sizes[-1]:
                    perf = os.path.join(h.RESULTS, f"cold-read-perf-{size}.txt")
                    os.makedirs(h.RESULTS, exist_ok=True)
                variants = ["tls"]
                if size == sizes[-1]:
                    variants += filter(None, os.environ.get("VARIANTS", "plain,nodelay").split(","))
                measured = measure_cache_off(bench, quiet, db.url, meta, runs, seconds, size, perf, variants=variants)
                off = measured.pop("tls")
                fresh = []
                for b in range(batches):
                    what = f"{size} fresh-server batch {b + 1}/{batches}"
                    fresh.append(h.repeat_quietly(quiet, what, lambda: fresh_batch(bench, db.url, meta,
                                                                                    block_chunks, k, rng)))
                chunk_ms = sorted(t for f in fresh for t in f["chunk_ms"])
                h.log(f"{size} fresh server: p50 {h.percentile(chunk_ms, 50):.2f} ms, "
                      f"p99 {h.percentile(chunk_ms, 99):.2f} ms over {len(chunk_ms)} reads")
                restarted = []
                if size == sizes[-1] and os.environ.get("RESTART_PG", "1") != "0":
                    for b in range(h.env_int("RESTART_BATCHES", 10)):
                        what = f"{size} PostgreSQL-restarted batch {b + 1}"

                        def batch():
                            restart_postgres()
                            return fresh_batch(bench, db.url, meta, block_chunks, k, rng)
                        restarted.append(h.repeat_quietly(quiet, what, batch))
                    ms = sorted(t for f in restarted for t in f["chunk_ms"])
                    h.log(f"{size} PostgreSQL restarted: p50 {h.percentile(ms, 50):.2f} ms, "
                          f"p99 {h.percentile(ms, 99):.2f} ms over {len(ms)} reads")
                warm_keys = list(h.tile_keys(grid, tile))
                warm = []
                for r in range(runs):
                    what = f"{size} warm run {r + 1}/{runs}"
                    warm.append(h.repeat_quietly(quiet, what, lambda: wrk_run(bench, db.url, meta, {}, seconds,
                                                                               warm_keys=warm_keys)))
                blocks = block_stats(db)
            results.append({"size": size, "refs": meta["refs"], "grid": grid, "tile": tile, "tiles": tiles,
                            "block_chunks": block_chunks, "register": reg, "cache_off": off, "fresh": fresh,
                            "restarted": restarted,
                            "variants": measured,
                            "warm": warm, "blocks": blocks})
        bench.publish(os.environ.get("RESULT_NAME", "cold_read"), results, render, seconds=seconds)
    finally:
        bench.cleanup()


def block_stats(db):
    """The blocks of array `var`: count, encoded bytes, stored bytes (after TOAST compression), and
    the on-disk size of the blocks table (with its TOAST table) and of the tiles table."""
    row = db.query("select count(*), coalesce(sum(octet_length(b.data)), 0), coalesce(sum(pg_column_size(b.data)), 0) "
                   "from tiles t join blocks b on b.id = t.block_id where t.node = 'var'")[0]
    sizes = db.query("select pg_total_relation_size('blocks'), pg_total_relation_size('tiles')")[0]
    return {"rows": int(row[0]), "raw_bytes": int(row[1]), "stored_bytes": int(row[2]),
            "blocks_relation_bytes": int(sizes[0]), "tiles_relation_bytes": int(sizes[1])}


def lat(runs, p):
    return [r["latency_us"][p] / 1000 for r in runs]


def render(data):
    rows = []
    verdicts = []
    for r in data["results"]:
        off, fresh, warm = r["cache_off"], r["fresh"], r["warm"]
        chunk_ms = sorted(t for f in fresh for t in f["chunk_ms"])
        first = [f["first_ms"] for f in fresh]
        rows.append([
            f"{r['refs']:,}", f"{r['tiles']:,} x {h.fmt(r['blocks']['raw_bytes'] / r['blocks']['rows'] / 1024, 0)} KiB",
            h.fmt_spread(lat(off, "p50")), h.fmt_spread(lat(off, "p90")), h.fmt_spread(lat(off, "p99")),
            f"{h.median([x['miss_fraction'] for x in off]):.1%}",
            h.fmt(h.percentile(chunk_ms, 50)), h.fmt(h.percentile(chunk_ms, 90)), h.fmt(h.percentile(chunk_ms, 99)),
            h.fmt(h.median(first)),
            h.fmt_spread(lat(warm, "p50"), 3), h.fmt_spread(lat(warm, "p99"), 3),
        ])
        if r.get("restarted"):
            ms = sorted(t for f in r["restarted"] for t in f["chunk_ms"])
            rows.append([f"{r['refs']:,} (PostgreSQL restarted)", "", "", "", "", "",
                         h.fmt(h.percentile(ms, 50)), h.fmt(h.percentile(ms, 90)), h.fmt(h.percentile(ms, 99)),
                         h.fmt(h.median([f["first_ms"] for f in r["restarted"]])), "", ""])
        for variant, vruns in r.get("variants", {}).items():
            rows.append([f"{r['refs']:,} ({VARIANT_NAMES.get(variant, variant)})", "", h.fmt_spread(lat(vruns, "p50")),
                         h.fmt_spread(lat(vruns, "p90")), h.fmt_spread(lat(vruns, "p99")),
                         f"{h.median([x['miss_fraction'] for x in vruns]):.1%}"] + [""] * 6)
        if r["refs"] >= 10_000_000:
            p50 = h.median(lat(off, "p50"))
            p99 = h.median(lat(off, "p99"))
            f50, f99 = h.percentile(chunk_ms, 50), h.percentile(chunk_ms, 99)
            verdict = lambda v, t: "met" if v <= t else f"missed by {v / t:.1f}x"  # noqa: E731
            verdicts.append(
                f"- {r['refs']:,} references, cache off: p50 {p50:.2f} ms (<= {TARGET_P50_MS} ms: {verdict(p50, TARGET_P50_MS)}), "
                f"p99 {p99:.2f} ms (<= {TARGET_P99_MS} ms: {verdict(p99, TARGET_P99_MS)})\n"
                f"- {r['refs']:,} references, fresh server: p50 {f50:.2f} ms ({verdict(f50, TARGET_P50_MS)}), "
                f"p99 {f99:.2f} ms ({verdict(f99, TARGET_P99_MS)})")
            if r.get("restarted"):
                ms = sorted(t for f in r["restarted"] for t in f["chunk_ms"])
                r50, r99 = h.percentile(ms, 50), h.percentile(ms, 99)
                verdicts.append(f"- {r['refs']:,} references, fresh server and PostgreSQL restarted (empty shared "
                                f"buffers): p50 {r50:.2f} ms ({verdict(r50, TARGET_P50_MS)}), "
                                f"p99 {r99:.2f} ms ({verdict(r99, TARGET_P99_MS)})")
    out = h.table(["references", "blocks (x mean size)", "cache off p50 ms", "p90 ms", "p99 ms", "block misses",
                   "fresh p50 ms", "p90 ms", "p99 ms", "first request ms", "warm p50 ms", "warm p99 ms"], rows)
    return out + "\n\n" + "\n".join(verdicts)


if __name__ == "__main__":
    main()
