#!/usr/bin/env python3
"""Transcoded chunks (`?codecs=portable`) against the same chunks served as they are, in the
same run (issue 37).

16 netCDF4 files (netCDF4-python, zlib level 4 with shuffle: what GDAL cannot read) of
`air(time, y, x)` float32 chunked (8, 128, 128) (512 KiB decoded), as `assembled.py` writes
them, joined along `time` by references, registered twice: `as-is` (the files' codecs, each
chunk a byte range of a file) and `portable` (served as `bytes` + `gzip`, each chunk decoded and
encoded again on its first read, then kept in memory).

Warm: in each of `RUNS` (5) runs, wrk (`WRK_THREADS` 2, `CONNECTIONS` 32, `SECONDS` 5) asks for
random chunks of each store's `air` (every chunk read once before), the stores alternating
which goes first; the ratio is portable's requests per second over as-is's (median).

Cold: on a server warmed up on other chunks, `COLD` (20) chunks never read before, of each
store in turn, each one's latency at the client; `zarrgate_transcoded_chunk_seconds` gives the
time the file's chunk took to read, to decode, and the whole transcoding. The added latency
(portable - as-is) is compared with the decode time, for each `assemble.deflate_level` in
`DEFLATE_LEVELS` ("1,0").

    "$(scripts/python-env.sh | tail -1)/bin/python" bench/portable.py
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from assembled import chunk_urls, phases, write  # noqa: E402
from harness import Bench, Server, check_wrk, env_int, log, median, runs, table, wrk  # noqa: E402

import requests  # noqa: E402

STEPS = 128


def register(server, root, store, names, codecs):
    urls = [f"file://{root}/{n}" for n in names]
    r = requests.put(f"{server.base}/api/v1/stores/{store}", params={"format": "files", "codecs": codecs},
                     json={"files": urls, "combine": {"join": "existing", "dim": "time"}}, timeout=600)
    if r.status_code >= 300:
        raise RuntimeError(f"PUT {store}: {r.status_code} {r.text[:500]}")
    return r.json()


def render(data):
    data = data["results"]
    rows = [[str(w["run"]), f"{w['as_is_rps']:.0f}", f"{w['portable_rps']:.0f}", f"{w['ratio']:.2f}"]
            for w in data["warm"]]
    out = ["Warm: random chunks of air, requests per second", "",
           table(["run", "as-is (virtual)", "portable (transcoded, in memory)", "ratio"], rows), "",
           f"median ratio {data['warm_ratio']:.2f}", "",
           f"chunk bytes: as-is {data['chunk_bytes']['as-is']:.0f}, portable {data['chunk_bytes']['portable']:.0f}",
           "", "Cold: a chunk transcoded at its read and the same file chunk served as it is, read in turn",
           "(means over the chunks, ms)", ""]
    rows = []
    for level, c in data["cold"].items():
        rows.append([level, f"{c['as_is_ms']:.1f}", f"{c['portable_ms']:.1f}", f"{c['read_ms']:.1f}",
                     f"{c['cpu_ms']:.1f}", f"{c['decode_ms']:.1f}", f"{c['added_ms']:.1f}",
                     f"{c['added_ms'] / c['decode_ms']:.2f}"])
    out += [table(["deflate level", "as-is", "portable", "read", "decode+encode", "of which decode", "added",
                   "added / decode"], rows)]
    return "\n".join(out)


def main():
    bench = Bench()
    root = os.path.join(bench.work, "files")
    os.makedirs(root)
    names = [f"air_{i:02d}.nc" for i in range(STEPS // 8)]
    for i, name in enumerate(names):
        write(os.path.join(root, name), 8 * i, 8)
    log("files written")
    seconds, connections, threads = env_int("SECONDS", 5), env_int("CONNECTIONS", 32), env_int("WRK_THREADS", 2)
    database = f"sqlite://{bench.work}/catalog.db"
    stores = {"as-is": "asis", "portable": "portable"}
    warm, sizes = [], {}
    with Server(bench, database) as server:
        server.object_store(root)
        for codecs, store in stores.items():
            summary = register(server, root, store, names, codecs)
            log(f"{store}: {summary['chunks']}, transcoded arrays {summary.get('transcoded_arrays')}")
        for codecs, store in stores.items():
            sizes[codecs] = median([len(requests.get(u, timeout=60).content) for u in chunk_urls(server, store, STEPS)])
        grid = [STEPS // 8, 4, 4]
        for run in range(runs(5)):
            order = list(stores.items()) if run % 2 == 0 else list(reversed(stores.items()))
            rps = {}
            for codecs, store in order:
                result = wrk(server.base, "zarr", [f"/{store}/air", *grid], connections, threads, seconds)
                check_wrk(result, store)
                rps[codecs] = result["rps"]
            warm.append({"run": run, "as_is_rps": rps["as-is"], "portable_rps": rps["portable"],
                         "ratio": rps["portable"] / rps["as-is"]})
            log(f"run {run}: as-is {rps['as-is']:.0f}/s, portable {rps['portable']:.0f}/s")
    cold_n, cold = env_int("COLD", 20), {}
    for level in [int(x) for x in os.environ.get("DEFLATE_LEVELS", "1,0").split(",")]:
        with Server(bench, database, env={"ZARRGATE_ASSEMBLE_DEFLATE_LEVEL": str(level)}) as server:
            portable = chunk_urls(server, "portable", STEPS)
            as_is = chunk_urls(server, "asis", STEPS)
            # Warm up on the other half of the chunks (views, blocks, the allocator's pages); the
            # timed chunks were never read by this process.
            for url in portable[cold_n:] + as_is[cold_n:]:
                requests.get(url, timeout=60)
            before = phases(server, "zarrgate_transcoded_chunk_seconds")
            times = {"as-is": [], "portable": []}
            for a, p in zip(as_is[:cold_n], portable[:cold_n]):
                for kind, url in (("as-is", a), ("portable", p)):
                    started = time.perf_counter()
                    r = requests.get(url, timeout=60)
                    times[kind].append(time.perf_counter() - started)
                    assert r.status_code == 200, r.status_code
            after = phases(server, "zarrgate_transcoded_chunk_seconds")
        mean = {p: (after[p][0] - before[p][0]) / max(after[p][1] - before[p][1], 1) * 1000 for p in after}
        latency = {k: sum(t) / len(t) * 1000 for k, t in times.items()}
        cold[str(level)] = {"as_is_ms": latency["as-is"], "portable_ms": latency["portable"],
                            "read_ms": mean["read"], "cpu_ms": mean["cpu"], "decode_ms": mean["decode"],
                            "added_ms": latency["portable"] - latency["as-is"]}
        log(f"cold, deflate level {level}: {cold[str(level)]}")
    data = {"warm": warm, "warm_ratio": median([w["ratio"] for w in warm]), "cold": cold, "chunk_bytes": sizes}
    bench.publish("portable", data, render)
    bench.cleanup()


if __name__ == "__main__":
    main()
