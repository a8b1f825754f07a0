#!/usr/bin/env python3
"""Memory of a rescan that finds one file added (issue 36): `N` (1e4) GOES-named netCDF4 files of
one chunk each (`footprint.py`'s, written once and kept) registered as a prefix and glob joined
along `time`, on a fresh catalog (`DB`: `sqlite`, the default, or `pg`: a database created for
the run on `ZARRGATE_BENCH_POSTGRES_URL`'s server); then one file more is put under the prefix
and `POST .../sync` rescans. Each binary of `BINARIES` (`name=path,...`; default: ZARRGATE_BIN
or target/release/zarrgate as `final`) runs `RUNS` (1) times. Reported per run: the
registration's seconds and peak RSS (VmHWM), the RSS it left, the sync's seconds and its own
peak (VmHWM reset before it through /proc/PID/clear_refs), and the median of each over the runs.
`TIMELINE=1` also prints the RSS through the sync (sampled every 5 ms, a line per 2 MiB) and the
server's log of the rescan's phases.

  MIMALLOC_PURGE_DELAY=0 BINARIES=main=/tmp/zg-main,final=/tmp/zg-final RUNS=3 python3 bench/rescan_rss.py
"""

import glob
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
from footprint import goes_files  # noqa: E402

import requests  # noqa: E402


def sampled(pid, stop, samples):
    while not stop.is_set():
        samples.append((time.time(), h.proc_status(pid, "VmRSS") / 1024))
        time.sleep(0.005)


def one(bench, binary, n, db):
    root = goes_files(bench, n)
    files = sorted(glob.glob(f"{root}/**/*.nc", recursive=True))
    extra = files[-1].replace(".nc", "-zz.nc")
    pg = h.Postgres("rescan") if db == "pg" else None
    if pg:
        pg.__enter__()
    try:
        with tempfile.TemporaryDirectory(prefix="zgrescan-") as work, \
                h.Server(bench, pg.url if pg else f"sqlite://{work}/catalog.db", binary=binary,
                         env={"ZARRGATE_FILES_MAX_FILES": str(max(n + 10, 100_000))}) as server:
            server.put_json("/api/v1/object-stores/goes", {"url": f"file://{root}/"})
            started = time.time()
            server.put_json("/api/v1/stores/goes?format=files", {
                "files": {"prefix": f"file://{root}/", "glob": "**/*.nc"},
                "combine": {"join": "existing", "dim": "time"}})
            registered = time.time() - started
            pid = server.proc.pid
            time.sleep(1)
            left = h.proc_status(pid, "VmRSS") / 1024
            registration_peak = h.proc_status(pid, "VmHWM") / 1024
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")
            shutil.copy(files[-1], extra)
            samples, stop = [], threading.Event()
            poller = threading.Thread(target=sampled, args=(pid, stop, samples))
            poller.start()
            try:
                started = time.time()
                r = requests.post(f"{server.base}/api/v1/stores/goes/sync", timeout=600)
                synced = time.time() - started
                if r.status_code != 200 or len(r.json()["added"]) != 1:
                    raise RuntimeError(f"sync: {r.status_code} {r.text[:300]}")
            finally:
                os.unlink(extra)
                stop.set()
                poller.join()
            sync_peak = h.proc_status(pid, "VmHWM") / 1024
            if os.environ.get("TIMELINE"):
                last = None
                for at, rss in samples:
                    if last is None or abs(rss - last) >= 2:
                        h.log(f"  {at - samples[0][0]:6.3f} s  {rss:6.1f} MiB")
                        last = rss
                for line in open(server.log_path).read().splitlines()[-30:]:
                    if "rescan" in line or "registered" in line:
                        h.log("  " + line[-300:])
    finally:
        if pg:
            pg.drop()
    return {"registration_seconds": registered, "registration_peak_mib": registration_peak,
            "left_mib": left, "sync_seconds": synced, "sync_peak_mib": sync_peak}


def main():
    n = int(float(os.environ.get("N", "1e4")))
    db = os.environ.get("DB", "sqlite")
    bench = h.Bench()
    binaries = [tuple(b.split("=", 1)) for b in os.environ.get("BINARIES", f"final={bench.binary}").split(",")]
    runs = h.runs(1)
    results = []
    for r in range(runs):
        for name, binary in binaries:
            res = one(bench, binary, n, db)
            res.update({"files": n, "binary": name, "db": db, "run": r + 1})
            h.log(f"{name} run {r + 1}/{runs}: " + ", ".join(f"{k} {h.fmt(v)}" for k, v in res.items()
                                                             if isinstance(v, float)))
            results.append(res)
    keys = ["registration_seconds", "registration_peak_mib", "left_mib", "sync_seconds", "sync_peak_mib"]
    rows = []
    for name, _ in binaries:
        mine = [r for r in results if r["binary"] == name]
        rows.append([name, db, f"{n:,}"] + [h.fmt(h.median([r[k] for r in mine])) for k in keys])
    print(h.table(["binary", "catalog", "files", "registration s", "its peak MiB", "left MiB", "sync s",
                   "sync peak MiB"], rows))
    h.save(f"rescan-rss-{db}", {"machine": h.machine(), "results": results})


if __name__ == "__main__":
    main()
