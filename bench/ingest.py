#!/usr/bin/env python3
"""Ingest: registering a large native manifest (PUT /api/v1/stores/{store}, streamed with curl -T).

For each backend (PostgreSQL, SQLite) and size (default 1e6 and 1e7 references), RUNS times
(default 5 for sizes up to 1e6, 3 above), each against a fresh database and a fresh server:
  - seconds: the whole PUT as curl sees it (upload, parse, validate, write, commit)
  - write: the `seconds=` the server logs for "store registered" (catalog write and retention),
    so PUT - write is reading, parsing and validating the document
  - server CPU and PostgreSQL CPU seconds spent during the PUT (/proc/<pid>/stat)
  - idle RSS before the PUT and peak RSS (VmHWM of /proc/<pid>/status) after it; the peak minus
    the idle RSS, per reference, is what the registration holds in memory per reference
  - the size of the database afterwards
PERF=1 also records a `perf` profile of one PostgreSQL 1e6 registration (bench/results/).

  python3 bench/ingest.py                      # both backends, 1e6 and 1e7
  SIZES=1e6 BACKENDS=postgres RUNS=3 python3 bench/ingest.py
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

TARGETS = {("postgres", "1e6"): (2.0, 500), ("postgres", "1e7"): (None, 1000)}


def one(bench, quiet, backend, size, perf=None):
    with h.Catalog(bench, backend, f"ingest_{backend}_{size}") as catalog:
        with h.Server(bench, catalog.url) as server:
            server.object_store(bench.data)
            time.sleep(0.5)
            idle = server.rss_kib()
            cpu0, pg0 = server.cpu(), h.postgres_cpu()
            rec = None
            if perf:
                rec, data = h.perf_record(server.pid, 3600, perf)
                time.sleep(0.5)
            status, seconds, answer = server.register("s", bench.manifest(size))
            if rec:
                rec.send_signal(2)
                rec.wait()
            cpu1, pg1 = server.cpu(), h.postgres_cpu()
            peak = server.hwm_kib()
            after = server.rss_kib()
            write = server.registered_seconds()
            refs = answer["chunks"]["virtual"] + answer["chunks"]["inline"]
        result = {"backend": backend, "size": size, "refs": refs, "status": status, "seconds": seconds,
                  "write_seconds": write, "server_cpu": cpu1 - cpu0,
                  "postgres_cpu": pg1 - pg0 if catalog.db else None,
                  "idle_rss_mib": idle / 1024, "peak_rss_mib": peak / 1024, "after_rss_mib": after / 1024,
                  "peak_bytes_per_ref": (peak - idle) * 1024 / refs, "db_mib": catalog.size_bytes() / h.MIB}
        if perf:
            result["perf"] = h.perf_report(data, perf)
        return result

def main():
    sizes = os.environ.get("SIZES", "1e6,1e7").split(",")
    backends = os.environ.get("BACKENDS", "postgres,sqlite").split(",")
    bench = h.Bench()
    quiet = h.Quiet()
    try:
        bench.generate(sizes)
        quiet.wait("ingest")
        results = []
        for backend in backends:
            for size in sizes:
                n = h.runs(5 if float(size) <= 1e6 else 3)
                for r in range(n):
                    what = f"ingest {backend} {size} run {r + 1}/{n}"
                    res = h.repeat_quietly(quiet, what, lambda: one(bench, quiet, backend, size))
                    h.log(f"{what}: {res['seconds']:.2f} s, peak {res['peak_rss_mib']:.0f} MiB")
                    results.append(res)
        if os.environ.get("PERF") == "1" and "postgres" in backends:
            out = os.path.join(h.RESULTS, "ingest-perf-postgres-1e6.txt")
            os.makedirs(h.RESULTS, exist_ok=True)
            quiet.wait_idle("ingest perf")
            res = one(bench, quiet, "postgres", "1e6", perf=out)
            h.log(f"perf profile of a 1e6 PostgreSQL registration ({res['seconds']:.2f} s under perf): {out}")
        bench.publish("ingest", results, render)
    finally:
        bench.cleanup()


def render(data):
    rows = []
    verdicts = []
    groups = {}
    for r in data["results"]:
        groups.setdefault((r["backend"], r["size"]), []).append(r)
    for (backend, size), rs in groups.items():
        col = lambda k: [r[k] for r in rs if r[k] is not None]  # noqa: E731
        med = h.median(col("seconds"))
        rows.append([backend, f"{rs[0]['refs']:,}", len(rs), h.fmt_spread(col("seconds")),
                     h.fmt(rs[0]["refs"] / med / 1e6, 2), h.fmt_spread(col("write_seconds")),
                     h.fmt(h.median([r["seconds"] - r["write_seconds"] for r in rs if r["write_seconds"]])),
                     h.fmt_spread(col("server_cpu"), 1), h.fmt_spread(col("postgres_cpu"), 1) if backend == "postgres" else "-",
                     h.fmt(h.median(col("idle_rss_mib")), 0), h.fmt_spread(col("peak_rss_mib"), 0),
                     h.fmt(h.median(col("peak_bytes_per_ref")), 0), h.fmt(h.median(col("db_mib")), 0)])
        target = TARGETS.get((backend, size))
        if target:
            t_s, t_mb = target
            peak = h.median(col("peak_rss_mib"))
            v = []
            if t_s:
                v.append(f"{h.fmt(med)} s vs <= {t_s} s: " + ("met" if med <= t_s else f"missed by {med / t_s:.1f}x"))
            limit_mib = t_mb * 1e6 / h.MIB
            v.append(f"peak {peak:.0f} MiB vs <= {t_mb} MB ({limit_mib:.0f} MiB): "
                     + ("met" if peak <= limit_mib else f"missed by {peak / limit_mib:.2f}x"))
            verdicts.append(f"- {backend} {size}: " + "; ".join(v))
    out = h.table(["backend", "references", "runs", "PUT s", "M refs/s", "write s", "PUT - write s",
                   "server CPU s", "PG CPU s", "idle RSS MiB", "peak RSS MiB", "peak-idle B/ref", "DB MiB"], rows)
    return out + "\n\n" + "\n".join(verdicts)


if __name__ == "__main__":
    main()
