#!/usr/bin/env python3
"""Assembled chunks against virtual chunks of the same shape, in the same run (issue 36).

Two stores of netCDF4 files (netCDF4-python, zlib level 4 with shuffle) of
`air(time, y, x)` float32, chunked (8, 128, 128) (512 KiB decoded), a smooth field plus noise,
on a local object store, each joined along `time` (`combine: existing`):

- `aligned`: 16 files of 8 steps: every chunk is one file's chunk, a virtual reference;
- `seams`: 11 files of 12 steps: 12 is no multiple of 8, so all but the first file's first
  chunks span a seam or start inside a file's chunk, and are assembled.

Warm: in each of `RUNS` (5) runs, wrk (`WRK_THREADS` 2 threads, `CONNECTIONS` 32 connections,
`SECONDS` 5) asks for random chunks of each store's `air` (every chunk read once before, so
assembled chunks are in memory), the two stores alternating which goes first. The ratio is the
seams store's requests per second over the aligned store's in the same run; the median is
reported (target >= 0.5).

Cold: on a server warmed up by reading the other chunks once, `COLD` (20) assembled chunks never
read before and as many virtual chunks of the aligned store read in turn, each one's latency
at the client; the server's `zarrgate_assembled_chunk_seconds` gives the time the pieces took to read,
to decode, and the whole build. The added latency (assembled - virtual) is compared with twice
the pieces' decode time (target <= 2x), for each `assemble.deflate_level` in `DEFLATE_LEVELS`
("1,0": the default, and stored).

Needs the test venv (`scripts/python-env.sh`: netCDF4) and the release binary (`ZARRGATE_BIN`,
or built).

    "$(scripts/python-env.sh | tail -1)/bin/python" bench/assembled.py
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Bench, Server, check_wrk, env_int, log, median, runs, table, wrk  # noqa: E402

import netCDF4  # noqa: E402
import numpy as np  # noqa: E402
import requests  # noqa: E402

NY = NX = 512
CHUNK = (8, 128, 128)
GRID_YX = (NY // CHUNK[1], NX // CHUNK[2])


def write(path, first, steps):
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.createDimension("time", None)
        nc.createDimension("y", NY)
        nc.createDimension("x", NX)
        t = nc.createVariable("time", "f8", ("time",), chunksizes=(CHUNK[0],))
        t.units = "days since 2000-01-01"
        air = nc.createVariable("air", "f4", ("time", "y", "x"), chunksizes=CHUNK, zlib=True, complevel=4)
        days = np.arange(first, first + steps)
        t[:] = days
        rng = np.random.default_rng(first)
        yy, xx = np.mgrid[0:NY, 0:NX]
        field = 280 + 10 * np.sin(yy / 40.0) * np.cos(xx / 60.0)
        for k, day in enumerate(days):
            air[k] = (field + day * 0.1 + rng.normal(0, 0.5, (NY, NX))).astype("f4")


def register(server, root, store, names):
    urls = [f"file://{root}/{n}" for n in names]
    r = requests.put(f"{server.base}/api/v1/stores/{store}", params={"format": "files"},
                     json={"files": urls, "combine": {"join": "existing", "dim": "time"}}, timeout=600)
    if r.status_code >= 300:
        raise RuntimeError(f"PUT {store}: {r.status_code} {r.text[:500]}")
    return r.json()


def chunk_urls(server, store, steps):
    times = -(-steps // CHUNK[0])
    return [f"{server.base}/{store}/air/c/{t}/{y}/{x}" for t in range(times)
            for y in range(GRID_YX[0]) for x in range(GRID_YX[1])]


def phases(server, histogram="zarrgate_assembled_chunk_seconds"):
    """Each phase's (sum, count) of `histogram` as the server counts them now."""
    return {p: (server.metric(f"{histogram}_sum", phase=p), server.metric(f"{histogram}_count", phase=p))
            for p in ("read", "wait", "cpu", "decode")}


def render(data):
    data = data["results"]
    warm = data["warm"]
    rows = [[str(w["run"]), f"{w['aligned_rps']:.0f}", f"{w['seams_rps']:.0f}", f"{w['ratio']:.2f}"] for w in warm]
    out = ["Warm: random chunks of air, requests per second", "",
           table(["run", "virtual (aligned)", "assembled (seams)", "ratio"], rows), "",
           f"median ratio {data['warm_ratio']:.2f} (target >= 0.5)", ""]
    out += ["Cold: an assembled chunk (built at each read) and a virtual chunk of the same shape read in turn",
            "(means over the chunks, ms; added = assembled - virtual, both read from files in the page cache)", ""]
    rows = []
    for level, c in data["cold"].items():
        rows.append([level, f"{c['bytes']:.0f}", f"{c['virtual_ms']:.1f}", f"{c['assembled_ms']:.1f}",
                     f"{c['read_ms']:.1f}", f"{c['cpu_ms']:.1f}", f"{c['decode_ms']:.1f}", f"{c['added_ms']:.1f}",
                     f"{c['added_ms'] / c['decode_ms']:.2f}"])
    out += [table(["deflate level", "assembled bytes", "virtual", "assembled", "read pieces", "decode+cut+encode",
                   "of which decode", "added", "added / decode"], rows), "",
            "target: added <= 2x the pieces' decode time"]
    return "\n".join(out)


def main():
    bench = Bench()
    root = os.path.join(bench.work, "files")
    os.makedirs(root)
    aligned = [f"aligned_{i:02d}.nc" for i in range(16)]
    seams = [f"seams_{i:02d}.nc" for i in range(11)]
    for i, name in enumerate(aligned):
        write(os.path.join(root, name), 8 * i, 8)
    for i, name in enumerate(seams):
        write(os.path.join(root, name), 12 * i, 12)
    log("files written")
    seconds, connections, threads = env_int("SECONDS", 5), env_int("CONNECTIONS", 32), env_int("WRK_THREADS", 2)
    database = f"sqlite://{bench.work}/catalog.db"
    warm = []
    with Server(bench, database) as server:
        server.object_store(root)
        a = register(server, root, "aligned", aligned)
        s = register(server, root, "seams", seams)
        log(f"aligned: {a['chunks']}; seams: {s['chunks']}")
        assert a["chunks"]["assembled"] == 0 and s["chunks"]["assembled"] > 0
        sizes = {}
        for store, steps in [("aligned", 128), ("seams", 132)]:
            got = [len(requests.get(u, timeout=60).content) for u in chunk_urls(server, store, steps)]
            sizes[store] = median(got)
        log(f"median chunk size: aligned {sizes['aligned']} B, seams {sizes['seams']} B")
        grids = {"aligned": [16, *GRID_YX], "seams": [16, *GRID_YX]}
        for run in range(runs(5)):
            order = ["aligned", "seams"] if run % 2 == 0 else ["seams", "aligned"]
            rps = {}
            for store in order:
                result = wrk(server.base, "zarr", [f"/{store}/air", *grids[store]], connections, threads, seconds)
                check_wrk(result, store)
                rps[store] = result["rps"]
            warm.append({"run": run, "aligned_rps": rps["aligned"], "seams_rps": rps["seams"],
                         "ratio": rps["seams"] / rps["aligned"]})
            log(f"run {run}: aligned {rps['aligned']:.0f}/s, seams {rps['seams']:.0f}/s")
    cold_n = env_int("COLD", 20)
    cold = {}
    for level in [int(x) for x in os.environ.get("DEFLATE_LEVELS", "1,0").split(",")]:
        env = {"ZARRGATE_ASSEMBLE_DEFLATE_LEVEL": str(level)}
        with Server(bench, database, env=env) as server:
            assembled = [u for u in chunk_urls(server, "seams", 132) if "/c/0/" not in u]
            virtual = [u for u in chunk_urls(server, "aligned", 128) if "/c/0/" not in u]
            # The process warmed up first on other chunks (views, blocks, its allocator's pages:
            # a fresh process faults in every page it touches); the chunks timed were never read.
            for url in assembled[cold_n:] + virtual[cold_n:]:
                requests.get(url, timeout=60)
            assembled, virtual = assembled[:cold_n], virtual[:cold_n]
            before = phases(server)
            times = {"virtual": [], "assembled": []}
            sizes_cold = []
            for v, a in zip(virtual, assembled):
                for kind, url in (("virtual", v), ("assembled", a)):
                    started = time.perf_counter()
                    r = requests.get(url, timeout=60)
                    times[kind].append(time.perf_counter() - started)
                    assert r.status_code == 200, r.status_code
                    if kind == "assembled":
                        sizes_cold.append(len(r.content))
            after = phases(server)
        mean = {p: (after[p][0] - before[p][0]) / max(after[p][1] - before[p][1], 1) * 1000 for p in after}
        latency = {k: sum(t) / len(t) * 1000 for k, t in times.items()}
        cold[str(level)] = {"assembled_ms": latency["assembled"], "virtual_ms": latency["virtual"],
                            "read_ms": mean["read"], "wait_ms": mean["wait"], "cpu_ms": mean["cpu"],
                            "decode_ms": mean["decode"], "added_ms": latency["assembled"] - latency["virtual"],
                            "chunks": len(assembled), "bytes": median(sizes_cold)}
        log(f"cold, deflate level {level}: {cold[str(level)]}")
    data = {"warm": warm, "warm_ratio": median([w["ratio"] for w in warm]), "cold": cold, "chunk_bytes": sizes}
    bench.publish("assembled", data, render)
    bench.cleanup()


if __name__ == "__main__":
    main()
