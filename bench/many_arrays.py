#!/usr/bin/env python3
"""Many arrays: a store of 100,000 arrays (one inline chunk each) on each backend.

Issue "No reader can crash, stall or mislead the server": such a store must register on both
databases and serve its root zarr.json (consolidated metadata of every array) in under 2 s, with
RSS under 500 MB, while an unrelated cached chunk read stays under 10 ms.

For each backend, RUNS times (default 3), against a fresh database and a fresh server:
  - register: the whole PUT (curl -T), and the document's size
  - first root zarr.json: the first GET of /many/zarr.json (the view is built then), its size
  - meanwhile: a second connection reads a cached 4-byte chunk of another store in a loop; the
    slowest and the median of those reads while the first root GET runs
  - peak RSS (VmHWM) of the server after all of it

  python3 bench/many_arrays.py
  ARRAYS=20000 BACKENDS=sqlite RUNS=1 python3 bench/many_arrays.py
"""

import base64
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

TARGETS = {"root_seconds": 2.0, "peak_rss_mb": 500, "unrelated_max_ms": 10.0}


def document(path, arrays):
    """A native manifest of `arrays` float32 arrays of 4 elements, one inline chunk each."""
    data = base64.b64encode(b"\0\0\x80?" * 4).decode()
    with open(path, "w") as f:
        f.write('{"nodes": {"": {"zarr_format": 3, "node_type": "group", "attributes": {"title": "many"}}')
        for i in range(arrays):
            node = {"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "float32",
                    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
                    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                    "fill_value": 0.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                    "dimension_names": ["x"], "attributes": {"units": "K", "index": i},
                    "manifest": {"0": {"data": data}}}
            f.write(f', "g{i // 1000:03d}/a{i:06d}": {json.dumps(node)}')
        f.write("}}")


def one(bench, backend, path, arrays):
    with h.Catalog(bench, backend, f"many_{backend}") as catalog:
        with h.Server(bench, catalog.url) as server:
            small = {"nodes": {"": {"zarr_format": 3, "node_type": "group"},
                               "x": {"zarr_format": 3, "node_type": "array", "shape": [1], "data_type": "float32",
                                     "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1]}},
                                     "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                                     "fill_value": 0.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                                     "manifest": {"0": {"data": base64.b64encode(b"\0\0\x80?").decode()}}}}}
            server.put_json("/api/v1/stores/small", small)
            other = h.Server.__new__(h.Server)
            other.__dict__.update(server.__dict__)
            other.conn = None
            assert other.get("/small/x/c/0")[0] == 200
            status, register_s, answer = server.register("many", path)
            assert answer["arrays"] == arrays, answer
            latencies, stop = [], threading.Event()

            def unrelated():
                while not stop.is_set():
                    t = time.perf_counter()
                    assert other.get("/small/x/c/0")[0] == 200
                    latencies.append((time.perf_counter() - t) * 1e3)

            reader = threading.Thread(target=unrelated)
            reader.start()
            time.sleep(0.2)
            before = len(latencies)
            t = time.perf_counter()
            code, body, _ = server.get("/many/zarr.json")
            root_s = time.perf_counter() - t
            during = latencies[before:] or [float("nan")]
            time.sleep(0.2)
            stop.set()
            reader.join()
            assert code == 200, body[:500]
            consolidated = json.loads(body)["consolidated_metadata"]["metadata"]
            return {"backend": backend, "arrays": arrays, "document_mib": os.path.getsize(path) / h.MIB,
                    "register_seconds": register_s, "root_seconds": root_s, "root_mib": len(body) / h.MIB,
                    "consolidated_nodes": len(consolidated), "unrelated_reads": len(during),
                    "unrelated_max_ms": max(during), "unrelated_median_ms": h.median(during),
                    "peak_rss_mib": server.hwm_kib() / 1024}


def main():
    arrays = int(float(os.environ.get("ARRAYS", "1e5")))
    backends = os.environ.get("BACKENDS", "postgres,sqlite").split(",")
    bench = h.Bench()
    quiet = h.Quiet()
    try:
        path = os.path.join(bench.dir, f"many-{arrays}.json")
        if not os.path.exists(path):
            document(path, arrays)
        quiet.wait("many arrays")
        results = []
        for backend in backends:
            n = h.runs(3)
            for r in range(n):
                what = f"many arrays {backend} run {r + 1}/{n}"
                res = h.repeat_quietly(quiet, what, lambda: one(bench, backend, path, arrays))
                h.log(f"{what}: register {res['register_seconds']:.2f} s, root {res['root_seconds']:.2f} s, "
                      f"unrelated max {res['unrelated_max_ms']:.1f} ms, peak {res['peak_rss_mib']:.0f} MiB")
                results.append(res)
        bench.publish(f"many-arrays-{arrays}", results, render)
    finally:
        bench.cleanup()


def render(data):
    rows, verdicts = [], []
    groups = {}
    for r in data["results"]:
        groups.setdefault(r["backend"], []).append(r)
    for backend, rs in groups.items():
        col = lambda k: [r[k] for r in rs]  # noqa: E731
        rows.append([backend, f"{rs[0]['arrays']:,}", len(rs), h.fmt(rs[0]["document_mib"], 1),
                     h.fmt_spread(col("register_seconds")), h.fmt_spread(col("root_seconds")),
                     h.fmt(rs[0]["root_mib"], 1), h.fmt_spread(col("unrelated_max_ms"), 1),
                     h.fmt(h.median(col("unrelated_median_ms")), 2), h.fmt_spread(col("peak_rss_mib"), 0)])
        root, peak, unrelated = (h.median(col(k)) for k in ("root_seconds", "peak_rss_mib", "unrelated_max_ms"))
        limit_mib = TARGETS["peak_rss_mb"] * 1e6 / h.MIB
        verdicts.append(
            f"- {backend}: root zarr.json {h.fmt(root)} s vs < {TARGETS['root_seconds']} s: "
            + ("met" if root < TARGETS["root_seconds"] else "missed")
            + f"; peak RSS {peak:.0f} MiB vs < {limit_mib:.0f} MiB: " + ("met" if peak < limit_mib else "missed")
            + f"; unrelated read max {unrelated:.1f} ms vs < {TARGETS['unrelated_max_ms']} ms: "
            + ("met" if unrelated < TARGETS["unrelated_max_ms"] else "missed"))
    out = h.table(["backend", "arrays", "runs", "document MiB", "PUT s", "first root GET s", "root MiB",
                   "unrelated max ms", "unrelated median ms", "peak RSS MiB"], rows)
    return out + "\n\n" + "\n".join(verdicts)


if __name__ == "__main__":
    main()
