#!/usr/bin/env python3
"""Cached manifest footprint: bytes of memory per virtual reference once every block is cached.

Three layouts: `native-<size>.json` (SIZES, default 1e6,1e7: chunks one after another in 8 source
files) and `files-<size>.json` (FILE_SIZES, default 1e6: every chunk the one chunk of its own daily
file, with a declared S3-style MD5 ETag; registered with ?verify=false, and its blocks loaded with
HEAD, which never reads a source, so the million files need not exist), and (JOIN_FILES, default
1e5; empty to skip) as many real netCDF4 files of one chunk each, named as GOES ABI files are
(`OR_ABI-L2-CMIPF-M6C13_G16_s<start>_e<end>_c<created>.nc`, every ten minutes, under
`<year>/<day>/<hour>/`), written by netCDF4-python, registered with `?format=files` as a prefix
and glob joined along `time` (the zarrgate server reads them all: registration time and peak RSS
are reported too), array `cmi` measured.

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
    array = meta.get("array", "var")
    with h.Server(bench, url, env=env) as server:
        status, _, _ = server.get(f"/{STORE}/zarr.json")
        assert status == 200
        time.sleep(1)
        idle = server.rss_kib()
        started = time.time()
        for key in keys:
            status, _, _ = server.request(method, f"/{STORE}/{array}/{key}")
            assert status == 200, (key, status)
        load_seconds = time.time() - started
        for _ in range(200):  # cache housekeeping runs on later operations
            server.request(method, f"/{STORE}/{array}/{keys[0]}")
        time.sleep(1)
        server.request(method, f"/{STORE}/{array}/{keys[0]}")
        hits, misses, weight, entries = server.cache()
        after = server.rss_kib()
        refs = meta["refs"]
        return {"tiles": len(keys), "entries": entries, "misses": misses, "weight": weight,
                "idle_rss_mib": idle / 1024, "rss_mib": after / 1024, "weight_per_ref": weight / refs,
                "rss_per_ref": (after - idle) * 1024 / refs, "load_seconds": load_seconds}


GOES_SIDE = 32


def goes_name(i):
    """The i-th file of a GOES ABI series every ten minutes from 2023-01-01: its path under the
    prefix (start, end and creation times in its name, the creation seconds varying)."""
    minutes = i * 10
    day, hour, minute = 1 + minutes // 1440, minutes // 60 % 24, minutes % 60
    year = 2023 + (day - 1) // 365
    day = (day - 1) % 365 + 1
    created = 100 + (i * 7919) % 900
    return (f"{year}/{day:03d}/{hour:02d}/OR_ABI-L2-CMIPF-M6C13_G16_s{year}{day:03d}{hour:02d}{minute:02d}204_"
            f"e{year}{day:03d}{hour:02d}{minute + 9:02d}512_c{year}{day:03d}{hour:02d}{minute + 9:02d}{created:03d}.nc")


def write_goes(args):
    root, start, stop = args
    import netCDF4
    import numpy as np
    for i in range(start, stop):
        path = os.path.join(root, goes_name(i))
        if os.path.exists(path):
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with netCDF4.Dataset(path + ".tmp", "w") as ds:
            ds.createDimension("time", None)
            ds.createDimension("y", GOES_SIDE)
            ds.createDimension("x", GOES_SIDE)
            t = ds.createVariable("time", "f8", ("time",))
            t.units, t.calendar = "minutes since 2023-01-01", "standard"
            v = ds.createVariable("cmi", "f4", ("time", "y", "x"), zlib=True, chunksizes=(1, GOES_SIDE, GOES_SIDE))
            t[0:1] = [i * 10.0]
            # Values on a coarse grid so that the compressed lengths vary as real scenes do.
            v[0:1] = np.random.default_rng(i).integers(0, 1 + i % 97, (1, GOES_SIDE, GOES_SIDE)).astype("f4")
        os.replace(path + ".tmp", path)


def goes_files(bench, n):
    """`n` GOES-named netCDF4 files under data/goes-<n>/ (kept between runs)."""
    import multiprocessing
    root = os.path.join(bench.data, f"goes-{n}")
    stamp = os.path.join(root, ".complete")
    if not os.path.exists(stamp):
        started = time.time()
        step = 1000
        with multiprocessing.Pool(os.cpu_count()) as pool:
            pool.map(write_goes, [(root, a, min(a + step, n)) for a in range(0, n, step)])
        open(stamp, "w").close()
        h.log(f"{n:,} GOES-named netCDF4 files written in {time.time() - started:.0f} s")
    return root


def register_join(bench, url, n):
    """Registers the files of goes_files(n) joined along time: (seconds, peak RSS MiB)."""
    root = goes_files(bench, n)
    with h.Server(bench, url) as server:
        server.put_json("/api/v1/object-stores/goes", {"url": f"file://{root}/"})
        started = time.time()
        server.put_json(f"/api/v1/stores/{STORE}?format=files", {
            "files": {"prefix": f"file://{root}/", "glob": "**/*.nc"},
            "combine": {"join": "existing", "dim": "time"}})
        seconds = time.time() - started
        return seconds, h.proc_status(server.proc.pid, "VmHWM") / 1024


def main():
    sizes = [s for s in os.environ.get("SIZES", "1e6,1e7").split(",") if s]
    file_sizes = [s for s in os.environ.get("FILE_SIZES", "1e6").split(",") if s]
    join_sizes = [s for s in os.environ.get("JOIN_FILES", "1e5").split(",") if s]
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
        kinds = [("native", s) for s in sizes] + [("files", s) for s in file_sizes] + [("join", s) for s in join_sizes]
        for kind, size in kinds:
            if kind == "join":
                n = int(float(size))
                meta = {"grid": [n, 1, 1], "refs": n, "one_file_per_chunk": True, "array": "cmi"}
            else:
                meta = bench.meta(size, kind)
            registration = {}
            with h.Postgres(f"footprint_{kind}_{size}") as db:
                if kind == "native":
                    register(bench, db.url, size)
                elif kind == "join":
                    seconds, peak = register_join(bench, db.url, meta["refs"])
                    registration = {"register_seconds": seconds, "register_peak_rss_mib": peak}
                    h.log(f"join of {meta['refs']:,} files registered in {seconds:.1f} s, peak RSS {peak:.0f} MiB")
                    settle(db.url)
                else:
                    with h.Server(bench, db.url) as server:
                        server.object_store(bench.data)
                        server.register(STORE, bench.manifest(size, kind), "?verify=false")
                    settle(db.url)
                stored = db.query("select coalesce(sum(octet_length(b.data)), 0) from tiles t "
                                  f"join blocks b on b.id = t.block_id where t.node = '{meta.get('array', 'var')}'")[0][0]
                for r in range(runs):
                    what = f"footprint {kind} {size} run {r + 1}/{runs}"
                    res = h.repeat_quietly(quiet, what, lambda: one(bench, db.url, meta, env))
                    res.update({"size": size, "layout": kind, "refs": meta["refs"],
                                "stored_per_ref": int(stored) / meta["refs"], **registration})
                    h.log(f"{what}: weight {res['weight_per_ref']:.1f} B/ref, RSS {res['rss_per_ref']:.1f} B/ref")
                    results.append(res)
        bench.publish("footprint", results, render)
    finally:
        bench.cleanup()


def render(data):
    rows, verdicts = [], []
    groups = {}
    names = {"native": "8 files", "files": "a file per chunk", "join": "GOES-named files joined"}
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
        if "register_seconds" in rs[0]:
            verdicts.append(f"- {rs[0]['refs']:,} files joined with ?format=files: registered in "
                            f"{rs[0]['register_seconds']:.1f} s, server peak RSS {rs[0]['register_peak_rss_mib']:.0f} MiB")
    out = h.table(["sources", "references", "runs", "tiles / cached blocks", "cache weight MiB", "weight B/ref",
                   "idle RSS MiB", "RSS after MiB", "RSS growth B/ref", "stored B/ref"], rows)
    return out + "\n\n" + "\n".join(verdicts)


if __name__ == "__main__":
    main()
