#!/usr/bin/env python3
"""Kerchunk registration: time and peak server memory for the same references uploaded as
kerchunk JSON and as a tar of the kerchunk parquet directory (SIDE x SIDE references, default
1000 x 1000 = 1,000,000), on PostgreSQL and SQLite.

The references come from bench/gen_kerchunk.py (run with the test venv, which has kerchunk and
fastparquet): one float32 array whose chunks are consecutive ranges of one sparse source file,
written by kerchunk's own writers (json.dump of the references, kerchunk.df.refs_to_dataframe for
parquet). Each registration (RUNS, default 5) runs against a fresh database and a fresh server:
  - seconds: the whole PUT as curl sees it (upload, parse, validate, write, commit)
  - server CPU seconds during the PUT, idle RSS before it and peak RSS (VmHWM) after it

  python3 bench/kerchunk_registration.py
  SIDE=500 BACKENDS=sqlite RUNS=3 python3 bench/kerchunk_registration.py
"""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

FORMATS = {"kerchunk JSON": ("refs.json", "?format=kerchunk"),
           "kerchunk parquet (tar)": ("refs.parq.tar", "?format=kerchunk-parquet")}


def generate(bench, side):
    out = os.path.join(bench.dir, f"kerchunk-{side}")
    if not os.path.exists(os.path.join(out, "refs.parq.tar")):
        venv = subprocess.run([os.path.join(h.REPO, "scripts", "python-env.sh")], capture_output=True, text=True,
                              check=True).stdout.splitlines()[-1]
        subprocess.run([os.path.join(venv, "bin", "python"), os.path.join(h.BENCH, "gen_kerchunk.py"),
                        "--out", out, "--side", str(side)], check=True)
    return out


def one(bench, backend, out, fmt):
    file, query = FORMATS[fmt]
    with h.Catalog(bench, backend, f"kerchunk_{backend}") as catalog:
        with h.Server(bench, catalog.url) as server:
            server.object_store(out)
            time.sleep(0.5)
            idle = server.rss_kib()
            cpu0 = server.cpu()
            status, seconds, answer = server.register("k", os.path.join(out, file), query)
            cpu1 = server.cpu()
            peak = server.hwm_kib()
            refs = answer["chunks"]["virtual"] + answer["chunks"]["inline"]
        return {"backend": backend, "format": fmt, "refs": refs, "status": status, "seconds": seconds,
                "bytes": os.path.getsize(os.path.join(out, file)), "server_cpu": cpu1 - cpu0,
                "idle_rss_mib": idle / 1024, "peak_rss_mib": peak / 1024}

def main():
    side = h.env_int("SIDE", 1000)
    backends = os.environ.get("BACKENDS", "postgres,sqlite").split(",")
    runs = h.runs(5)
    bench = h.Bench()
    quiet = h.Quiet()
    try:
        out = generate(bench, side)
        quiet.wait("kerchunk registration")
        results = []
        for backend in backends:
            for fmt in FORMATS:
                for r in range(runs):
                    what = f"kerchunk {backend} {fmt} run {r + 1}/{runs}"
                    res = h.repeat_quietly(quiet, what, lambda: one(bench, backend, out, fmt))
                    h.log(f"{what}: {res['seconds']:.2f} s, peak {res['peak_rss_mib']:.0f} MiB")
                    results.append(res)
        bench.publish("kerchunk", results, render)
    finally:
        bench.cleanup()


def render(data):
    rows = []
    groups = {}
    for r in data["results"]:
        groups.setdefault((r["backend"], r["format"]), []).append(r)
    for (backend, fmt), rs in groups.items():
        col = lambda k: [r[k] for r in rs]  # noqa: E731
        med = h.median(col("seconds"))
        rows.append([backend, fmt, f"{rs[0]['refs']:,}", f"{rs[0]['bytes'] / h.MIB:,.1f}", len(rs),
                     h.fmt_spread(col("seconds")), h.fmt(rs[0]["refs"] / med / 1e6, 2),
                     h.fmt_spread(col("server_cpu"), 1), h.fmt(h.median(col("idle_rss_mib")), 0),
                     h.fmt_spread(col("peak_rss_mib"), 0)])
    return h.table(["backend", "format", "references", "upload MiB", "runs", "PUT s", "M refs/s", "server CPU s",
                    "idle RSS MiB", "peak RSS MiB"], rows)


if __name__ == "__main__":
    main()
