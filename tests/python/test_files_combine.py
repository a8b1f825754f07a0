"""Several files as one store (``"combine"`` of format ``files``), and files named by a prefix.

Files written with netCDF4 are registered together and read back through plain
``xr.open_zarr(url)``: the store must equal what xarray makes of the same files
(``xr.open_mfdataset(..., combine="nested", concat_dim=D)``, or ``xr.merge`` for a
union), values, coordinates and attributes. Files that cannot be joined by
references alone, and bad specs, are refused naming what is wrong.

Growing archives: a prefix on S3 (moto) rescanned by ``POST .../sync`` makes a new version
only when files were added, changed or removed (pinned versions stay as they were), leaves out
files modified less than ``older_than_seconds`` ago, and parses no file twice; a prefix with
``follow_seconds`` picks up a new file by itself; a store made from files refuses ``PATCH``.
"""

from __future__ import annotations

import os
import time
import zlib
from pathlib import Path

import netCDF4
import numpy as np
import requests
import xarray as xr
import zarr

import zarrgate_client
from conftest import moto_s3, private_server, register_s3_store
from test_files import assert_same, open_plain, put_files

X = 3


def write_daily(path: Path, first_day: int, steps: int = 1, chunk: int = 1, zlib: bool = False,
                units: str = "days since 2000-01-01") -> Path:
    """``air(time, x)`` of ``steps`` days from ``first_day``, chunked ``chunk`` along time,
    with the coordinates ``time`` and ``x`` and ``land(x)``, which has no time."""
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.title = "zarrgate test: daily air"
        nc.createDimension("time", None)
        nc.createDimension("x", X)
        t = nc.createVariable("time", "f8", ("time",), chunksizes=(chunk,))
        t.units, t.calendar, t.standard_name = units, "standard", "time"
        x = nc.createVariable("x", "i4", ("x",))
        x[:] = np.arange(X) * 10
        land = nc.createVariable("land", "i1", ("x",))
        land[:] = [1, 0, 1]
        air = nc.createVariable("air", "f4", ("time", "x"), chunksizes=(chunk, X), zlib=zlib)
        air.units, air.long_name = "K", "air temperature"
        days = np.arange(first_day, first_day + steps)
        t[:] = days if units.startswith("days") else days * 24
        air[:] = (days[:, None] * 10 + np.arange(X)[None, :]).astype("f4") / 4
    return path


def mfdataset(paths: list[Path], dim: str, **kwargs) -> xr.Dataset:
    """What xarray makes of the files joined along ``dim``: ``xr.open_mfdataset(paths,
    combine="nested", concat_dim=dim)`` is each file opened (h5netcdf, as for one file) and
    ``xr.combine_nested``; called here without its dask (which the test environment has not)."""
    options = {"data_vars": "minimal", "coords": "minimal", "compat": "override", "join": "exact"} | kwargs
    opened = [xr.open_dataset(p, engine="h5netcdf").load() for p in paths]
    return xr.combine_nested(opened, concat_dim=dim, combine_attrs="override", **options)


def combine_existing(dim: str = "time") -> dict:
    return {"join": "existing", "dim": dim}


def test_combine_thirty_daily_files_along_time_by_references_only(server, source_dir, store_name):
    paths = [write_daily(source_dir / f"day_{i:02d}.nc", i) for i in range(30)]
    upstream = metric(server, "zarrgate_upstream_requests_total")
    answer = put_files(server, store_name, [p.as_uri() for p in paths], combine=combine_existing())
    # One GET a file, its first bytes (the sidecar looked for is a 404, not counted): time's
    # values come from the bytes each parse read, not from one more request a file.
    upstream = metric(server, "zarrgate_upstream_requests_total") - upstream
    assert upstream == 30, upstream
    chunks = answer["chunks"]
    # air: one chunk per file; x, land: the first file's; time: read, concatenated, inline
    assert (chunks["virtual"], chunks["inline"], chunks["assembled"], chunks["missing"]) == (30 + 2, 1, 0, 0), chunks
    time_array = requests.get(f"{server.url}/{store_name}/time/zarr.json", timeout=30).json()
    assert time_array["shape"] == [30] and time_array["chunk_grid"]["configuration"]["chunk_shape"] == [30]
    assert time_array["data_type"] == "float64" and time_array["attributes"]["units"].startswith("days since")
    served = open_plain(f"{server.url}/{store_name}")
    assert served.sizes["time"] == 30
    assert_same(served, mfdataset(paths, "time"))
    origin = requests.get(f"{server.url}/api/v1/stores/{store_name}", timeout=30).json()["files"]
    assert [f["url"] for f in origin["files"]] == [p.as_uri() for p in paths]
    assert origin["combine"] == combine_existing(), origin


def parses(server, outcome: str) -> float:
    """``zarrgate_parse_files_total{parser="hdf5",outcome=...}`` as the server counts it now."""
    metrics = requests.get(f"{server.url}/metrics", timeout=30).text
    line = f'zarrgate_parse_files_total{{outcome="{outcome}",parser="hdf5"}} '
    return sum(float(m[len(line):]) for m in metrics.splitlines() if m.startswith(line))


def test_a_file_already_parsed_is_not_parsed_again_until_it_is_rewritten(server, source_dir, store_name):
    paths = [write_daily(source_dir / f"day_{i:02d}.nc", i) for i in range(4)]
    put_files(server, store_name, [p.as_uri() for p in paths[:3]], combine=combine_existing())
    # the same three and a fourth, as another store: only the fourth is parsed
    grown = f"{store_name}-grown"
    ok, cached = parses(server, "ok"), parses(server, "cached")
    put_files(server, grown, [p.as_uri() for p in paths], combine=combine_existing())
    assert (parses(server, "ok") - ok, parses(server, "cached") - cached) == (1, 3)
    origin = requests.get(f"{server.url}/api/v1/stores/{grown}", timeout=30).json()["files"]
    assert [f.get("cached", False) for f in origin["files"]] == [True, True, True, False], origin
    assert_same(open_plain(f"{server.url}/{grown}"), mfdataset(paths, "time"))

    # a file rewritten (new values, same layout) is parsed again, not served from its old parse
    time.sleep(0.01)
    write_daily(paths[3], 7)
    ok, cached = parses(server, "ok"), parses(server, "cached")
    put_files(server, grown, [p.as_uri() for p in paths], status=200, combine=combine_existing())
    assert (parses(server, "ok") - ok, parses(server, "cached") - cached) == (1, 3)
    served = open_plain(f"{server.url}/{grown}")
    assert served["time"].values[-1] == np.datetime64("2000-01-08")
    assert_same(served, mfdataset(paths, "time"))


def write_forecast(path: Path, base: float) -> Path:
    """``t2m(step, x)`` of one forecast run, with the coordinates ``step`` and ``x``."""
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.title = "zarrgate test: forecast"
        nc.createDimension("step", 4)
        nc.createDimension("x", X)
        step = nc.createVariable("step", "i4", ("step",))
        step.units = "hours"
        step[:] = [0, 6, 12, 18]
        x = nc.createVariable("x", "i4", ("x",))
        x[:] = np.arange(X)
        t2m = nc.createVariable("t2m", "f4", ("step", "x"), chunksizes=(2, X), zlib=True)
        t2m.units = "K"
        t2m[:] = base + np.arange(4 * X, dtype="f4").reshape(4, X)
    return path


def test_combine_forecast_runs_as_a_new_dimension_dated_by_their_names(server, source_dir, store_name):
    names = ["fc_20240101_00.nc", "fc_20240101_12.nc", "fc_20240102_00.nc"]
    paths = [write_forecast(source_dir / n, 270.0 + i) for i, n in enumerate(names)]
    spec = {"join": "new", "dim": "run", "pattern": r"fc_(\d{8})_(\d{2})\.nc", "format": "%Y%m%d%H"}
    put_files(server, store_name, [p.as_uri() for p in paths], combine=spec)
    served = open_plain(f"{server.url}/{store_name}")
    runs = np.array(["2024-01-01T00", "2024-01-01T12", "2024-01-02T00"], dtype="datetime64[ns]")
    np.testing.assert_array_equal(served["run"].values.astype("datetime64[ns]"), runs)
    assert served["t2m"].dims == ("run", "step", "x")
    expected = mfdataset(paths, "run", data_vars="all").assign_coords(run=runs)
    assert_same(served, expected)

    other = source_dir / "analysis.nc"
    write_forecast(other, 0.0)
    refused = put_files(server, f"{store_name}-x", [paths[0].as_uri(), other.as_uri()], combine=spec, status=422)
    assert "analysis.nc" in refused["detail"] and "does not match" in refused["detail"], refused


def test_combine_two_files_of_different_variables_by_union(server, source_dir, store_name):
    paths = []
    for name, title in [("u", "eastward"), ("v", "northward")]:
        path = source_dir / f"{name}.nc"
        with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
            nc.title = f"zarrgate test: {title} wind"
            nc.createDimension("x", X)
            x = nc.createVariable("x", "i4", ("x",))
            x[:] = np.arange(X)
            wind = nc.createVariable(name, "f4", ("x",))
            wind.units = "m s-1"
            wind[:] = np.arange(X, dtype="f4") * (2 if name == "u" else -3)
        paths.append(path)
    put_files(server, store_name, [p.as_uri() for p in paths], combine={"join": "union"})
    served = open_plain(f"{server.url}/{store_name}")
    opened = [xr.open_dataset(p, engine="h5netcdf").load() for p in paths]
    assert_same(served, xr.merge(opened, compat="override", join="exact", combine_attrs="override"))


def test_combine_refuses_files_whose_codecs_differ_naming_both(server, source_dir, store_name):
    plain = write_daily(source_dir / "plain.nc", 0)
    packed = write_daily(source_dir / "zlib.nc", 1, zlib=True)
    refused = put_files(server, store_name, [plain.as_uri(), packed.as_uri()], combine=combine_existing(),
                        status=422)
    detail = refused["detail"]
    assert plain.as_uri() in detail and packed.as_uri() in detail and "air" in detail and "codecs" in detail, refused
    assert requests.get(f"{server.url}/api/v1/stores/{store_name}", timeout=30).status_code == 404


def test_combine_converts_a_coordinate_written_in_other_units(server, source_dir, store_name):
    # The second file counts hours, the first days: the joined time is read, written in the
    # first file's units and stored inline, so the datetimes are the files' own.
    days = write_daily(source_dir / "days.nc", 0, steps=2)
    hours = write_daily(source_dir / "hours.nc", 2, steps=2, units="hours since 2000-01-01")
    answer = put_files(server, store_name, [days.as_uri(), hours.as_uri()], combine=combine_existing())
    assert answer["chunks"]["inline"] == 1, answer["chunks"]
    served = open_plain(f"{server.url}/{store_name}")
    np.testing.assert_array_equal(served["time"].values, np.array(
        ["2000-01-01", "2000-01-02", "2000-01-03", "2000-01-04"], dtype="datetime64[ns]"))
    assert served["time"].encoding["units"] == "days since 2000-01-01"
    expected = mfdataset([days, hours], "time")
    assert_same(served.drop_vars("time"), expected.drop_vars("time"))
    np.testing.assert_array_equal(served["time"].values, expected["time"].values)

    noleap = write_daily(source_dir / "noleap.nc", 0, units="days since 1999-01-01")
    with netCDF4.Dataset(noleap, "a") as nc:
        nc["time"].calendar = "noleap"
    refused = put_files(server, f"{store_name}-x", [days.as_uri(), noleap.as_uri()], combine=combine_existing(),
                        status=422)
    assert "noleap" in refused["detail"] and noleap.as_uri() in refused["detail"], refused


def test_combine_orders_files_by_their_coordinate(server, source_dir, store_name):
    # Named against time order: "b" holds the first days, "a" the last.
    late = write_daily(source_dir / "a.nc", 5, steps=3)
    early = write_daily(source_dir / "b.nc", 0, steps=5)
    spec = {"join": "existing", "dim": "time", "order": "coordinate"}
    put_files(server, store_name, [late.as_uri(), early.as_uri()], combine=spec)
    served = open_plain(f"{server.url}/{store_name}")
    assert_same(served, mfdataset([early, late], "time"))
    origin = requests.get(f"{server.url}/api/v1/stores/{store_name}", timeout=30).json()["files"]
    assert [f["url"] for f in origin["files"]] == [early.as_uri(), late.as_uri()], origin


def metric(server, name: str, **labels) -> float:
    """The sum of ``name``'s series with ``labels``, as the server counts them now."""
    total = 0.0
    for line in requests.get(f"{server.url}/metrics", timeout=30).text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_combine_yearly_files_whose_chunks_span_the_seams(server, source_dir, store_name):
    # 2023, 2024 (a leap year) and 2025 of daily data chunked 10 along time: 365 and 366 are no
    # multiples of 10, so every file after the first starts inside a chunk of the joined array,
    # and each file's last chunk is padded to 10 steps in the middle of it.
    firsts, lengths = [0, 365, 731], [365, 366, 365]
    paths = [write_daily(source_dir / f"year_{2023 + i}.nc", first, steps=n, chunk=10, zlib=True)
             for i, (first, n) in enumerate(zip(firsts, lengths))]
    answer = put_files(server, store_name, [p.as_uri() for p in paths], combine=combine_existing())
    chunks = answer["chunks"]
    # air: 110 chunks along the 1096 days; the first file's 36 whole chunks are references, the
    # 74 after it are assembled. x and land: the first file's. time: one inline chunk.
    assert chunks["assembled"] == 74 and chunks["virtual"] == 36 + 2, chunks
    assert chunks["missing"] == 0 and chunks["inline"] == 1, chunks
    served = open_plain(f"{server.url}/{store_name}")
    assert served.sizes["time"] == 1096
    assert_same(served, mfdataset(paths, "time"))
    built = metric(server, "zarrgate_assembled_chunks_total", outcome="ok")
    assert built == 74, built

    # An assembled chunk answers as any chunk: a strong ETag, HEAD, Range, If-None-Match.
    url = f"{server.url}/{store_name}/air/c/36/0"
    full = requests.get(url, timeout=30)
    assert full.status_code == 200 and full.headers["ETag"].startswith('"'), full.headers
    head = requests.head(url, timeout=30)
    assert head.status_code == 200 and int(head.headers["Content-Length"]) == len(full.content)
    part = requests.get(url, headers={"Range": "bytes=2-9"}, timeout=30)
    assert part.status_code == 206 and part.content == full.content[2:10], part.headers
    same = requests.get(url, headers={"If-None-Match": full.headers["ETag"]}, timeout=30)
    assert same.status_code == 304
    # Read again from memory, not built again.
    assert requests.get(url, timeout=30).content == full.content
    assert metric(server, "zarrgate_assembled_chunks_total", outcome="ok") == built
    assert metric(server, "zarrgate_cache_hits_total", cache="assembled") >= 3

    # A browser sees the files and which chunks are assembled.
    page = requests.get(f"{server.url}/{store_name}/", headers={"Accept": "text/html"}, timeout=30).text
    assert 'id="files-list"' in page and all(p.as_uri() in page for p in paths), page[:2000]
    # A page number past any multiplication reads the last page, and the server stays up.
    last = requests.get(f"{server.url}/{store_name}/", params={"files_page": 2**64 - 1},
                        headers={"Accept": "text/html"}, timeout=30)
    assert last.status_code == 200 and 'id="files-list"' in last.text, last.text[:2000]
    array = requests.get(f"{server.url}/{store_name}/air/", headers={"Accept": "text/html"}, timeout=30).text
    assert "36 virtual, 0 inline, 74 assembled" in array, array[:3000]


def test_assembled_chunks_of_noisy_floats_read_back_exactly(server, source_dir, store_name):
    # Chunks of 256 KiB of noisy float32, shuffled: the two low mantissa byte planes are random,
    # and zarrgate stores those stretches instead of deflating them (zarr/deflate.rs). The
    # stream it writes, stored and deflated blocks mixed, must read back exactly.
    rng = np.random.default_rng(5)
    paths, first = [], 0
    for i, steps in enumerate([6, 6, 5]):
        path = source_dir / f"noisy_{i}.nc"
        with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
            nc.createDimension("time", None)
            nc.createDimension("y", 128)
            nc.createDimension("x", 128)
            t = nc.createVariable("time", "f8", ("time",))
            t.units, t.calendar = "days since 2000-01-01", "standard"
            t[:] = np.arange(first, first + steps)
            air = nc.createVariable("air", "f4", ("time", "y", "x"), chunksizes=(4, 128, 128), zlib=True,
                                    shuffle=True, complevel=4)
            air[:] = (280 + rng.random((steps, 128, 128))).astype("f4")
        paths.append(path)
        first += steps
    answer = put_files(server, store_name, [p.as_uri() for p in paths], combine=combine_existing())
    # air's steps 4-7 and 8-11 span the first seam and the second file's padded edge: assembled;
    # 0-3, 12-15 and 16 are whole chunks of a file. time: inline.
    chunks = answer["chunks"]
    assert (chunks["virtual"], chunks["inline"], chunks["assembled"]) == (3, 1, 2), chunks
    served = open_plain(f"{server.url}/{store_name}")
    assert served.sizes["time"] == 17
    assert_same(served, mfdataset(paths, "time"))
    # An assembled chunk (steps 4-7: two of the first file's, two of the second's) inflates with
    # zlib itself (C, not the decoder zarr-python used above) to its 256 KiB, and is smaller.
    raw = requests.get(f"{server.url}/{store_name}/air/c/1/0/0", timeout=30).content
    assert len(zlib.decompress(raw, wbits=47)) == 4 * 128 * 128 * 4
    assert len(raw) < 4 * 128 * 128 * 4, len(raw)


def test_combine_monthly_files_of_daily_data_chunked_seven(server, source_dir, store_name):
    # Months of 28 to 31 days chunked 7: a seam in almost every fifth chunk, padded edges between.
    days = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    starts = np.cumsum([0] + days[:-1])
    paths = [write_daily(source_dir / f"2023-{m + 1:02d}.nc", int(first), steps=n, chunk=7, zlib=True)
             for m, (first, n) in enumerate(zip(starts, days))]
    answer = put_files(server, store_name, [p.as_uri() for p in paths], combine=combine_existing())
    assert answer["chunks"]["assembled"] > 0, answer["chunks"]
    served = open_plain(f"{server.url}/{store_name}")
    assert served.sizes["time"] == 365
    assert_same(served, mfdataset(paths, "time"))


def test_combine_files_under_a_prefix_by_glob_in_key_order(server, source_dir, store_name):
    era = source_dir / "era"
    (era / "2024").mkdir(parents=True)
    (source_dir / "other").mkdir()
    # written out of key order; a text file and a file outside the prefix are not picked
    keys = ["2024/day_03.nc", "day_01.nc", "2024/day_02.nc", "day_00.nc"]
    for key in keys:
        write_daily(era / key, int(key[-5:-3]))
    (era / "notes.txt").write_text("not a data file\n")
    write_daily(source_dir / "other" / "day_09.nc", 9)
    hour_ago = time.time() - 3600
    for key in keys:
        os.utime(era / key, (hour_ago, hour_ago))
    fresh = write_daily(era / "day_04.nc", 4)  # still being written: skipped

    files = {"prefix": era.as_uri() + "/", "glob": "**/day_*.nc"}
    put_files(server, store_name, files, combine=combine_existing(), older_than_seconds=600)
    origin = requests.get(f"{server.url}/api/v1/stores/{store_name}", timeout=30).json()["files"]
    in_key_order = [era / k for k in sorted(keys)]
    assert [f["url"] for f in origin["files"]] == [p.as_uri() for p in in_key_order], origin
    assert fresh.as_uri() not in str(origin)
    assert_same(open_plain(f"{server.url}/{store_name}"), mfdataset(in_key_order, "time"))

    nothing = put_files(server, store_name, {"prefix": era.as_uri() + "/", "glob": "*.grib"},
                        combine=combine_existing(), status=422)
    assert "no object" in nothing["detail"] and "*.grib" in nothing["detail"], nothing
    outside = put_files(server, store_name, {"prefix": "file:///etc/"}, combine=combine_existing(), status=422)
    assert "not under any registered object store" in outside["detail"], outside


def test_combine_bad_specs_are_refused_with_a_400(server, source_dir, store_name):
    paths = [write_daily(source_dir / f"d{i}.nc", i).as_uri() for i in range(2)]
    for extra, named in [
        ({"combine": {"join": "stack", "dim": "time"}}, "stack"),
        ({"combine": {"join": "existing"}}, "dim"),
        ({"combine": {"join": "existing", "dim": "time", "sort": "name"}}, "sort"),
        ({"combine": {"join": "existing", "dim": "time", "order": "size"}}, "order"),
        ({"combine": {"join": "new", "dim": "run", "pattern": "(", "format": "%Y"}}, "regex"),
        ({"combine": {"join": "new", "dim": "run", "pattern": "x"}}, "format"),
        ({"combine": {"join": "existing", "dim": "time"}, "follow_seconds": 60}, "follow_seconds"),
    ]:
        refused = put_files(server, store_name, paths, status=400, **extra)
        assert named in refused["detail"], (extra, refused)
    misspelt = put_files(server, store_name, {"prefix": source_dir.as_uri() + "/", "globs": "*.nc"},
                         combine=combine_existing(), status=400)
    assert "globs" in misspelt["detail"], misspelt
    bad_glob = put_files(server, store_name, {"prefix": source_dir.as_uri() + "/", "glob": "[.nc"},
                         combine=combine_existing(), status=400)
    assert "glob" in bad_glob["detail"], bad_glob


def test_combine_refuses_more_files_than_files_max_files(tmp_path):
    sources = (tmp_path / "sources").resolve()
    sources.mkdir()
    paths = [write_daily(sources / f"d{i}.nc", i) for i in range(3)]
    with private_server(tmp_path, ZARRGATE_FILES_MAX_FILES="2") as (url, _):
        zarrgate_client.register_object_store(url, "src", sources.as_uri() + "/")
        server = type("Server", (), {"url": url})()
        for files in ([p.as_uri() for p in paths], {"prefix": sources.as_uri() + "/", "glob": "*.nc"}):
            refused = put_files(server, "many", files, combine=combine_existing(), status=422)
            assert "files.max_files" in refused["detail"], refused
        put_files(server, "two", [p.as_uri() for p in paths[:2]], combine=combine_existing())


# --------------------------------------------------------------------------
# growing archives: rescans (POST .../sync, follow_seconds) and older_than_seconds
# --------------------------------------------------------------------------

def sync(server, store: str, status: int = 200) -> dict:
    resp = requests.post(f"{server.url}/api/v1/stores/{store}/sync", timeout=120)
    assert resp.status_code == status, f"expected {status}, got {resp.status_code}: {resp.text[:2000]}"
    return resp.json()


def rescans(server, outcome: str) -> float:
    """``zarrgate_files_rescans_total{outcome=...}`` as the server counts it now."""
    metrics = requests.get(f"{server.url}/metrics", timeout=30).text
    line = f'zarrgate_files_rescans_total{{outcome="{outcome}"}} '
    return sum(float(m[len(line):]) for m in metrics.splitlines() if m.startswith(line))


def versions(server, store: str) -> list[int]:
    listed = requests.get(f"{server.url}/api/v1/stores/{store}/versions", timeout=30).json()["versions"]
    return sorted(v["version"] for v in listed)


def s3_client(endpoint: str):
    """A signed S3 client of moto (once a signed request came, moto refuses unsigned writes)."""
    import boto3
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test",
                        aws_secret_access_key="test")


def upload(endpoint: str, bucket: str, key: str, path: Path) -> str:
    s3_client(endpoint).put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
    return f"s3://{bucket}/{key}"


def test_a_prefix_on_s3_rescanned_by_sync_grows_by_new_versions(server, store_name, tmp_path):
    paths = [write_daily(tmp_path / f"day_{i:02d}.nc", i) for i in range(3)]
    with moto_s3(tmp_path) as (endpoint, bucket):
        register_s3_store(server, endpoint, bucket)
        urls = [upload(endpoint, bucket, f"era/{p.name}", p) for p in paths[:2]]
        files = {"prefix": f"s3://{bucket}/era/", "glob": "*.nc"}
        first = put_files(server, store_name, files, combine=combine_existing())["version"]

        # nothing changed: no new version, nothing read again
        ok, cached, unchanged = parses(server, "ok"), parses(server, "cached"), rescans(server, "unchanged")
        same = sync(server, store_name)
        assert (same["moved"], same["version"], same["added"], same["changed"], same["removed"]) == \
            (False, first, [], [], []), same
        assert versions(server, store_name) == [first]
        assert (parses(server, "ok"), parses(server, "cached")) == (ok, cached)
        assert rescans(server, "unchanged") == unchanged + 1

        # a file added: a new version with it, its parse the only one made; the pinned one stays
        urls.append(upload(endpoint, bucket, f"era/{paths[2].name}", paths[2]))
        new_versions = rescans(server, "new_version")
        grown = sync(server, store_name)
        assert (grown["moved"], grown["added"], grown["changed"], grown["removed"]) == (True, [urls[2]], [], []), grown
        assert grown["version"] > first and grown["versioned_url"] == f"/{store_name}@{grown['version']}", grown
        assert (parses(server, "ok") - ok, parses(server, "cached") - cached) == (1, 2)
        assert rescans(server, "new_version") == new_versions + 1
        # the files the listing shows unchanged cost no request: their parses are the catalog's
        records = requests.get(f"{server.url}/api/v1/stores/{store_name}", timeout=30).json()["files"]["files"]
        assert [(f["url"], f.get("cached", False), f["requests"] == 0) for f in records] == \
            [(urls[0], True, True), (urls[1], True, True), (urls[2], False, False)], records
        assert_same(open_plain(f"{server.url}/{store_name}"), mfdataset(paths, "time"))
        assert_same(open_plain(f"{server.url}/{store_name}@{first}"), mfdataset(paths[:2], "time"))

        # registered again, the same files are not parsed again
        ok, cached = parses(server, "ok"), parses(server, "cached")
        put_files(server, store_name, files, status=200, combine=combine_existing())
        assert (parses(server, "ok") - ok, parses(server, "cached") - cached) == (0, 3)
        again = sync(server, store_name)
        assert not again["moved"], again

        # stores over the prefix with their parser named (parses under "auto" are not theirs):
        # the second finds every parse in the catalog by the listing's facts, and reads no file
        put_files(server, f"{store_name}-one", files, parser="hdf5", combine=combine_existing())
        ok, cached = parses(server, "ok"), parses(server, "cached")
        put_files(server, f"{store_name}-two", files, parser="hdf5", combine=combine_existing())
        assert (parses(server, "ok") - ok, parses(server, "cached") - cached) == (0, 3)
        two = requests.get(f"{server.url}/api/v1/stores/{store_name}-two", timeout=30).json()["files"]["files"]
        assert [(f["requests"], f["bytes_read"]) for f in two] == [(0, 0)] * 3, two
        assert_same(open_plain(f"{server.url}/{store_name}-two"), mfdataset(paths, "time"))

        # a file rewritten, then one removed
        write_daily(paths[1], 5)
        upload(endpoint, bucket, f"era/{paths[1].name}", paths[1])
        changed = sync(server, store_name)
        assert (changed["moved"], changed["added"], changed["changed"], changed["removed"]) == \
            (True, [], [urls[1]], []), changed
        assert_same(open_plain(f"{server.url}/{store_name}"), mfdataset(paths, "time"))
        s3_client(endpoint).delete_object(Bucket=bucket, Key=f"era/{paths[0].name}")
        removed = sync(server, store_name)
        assert (removed["moved"], removed["removed"]) == (True, [urls[0]]), removed
        assert_same(open_plain(f"{server.url}/{store_name}"), mfdataset(paths[1:], "time"))

        # a store made from files is changed through its files, never patched
        patch = requests.patch(f"{server.url}/api/v1/stores/{store_name}", json={"nodes": {}}, timeout=30)
        assert patch.status_code == 409 and "made from files" in patch.json()["detail"], patch.text


def test_a_long_prefix_is_rescanned_in_ranges_and_finds_every_change(server, store_name, tmp_path):
    """1,100 files (more than one page of an S3 listing): files added before the first key,
    between two keys and after the last, and one removed, are all found by a rescan: the new
    version has exactly the files under the prefix, in key order."""
    import concurrent.futures

    day = write_daily(tmp_path / "day.nc", 0).read_bytes()
    with moto_s3(tmp_path) as (endpoint, bucket):
        register_s3_store(server, endpoint, bucket)
        client = s3_client(endpoint)

        def put(key):
            client.put_object(Bucket=bucket, Key=key, Body=day)

        keys = [f"long/f{i:05d}.nc" for i in range(0, 2200, 2)]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(put, keys))
        files = {"prefix": f"s3://{bucket}/long/", "glob": "*.nc"}
        first = put_files(server, store_name, files, combine=combine_existing())
        # The answer lists the first 1,000 files and says how many there are.
        assert first["files"]["files"][0]["url"].endswith("long/f00000.nc") and len(first["files"]["files"]) == 1000
        assert (first["files"]["files_total"], first["files"]["files_offset"]) == (1100, 0), first["files"].keys()
        added = ["long/a.nc", "long/f00999.nc", "long/f01501.nc", "long/z.nc"]
        for key in added:
            put(key)
        client.delete_object(Bucket=bucket, Key="long/f01000.nc")
        grown = sync(server, store_name)
        assert sorted(grown["added"]) == [f"s3://{bucket}/{k}" for k in added], grown
        assert grown["removed"] == [f"s3://{bucket}/long/f01000.nc"] and grown["changed"] == [], grown
        # The summary's files, a page at a time.
        summary = f"{server.url}/api/v1/stores/{store_name}"
        pages = [requests.get(summary, params={"files_offset": offset, "files_limit": 600}, timeout=30).json()["files"]
                 for offset in (0, 600)]
        assert [p["files_total"] for p in pages] == [1103, 1103], [p.get("files_total") for p in pages]
        records = pages[0]["files"] + pages[1]["files"]
        expected = sorted(set(keys) - {"long/f01000.nc"} | set(added))
        assert [r["url"] for r in records] == [f"s3://{bucket}/{k}" for k in expected]
        assert zarr.open_array(f"{server.url}/{store_name}/air", mode="r").shape[0] == len(expected)


def test_a_file_modified_a_moment_ago_is_left_out_until_it_is_old_enough(server, store_name, tmp_path):
    paths = [write_daily(tmp_path / f"day_{i:02d}.nc", i) for i in range(3)]
    with moto_s3(tmp_path) as (endpoint, bucket):
        register_s3_store(server, endpoint, bucket)
        for p in paths[:2]:
            upload(endpoint, bucket, f"era/{p.name}", p)
        time.sleep(4)
        files = {"prefix": f"s3://{bucket}/era/", "glob": "*.nc"}
        put_files(server, store_name, files, combine=combine_existing(), older_than_seconds=3)
        fresh = upload(endpoint, bucket, f"era/{paths[2].name}", paths[2])
        waiting = sync(server, store_name)
        assert (waiting["moved"], waiting["added"], waiting["skipped"]) == (False, [], [fresh]), waiting
        assert_same(open_plain(f"{server.url}/{store_name}"), mfdataset(paths[:2], "time"))
        time.sleep(4)
        aged = sync(server, store_name)
        assert (aged["moved"], aged["added"], aged["skipped"]) == (True, [fresh], []), aged
        assert_same(open_plain(f"{server.url}/{store_name}"), mfdataset(paths, "time"))


def test_a_list_with_older_than_leaves_out_recent_files_and_sync_checks_them_again(server, source_dir,
                                                                                   store_name):
    paths = [write_daily(source_dir / f"day_{i:02d}.nc", i) for i in range(2)]
    hour_ago = time.time() - 3600
    os.utime(paths[0], (hour_ago, hour_ago))
    urls = [p.as_uri() for p in paths]
    answer = put_files(server, store_name, urls, combine=combine_existing(), older_than_seconds=600)
    assert any(urls[1] in w and "older_than_seconds" in w for w in answer["warnings"]), answer
    assert [f["url"] for f in answer["files"]["files"]] == urls[:1], answer
    waiting = sync(server, store_name)
    assert (waiting["moved"], waiting["skipped"]) == (False, [urls[1]]), waiting
    os.utime(paths[1], (hour_ago, hour_ago))
    aged = sync(server, store_name)
    assert (aged["moved"], aged["added"]) == (True, [urls[1]]), aged
    assert_same(open_plain(f"{server.url}/{store_name}"), mfdataset(paths, "time"))

    young = write_daily(source_dir / "day_09.nc", 9).as_uri()
    refused = put_files(server, f"{store_name}-young", [young], older_than_seconds=600, status=422)
    assert "none of the 1 files listed" in refused["detail"], refused
    follow = put_files(server, f"{store_name}-list", urls, combine=combine_existing(), follow_seconds=60, status=400)
    assert "follow_seconds" in follow["detail"] and "prefix" in follow["detail"], follow


def test_a_followed_prefix_picks_up_a_new_file_by_itself(server, source_dir, store_name, tmp_path):
    era = source_dir / "era"
    era.mkdir()
    paths = [write_daily(era / f"day_{i:02d}.nc", i) for i in range(2)]
    files = {"prefix": era.as_uri() + "/", "glob": "day_*.nc"}
    put_files(server, store_name, files, combine=combine_existing(), follow_seconds=1)
    # written beside, then moved in whole: the rescan never sees half a file
    os.replace(write_daily(tmp_path / "day_02.nc", 2), era / "day_02.nc")
    paths.append(era / "day_02.nc")
    deadline = time.monotonic() + 15
    while True:
        described = requests.get(f"{server.url}/api/v1/stores/{store_name}", timeout=30).json()
        if len(described["files"]["files"]) == 3:
            break
        assert time.monotonic() < deadline, f"the prefix was not rescanned in 15 s: {described}"
        time.sleep(0.5)
    assert described["files"]["follow_seconds"] == 1, described
    assert_same(open_plain(f"{server.url}/{store_name}"), mfdataset(paths, "time"))
    # deleted, it is followed no more (the shared server would rescan it every second)
    assert requests.delete(f"{server.url}/api/v1/stores/{store_name}", timeout=30).status_code == 204
