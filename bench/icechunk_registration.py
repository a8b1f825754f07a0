#!/usr/bin/env python3
"""Icechunk registration against its baseline: the same SIDE x SIDE references (default 1000 x
1000 = 1,000,000) registered from an Icechunk repository (`?format=icechunk`, format 2) and as a
native JSON manifest, one after the other in each run, on PostgreSQL and SQLite. Made by
bench/gen_icechunk.py in the Icechunk 2.x venv. Each registration runs against a fresh database
and a fresh server:
  - seconds: the whole PUT as curl sees it (for Icechunk: reading the repository, validating,
    writing, committing; for native: upload, parse, validate, write, commit)
  - server CPU seconds during the PUT, idle RSS before it and peak RSS (VmHWM) after it
The target (issue 16): Icechunk within 2x native, memory bounded as native ingest.

  python3 bench/icechunk_registration.py
  SIDE=500 BACKENDS=sqlite RUNS=3 python3 bench/icechunk_registration.py
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

FORMATS = ("native JSON", "icechunk")


def generate(bench, side):
    out = os.path.join(bench.dir, f"icechunk-{side}")
    if not os.path.exists(os.path.join(out, "repo", "repo")):
        venv = subprocess.run([os.path.join(h.REPO, "scripts", "python-env-icechunk.sh"), "2"], capture_output=True,
                              text=True, check=True).stdout.splitlines()[-1]
        subprocess.run([os.path.join(venv, "bin", "python"), os.path.join(h.BENCH, "gen_icechunk.py"),
                        "--out", out, "--side", str(side)], check=True)
    return out


def one(bench, backend, out, fmt):
    with h.Catalog(bench, backend, f"icechunk_{backend}") as catalog:
        with h.Server(bench, catalog.url) as server:
            server.object_store(out)
            time.sleep(0.5)
            idle = server.rss_kib()
            cpu0 = server.cpu()
            if fmt == "icechunk":
                body = os.path.join(bench.work, "icechunk.json")
                with open(body, "w") as f:
                    json.dump({"repository": f"file://{out}/repo"}, f)
                status, seconds, answer = server.register("k", body, "?format=icechunk")
            else:
                status, seconds, answer = server.register("k", os.path.join(out, "native.json"), "?format=native")
            cpu1 = server.cpu()
            peak = server.hwm_kib()
            refs = answer["chunks"]["virtual"] + answer["chunks"]["inline"]
        return {"backend": backend, "format": fmt, "refs": refs, "status": status, "seconds": seconds,
                "server_cpu": cpu1 - cpu0, "idle_rss_mib": idle / 1024, "peak_rss_mib": peak / 1024}


def main():
    side = h.env_int("SIDE", 1000)
    backends = os.environ.get("BACKENDS", "postgres,sqlite").split(",")
    runs = h.runs(5)
    bench = h.Bench()
    quiet = h.Quiet()
    try:
        out = generate(bench, side)
        quiet.wait("icechunk registration")
        results = []
        for backend in backends:
            for r in range(runs):
                # The baseline and Icechunk in the same run, one after the other.
                for fmt in FORMATS:
                    what = f"icechunk {backend} {fmt} run {r + 1}/{runs}"
                    res = h.repeat_quietly(quiet, what, lambda: one(bench, backend, out, fmt))
                    h.log(f"{what}: {res['seconds']:.2f} s, peak {res['peak_rss_mib']:.0f} MiB")
                    results.append(res)
        bench.publish("icechunk", results, render)
    finally:
        bench.cleanup()


def render(data):
    rows = []
    for backend in sorted({r["backend"] for r in data["results"]}):
        native = [r for r in data["results"] if r["backend"] == backend and r["format"] == "native JSON"]
        for fmt in FORMATS:
            rs = [r for r in data["results"] if r["backend"] == backend and r["format"] == fmt]
            if not rs:
                continue
            secs = [r["seconds"] for r in rs]
            ratio = h.median(secs) / h.median([r["seconds"] for r in native]) if native else float("nan")
            rows.append([backend, fmt, f"{rs[0]['refs']:,}", h.fmt_spread(secs), f"{ratio:.2f}x",
                         h.fmt(h.median([r["server_cpu"] for r in rs])),
                         h.fmt(h.median([r["peak_rss_mib"] for r in rs]), 0)])
    return h.table(["backend", "format", "references", "seconds (median, spread)", "vs native",
                    "server CPU s", "peak RSS MiB"], rows)


if __name__ == "__main__":
    main()
