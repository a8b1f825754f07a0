#!/usr/bin/env python3
"""Peak memory of registering many files joined into one store (issue 36, "RSS bounded by
configuration whatever the file count"): JOIN_FILES (default 1e4,1e5) GOES-named netCDF4 files of
one chunk each (`footprint.py`'s, written once and kept) registered with `?format=files` as a
prefix and glob joined along `time`, on a fresh SQLite catalog, by each binary of BINARIES
(`name=path,name=path`; default: ZARRGATE_BIN or target/release/zarrgate as `final`), one after
the other, RUNS (3) times each. Reported: the server's peak RSS (VmHWM) and the registration's
seconds, median (range), and the ratio of each binary's median RSS to the first's.

  BINARIES=main=/tmp/zg-main,final=target/release/zarrgate python3 bench/registration_rss.py
"""

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
from footprint import goes_files  # noqa: E402


def one(bench, binary, n):
    root = goes_files(bench, n)
    with tempfile.TemporaryDirectory(prefix="zgrss-") as work, \
            h.Server(bench, f"sqlite://{work}/catalog.db", binary=binary) as server:
        server.put_json("/api/v1/object-stores/goes", {"url": f"file://{root}/"})
        started = time.time()
        server.put_json("/api/v1/stores/goes?format=files", {
            "files": {"prefix": f"file://{root}/", "glob": "**/*.nc"},
            "combine": {"join": "existing", "dim": "time"}})
        seconds = time.time() - started
        return {"seconds": seconds, "rss_peak_mib": h.proc_status(server.proc.pid, "VmHWM") / 1024}


def main():
    sizes = [int(float(s)) for s in os.environ.get("JOIN_FILES", "1e4,1e5").split(",") if s]
    bench = h.Bench()
    binaries = [tuple(b.split("=", 1)) for b in os.environ.get("BINARIES", f"final={bench.binary}").split(",")]
    runs = h.runs(3)
    quiet = h.Quiet()
    results = []
    try:
        for n in sizes:
            goes_files(bench, n)
            for r in range(runs):
                for name, binary in binaries:
                    what = f"registration rss {n} {name} run {r + 1}/{runs}"
                    res = h.repeat_quietly(quiet, what, lambda: one(bench, binary, n))
                    res.update({"files": n, "binary": name, "path": binary})
                    h.log(f"{what}: {res['seconds']:.1f} s, peak RSS {res['rss_peak_mib']:.0f} MiB")
                    results.append(res)
        bench.publish("registration-rss", results, render)
    finally:
        bench.cleanup()


def render(data):
    rows, first = [], {}
    results = data["results"]
    # Each binary's median peak at the previous size: what one more file costs is the growth
    # from it, the server's own baseline aside.
    before = {}
    for n in sorted({r["files"] for r in results}):
        for name in dict.fromkeys(r["binary"] for r in results if r["files"] == n):
            mine = [r for r in results if r["files"] == n and r["binary"] == name]
            rss = [r["rss_peak_mib"] for r in mine]
            first.setdefault(n, h.median(rss))
            growth = "-"
            if name in before:
                m, peak = before[name]
                growth = h.fmt((h.median(rss) - peak) * 1024 * 1024 / (n - m), 0)
            before[name] = (n, h.median(rss))
            rows.append([f"{n:,}", name, h.fmt_spread(rss, 0), h.fmt(h.median(rss) / first[n]),
                         h.fmt_spread([r["seconds"] for r in mine], 1),
                         h.fmt(h.median(rss) * 1024 * 1024 / n / 1024, 1), growth])
    return h.table(["files", "binary", "peak RSS MiB", "vs first", "seconds", "KiB per file",
                    "bytes per file added"], rows)


if __name__ == "__main__":
    main()
