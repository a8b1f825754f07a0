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

Cold: `COLD` (20) assembled chunks read one after another from a fresh server (nothing cached),
each chunk's latency at the client; the server's `zarrgate_assembled_chunk_seconds` gives the
time its pieces took to read, to decode, and the whole build. The added latency over reading
the pieces (latency - read) is compared with twice the pieces' decode time (target <= 2x).

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


def phases(server):
    return {p: (server.metric("zarrgate_assembled_chunk_seconds_sum", phase=p),
                server.metric("zarrgate_assembled_chunk_seconds_count", phase=p))
            for p in ("read", "wait", "cpu", "decode")}


def render(data):
    data = data["results"]
    warm = data["warm"]
    rows = [[str(w["run"]), f"{w['aligned_rps']:.0f}", f"{w['seams_rps']:.0f}", f"{w['ratio']:.2f}"] for w in warm]
    out = ["Warm: random chunks of air, requests per second", "",
           table(["run", "virtual (aligned)", "assembled (seams)", "ratio"], rows), "",
           f"median ratio {data['warm_ratio']:.2f} (target >= 0.5)", ""]
    c = data["cold"]
    out += ["Cold: assembled chunks read one after another on a fresh server (means, ms)", "",
            table(["latency", "read pieces", "wait", "decode+cut+encode", "of which decode", "added", "2x decode"],
                  [[f"{c['latency_ms']:.1f}", f"{c['read_ms']:.1f}", f"{c['wait_ms']:.2f}", f"{c['cpu_ms']:.1f}",
                    f"{c['decode_ms']:.1f}", f"{c['added_ms']:.1f}", f"{2 * c['decode_ms']:.1f}"]]), "",
            f"added latency / decode time = {c['added_ms'] / c['decode_ms']:.2f} (target <= 2)"]
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
    with Server(bench, database) as server:
        urls = [u for u in chunk_urls(server, "seams", 132) if "/c/0/" not in u][:cold_n]
        before = phases(server)
        latencies = []
        for u in urls:
            started = time.perf_counter()
            r = requests.get(u, timeout=60)
            latencies.append(time.perf_counter() - started)
            assert r.status_code == 200, r.status_code
        after = phases(server)
    mean = {p: (after[p][0] - before[p][0]) / max(after[p][1] - before[p][1], 1) * 1000 for p in after}
    latency = sum(latencies) / len(latencies) * 1000
    cold = {"latency_ms": latency, "read_ms": mean["read"], "wait_ms": mean["wait"], "cpu_ms": mean["cpu"],
            "decode_ms": mean["decode"], "added_ms": latency - mean["read"], "chunks": len(urls)}
    data = {"warm": warm, "warm_ratio": median([w["ratio"] for w in warm]), "cold": cold, "chunk_bytes": sizes}
    bench.publish("assembled", data, render)
    bench.cleanup()


if __name__ == "__main__":
    main()
