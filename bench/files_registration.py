#!/usr/bin/env python3
"""Registering files the server reads itself (`?format=files`) against VirtualiZarr, on an
object store far away.

`FILES` (200) netCDF4 files, each with 4 variables of 100 zlib chunks (netCDF4-python, the
layout netCDF-C writes), are uploaded to `moto_server`'s S3 behind the proxy of
`remote_latency.py` that sleeps `LATENCY_MS` (20) before every request and counts GETs. Then,
in each of `RUNS` (3) runs, on fresh object names (cold):

- zarrgate: one store of all the files joined along `time` (`PUT ?format=files` with
  `"combine": {"join": "existing", "dim": "time"}`: what `open_virtual_mfdataset` below makes),
  wall time to the answer; `MODE=each` instead registers each file as a store of its own,
  `CONCURRENCY` (8) registrations at once. GETs and their body bytes per file counted at the
  proxy, requests and bytes from the parse metrics, against each file's metadata (the file's
  size less its chunks' stored bytes, from h5py);
- VirtualiZarr 2.5: `open_virtual_mfdataset` of the same URLs through obstore's S3Store on the
  same proxy, with the fastest executor that works here (`EXECUTOR`: `threads`, the default,
  a ThreadPoolExecutor; `serial`), combined along `time`, then
  `zarrgate_client.manifeststore_to_native` (the conversion a user must run before uploading).

The ratio is zarrgate's wall time over VirtualiZarr's, median over the runs. For many files
(issue 36: `FILES=10000 NT=4`), VirtualiZarr reads a sample of `VZ_SAMPLE` (200) of them and its
time is scaled linearly (said in the table); `FILES_AS=prefix` registers the files as a prefix
and glob, then puts one more file under the prefix and times `POST .../sync` (the rescan). The
server's peak RSS (VmHWM) is reported. Results go to
`results/files-registration.json`. Needs the test venv (`scripts/python-env.sh`: netCDF4,
h5py, VirtualiZarr, obstore, moto) and the release binary (`ZARRGATE_BIN`, or built).

    "$(scripts/python-env.sh | tail -1)/bin/python" bench/files_registration.py
    FILES=20 RUNS=1 "$(scripts/python-env.sh | tail -1)/bin/python" bench/files_registration.py
    FILES=10000 NT=4 FILES_AS=prefix RUNS=1 "$(scripts/python-env.sh | tail -1)/bin/python" bench/files_registration.py
"""

import concurrent.futures
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))
from harness import (Bench, Server, cpu_seconds, fmt, log, median, perf_record, perf_report, proc_status, runs,  # noqa: E402
                     table)  # noqa: E402
from remote_latency import LATENCY_MS, S3Upstream  # noqa: E402

import h5py  # noqa: E402
import netCDF4  # noqa: E402
import numpy as np  # noqa: E402
import obstore  # noqa: E402
import requests  # noqa: E402

FILES = int(os.environ.get("FILES", "200"))
CONCURRENCY = int(os.environ.get("CONCURRENCY", "8"))
MODE = os.environ.get("MODE", "combined")
EXECUTOR = os.environ.get("EXECUTOR", "threads")
NT, NY, NX = int(os.environ.get("NT", "100")), 16, 16
# VirtualiZarr reads a sample of this many files, its time scaled to all of them.
VZ_SAMPLE = min(int(os.environ.get("VZ_SAMPLE", "200")), FILES)
# `prefix`: registered as {"prefix", "glob"}, then one file added and `POST .../sync` timed.
FILES_AS = os.environ.get("FILES_AS", "list")


def make_file(path, index):
    """4 variables (time, y, x) of NT (100) chunks (1, NY, NX) each, zlib: 400 chunks."""
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.createDimension("time", NT)
        nc.createDimension("y", NY)
        nc.createDimension("x", NX)
        t = nc.createVariable("time", "f8", ("time",))
        t.units = "hours since 2000-01-01"
        t[:] = np.arange(NT) + index * NT
        rng = np.random.default_rng(index)
        for name in ("t2m", "u10", "v10", "sp"):
            v = nc.createVariable(name, "f4", ("time", "y", "x"), zlib=True, chunksizes=(1, NY, NX))
            v.units = "1"
            v[:] = rng.random((NT, NY, NX), dtype="f4")


def metadata_bytes(path):
    """The file's size less its chunks' stored bytes: what a parser must read at least."""
    with h5py.File(path, "r") as f:
        stored = sum(f[n].id.get_storage_size() for n in f if isinstance(f[n], h5py.Dataset))
    return os.path.getsize(path) - stored


def zarrgate_run(server, upstream, names, run):
    def put(store, urls, **extra):
        r = requests.put(f"{server.base}/api/v1/stores/{store}", params={"format": "files"},
                         json={"files": urls, "parser": "hdf5", **extra}, timeout=600)
        if r.status_code >= 300:
            raise RuntimeError(f"PUT {store}: {r.status_code} {r.text[:500]}")
        return r.json()

    def one(name):
        return put(f"f{run}-{name.replace('.', '-').replace('/', '-')}", [upstream.url(name)])
    before = (server.metric("zarrgate_parse_bytes_total"), server.metric("zarrgate_parse_requests_total"))
    gets_before = sum(upstream.count(n) for n in names)
    sent_before = sum(upstream.sent_bytes(n) for n in names)
    # PROFILE_REGISTRATION=FILE: the server recorded (`perf record -g`) for PROFILE_SECONDS (3)
    # from just before run PROFILE_RUN's (0) registration, the report written to FILE.
    profile = os.environ.get("PROFILE_REGISTRATION") if run == int(os.environ.get("PROFILE_RUN", "0")) else None
    if profile:
        recorder, data = perf_record(server.proc.pid, float(os.environ.get("PROFILE_SECONDS", "3")), profile)
        time.sleep(0.5)
    cpu = cpu_seconds(server.proc.pid)
    started = time.perf_counter()
    if MODE == "each":
        with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as pool:
            answers = list(pool.map(one, names))
    elif FILES_AS == "prefix":
        answers = [put(f"joined-{run}", {"prefix": upstream.url(f"run{run}/"), "glob": "*.nc"},
                       combine={"join": "existing", "dim": "time"})]
    else:
        answers = [put(f"joined-{run}", [upstream.url(n) for n in names],
                       combine={"join": "existing", "dim": "time"})]
    if MODE != "each":
        # Each file's 4 variables by reference; the joined coordinate `time` read and stored
        # inline, one chunk (since stop 49).
        chunks = answers[0]["chunks"]
        assert (chunks["virtual"], chunks["inline"]) == (len(names) * 4 * NT, 1), chunks
        # The server's own account of the registration (its phases' seconds).
        for line in open(server.log_path).read().splitlines()[-2000:]:
            if "files registered: phases" in line and f"joined-{run} " in line:
                log(line[line.index("files="):])
    seconds = time.perf_counter() - started
    cpu = cpu_seconds(server.proc.pid) - cpu
    if profile:
        recorder.wait()
        perf_report(data, profile)
        log(f"registration profile: {profile}")
    log(f"zarrgate: {seconds:.2f} s, the server's CPU {cpu:.2f} s ({cpu / len(names) * 1000:.2f} ms a file)")
    parse_bytes = server.metric("zarrgate_parse_bytes_total") - before[0]
    reads = server.metric("zarrgate_parse_requests_total") - before[1]
    gets = sum(upstream.count(n) for n in names) - gets_before
    sent = sum(upstream.sent_bytes(n) for n in names) - sent_before
    assert all(a["arrays"] == 5 for a in answers), answers[0]
    return {"seconds": seconds, "cpu_seconds": cpu, "bytes_per_file": parse_bytes / len(names), "requests_per_file": reads / len(names),
            "gets_per_file": gets / len(names), "upstream_bytes_per_file": sent / len(names)}


def virtualizarr_run(upstream, names):
    from obspec_utils.registry import ObjectStoreRegistry
    from virtualizarr import open_virtual_mfdataset
    from virtualizarr.parsers import HDFParser
    import zarrgate_client

    names = names[:VZ_SAMPLE]
    registry = ObjectStoreRegistry({f"s3://{upstream.bucket}": upstream.direct_store()})
    parallel = concurrent.futures.ThreadPoolExecutor if EXECUTOR == "threads" else False
    started = time.perf_counter()
    vds = open_virtual_mfdataset([upstream.url(n) for n in names], parser=HDFParser(), registry=registry,
                                 combine="nested", concat_dim="time", parallel=parallel)
    opened = time.perf_counter() - started
    doc = zarrgate_client.manifeststore_to_native(vds)
    seconds = time.perf_counter() - started
    assert len(doc["nodes"]["t2m"]["manifest"]) == NT * len(names)
    # Scaled linearly from the sample to every file.
    scale = FILES / len(names)
    return {"seconds": seconds * scale, "open_seconds": opened * scale, "sample": len(names),
            "sample_seconds": seconds}


def rescan(server, upstream, path, run):
    """One file more under the prefix, then `POST .../sync`: seconds to its answer. With
    PROFILE_RESCAN=FILE, the server is profiled (`perf record -g`) during the sync, its report
    written to FILE, and the server's log line of the new version (its phases' seconds) shown."""
    with open(path, "rb") as f:
        obstore.put(upstream.writer, f"run{run}/f{FILES:05d}-new.nc", f.read())
    profile = os.environ.get("PROFILE_RESCAN")
    if profile:
        recorder, data = perf_record(server.proc.pid, 8, profile)
        time.sleep(0.5)
    cpu = cpu_seconds(server.proc.pid)
    started = time.perf_counter()
    r = requests.post(f"{server.base}/api/v1/stores/joined-{run}/sync", timeout=600)
    seconds = time.perf_counter() - started
    cpu = cpu_seconds(server.proc.pid) - cpu
    if profile:
        recorder.wait()
        perf_report(data, profile)
        log(f"rescan profile: {profile}")
    # The server's own account of the rescan (its phases' seconds).
    for line in open(server.log_path).read().splitlines()[-400:]:
        if "store registered" in line or "rescan" in line:
            log(line[-400:])
    if r.status_code != 200 or len(r.json()["added"]) != 1:
        raise RuntimeError(f"sync: {r.status_code} {r.text[:500]}")
    # The floor under any rescan: the same prefix listed directly (obstore, the same proxy).
    started = time.perf_counter()
    listed = sum(len(page) for page in obstore.list(upstream.direct_store(), prefix=f"run{run}/"))
    floor = time.perf_counter() - started
    log(f"rescan {seconds:.2f} s (the server's CPU {cpu:.2f} s); listing the {listed} objects directly {floor:.2f} s")
    return seconds, floor


def render(data):
    rows = []
    for r in data["results"]["runs"]:
        z, v = r["zarrgate"], r["virtualizarr"]
        rows.append([r["run"], fmt(z["seconds"]), fmt(v["seconds"]), fmt(z["seconds"] / v["seconds"], 3),
                     fmt(z["requests_per_file"]), fmt(z["gets_per_file"]), fmt(z["bytes_per_file"] / data["metadata_bytes"]),
                     fmt(z["upstream_bytes_per_file"] / data["metadata_bytes"])])
    ratio = median([r["zarrgate"]["seconds"] / r["virtualizarr"]["seconds"] for r in data["results"]["runs"]])
    out = table(["run", "zarrgate s", "VirtualiZarr s", "ratio", "requests/file", "GETs/file", "bytes/metadata",
                 "proxy bytes/metadata"], rows) + f"\nmedian ratio zarrgate/VirtualiZarr: {fmt(ratio, 3)} (target <= 0.05)\n"
    first = data["results"]["runs"][0]
    if first["virtualizarr"].get("sample", data["files"]) < data["files"]:
        out += f"VirtualiZarr timed on {first['virtualizarr']['sample']} of the {data['files']} files, scaled linearly\n"
    rescans = [r["zarrgate"]["rescan_seconds"] for r in data["results"]["runs"] if "rescan_seconds" in r["zarrgate"]]
    if rescans:
        out += f"rescan with one new file (POST sync): median {fmt(median(rescans))} s (target <= 2 s)\n"
        floors = [r["zarrgate"]["listing_seconds"] for r in data["results"]["runs"] if "listing_seconds" in r["zarrgate"]]
        if floors:
            out += f"the prefix listed directly (obstore, same proxy): median {fmt(median(floors))} s\n"
    out += f"server peak RSS: {fmt(max(r['zarrgate']['rss_peak_mib'] for r in data['results']['runs']))} MiB\n"
    return out


def main():
    bench = Bench()
    upstream = S3Upstream(LATENCY_MS, bench.work)
    local = os.path.join(bench.work, "files")
    os.makedirs(local)
    paths = []
    for i in range(FILES):
        path = os.path.join(local, f"f{i:05d}.nc")
        make_file(path, i)
        paths.append(path)
    meta = median([metadata_bytes(p) for p in paths[:5]])
    log(f"{FILES} files of {os.path.getsize(paths[0])} bytes, {meta} of metadata each")
    results = []
    try:
        with Server(bench, f"sqlite://{bench.work}/catalog.db") as server:
            server.put_json(f"/api/v1/object-stores/{upstream.object_store}", upstream.registration())
            for run in range(runs(3)):
                names = []
                for i, path in enumerate(paths):
                    name = f"run{run}/f{i:05d}.nc"
                    with open(path, "rb") as f:
                        obstore.put(upstream.writer, name, f.read())
                    names.append(name)
                z = zarrgate_run(server, upstream, names, run)
                if FILES_AS == "prefix":
                    # The peak before the rescan is the registration's: a higher one after is the rescan's.
                    z["rss_peak_registration_mib"] = proc_status(server.proc.pid, "VmHWM") / 1024
                    z["rescan_seconds"], z["listing_seconds"] = rescan(server, upstream, paths[0], run)
                z["rss_peak_mib"] = proc_status(server.proc.pid, "VmHWM") / 1024
                log(f"run {run}: peak RSS {z.get('rss_peak_registration_mib', float('nan')):.0f} MiB after the "
                    f"registration, {z['rss_peak_mib']:.0f} MiB in all")
                # VZ=0: zarrgate only (profiling a rescan), VirtualiZarr's time left out.
                v = virtualizarr_run(upstream, names) if os.environ.get("VZ", "1") != "0" else {"seconds": float("nan")}
                log(f"run {run}: zarrgate {z['seconds']:.2f} s, VirtualiZarr {v['seconds']:.2f} s")
                results.append({"run": run, "zarrgate": z, "virtualizarr": v})
    finally:
        upstream.close()
    name = "files-registration" if FILES == 200 and NT == 100 else f"files-registration-{FILES}x{NT}"
    bench.publish(name, {"runs": results}, render, latency_ms=LATENCY_MS, files=FILES,
                  metadata_bytes=meta, executor=EXECUTOR, concurrency=CONCURRENCY, mode=MODE)
    bench.cleanup()


if __name__ == "__main__":
    main()
