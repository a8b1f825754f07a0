"""GRIB2 files the server reads itself (``PUT ...?format=files``, parser ``grib``).

ecCodes (its wheels) writes the files (grib_files.py): temperature on two pressure levels,
2 m temperature and surface pressure (with a bitmap masking a point), at two steps, packed
as ecCodes packs (simple, complex with spatial differencing, CCSDS). Each is
registered by its URL and read by zarr-python 3 and xarray with gribberish's codec (the
plugin VirtualiZarr's GribberishParser stores use): every value equals what cfgrib (ecCodes)
reads, masked points NaN. A NOAA ``.idx`` sidecar, when there is one, gives the messages'
offsets; with or without one, only the messages' headers are read (the summary shows the
bytes and requests). A truncated file is a 422 naming it, and nothing is stored.
"""

from __future__ import annotations

import shutil

import cfgrib
import numpy as np
import pytest
import requests
import xarray as xr
import zarr

from grib_files import noaa_index, small_fields, write_grib
from test_files import put_files
from test_portable import PORTABLE, codec_names
from test_reach import read_v2, zarr2_python  # noqa: F401  (zarr2_python is a fixture)
from test_zarrita import js_env, read  # noqa: F401  (js_env is a fixture)

# gribberish's zarr-python codec ("gribberish"), registered on import.
gribberish_codec = pytest.importorskip("gribberish.zarr.codec")

TIMEOUT = 120


def cfgrib_datasets(path) -> dict[str, xr.Dataset]:
    """cfgrib's datasets of a file, by ecCodes' typeOfLevel."""
    out = {}
    for ds in cfgrib.open_datasets(str(path), backend_kwargs={"indexpath": ""}):
        level = next(c for c in ("isobaricInhPa", "heightAboveGround", "surface") if c in ds.coords)
        out[level] = ds.load()
    return out


def register(server, store, path, **extra) -> dict:
    summary = put_files(server, store, [path.as_uri()], **extra)
    assert summary["files"]["files"][0]["parser"] == "grib", summary
    return summary


def check_against_cfgrib(root: str, expected: dict[str, xr.Dataset]) -> None:
    """The store at ``root`` holds cfgrib's values, in gribberish's stable layout (level type /
    kind of product / variable), the bitmap's masked point NaN."""
    group = zarr.open_group(root, mode="r")
    assert sorted(group.group_keys()) == ["hag", "isobar", "sfc"]
    tmp = group["isobar/instant/tmp"]
    assert tmp.shape == (2, 2, 5, 8) and tmp.metadata.dimension_names == ("time", "isobar", "latitude", "longitude")
    levels = group["isobar/instant/isobar"][...]
    np.testing.assert_array_equal(levels, [50000.0, 85000.0])
    want = expected["isobaricInhPa"]["t"]
    for i, hpa in enumerate(levels / 100):
        np.testing.assert_allclose(tmp[:, i], want.sel(isobaricInhPa=hpa).values, rtol=1e-6)
    np.testing.assert_allclose(group["hag/instant/tmp"][...], expected["heightAboveGround"]["t2m"].values, rtol=1e-6)
    pres = group["sfc/instant/pres"][...]
    np.testing.assert_allclose(pres, expected["surface"]["sp"].values, rtol=1e-6)
    assert np.isnan(pres[:, 1, 2]).all() and np.isnan(pres).sum() == 2
    np.testing.assert_array_equal(group["sfc/instant/latitude"][...], expected["surface"].latitude.values)
    np.testing.assert_array_equal(group["sfc/instant/longitude"][...], expected["surface"].longitude.values)


PLUGIN_WARNINGS = [
    f'array "{a}": codec gribberish is not decoded by stock zarr-python (zarrs reads it) (gribberish\'s codec: '
    "pip install gribberish, then import gribberish.zarr.codec)"
    for a in ("hag/instant/tmp", "isobar/instant/tmp", "sfc/instant/pres")]


@pytest.mark.parametrize("packing", ["grid_simple", "grid_complex_spatial_differencing", "grid_ccsds"])
def test_a_grib2_file_reads_as_cfgrib_reads_it(server, source_dir, store_name, packing):
    """As it is, through gribberish's codec in zarr-python; with portable codecs, with none."""
    fields = small_fields()
    for field in fields:
        field["packing"] = packing
    path = source_dir / "small.grib2"
    write_grib(path, fields)
    expected = cfgrib_datasets(path)
    summary = register(server, store_name, path)
    # Only what readers need: gribberish's codec, for zarr-python (zarrs has it linked in).
    assert summary["warnings"] == PLUGIN_WARNINGS, summary
    portable = register(server, f"{store_name}-portable", path, codecs="portable")
    assert portable["transcoded_arrays"] == 3 and not portable.get("warnings"), portable
    check_against_cfgrib(f"{server.url}/{store_name}-portable", expected)
    # gribberish 0.30.3's Python codec (the last for Python 3.11) misdecodes CCSDS (values
    # shifted by one point, measured); the gribberish 1.9 that zarrgate links reads it right.
    if packing != "grid_ccsds":
        check_against_cfgrib(f"{server.url}/{store_name}", expected)


def test_xarray_opens_a_group_with_times_and_levels(server, source_dir, store_name):
    path = source_dir / "small.grib2"
    write_grib(path, small_fields())
    register(server, store_name, path)
    expected = cfgrib_datasets(path)["isobaricInhPa"]
    with xr.open_zarr(f"{server.url}/{store_name}", group="isobar/instant") as ds:
        ds = ds.load()
    np.testing.assert_array_equal(ds.time.values, expected.valid_time.values)
    assert ds.tmp.attrs["long_name"] == "temperature" and ds.tmp.attrs["unit"] == "K"
    np.testing.assert_allclose(ds.tmp.sel(isobar=85000.0).values, expected.t.sel(isobaricInhPa=850).values, rtol=1e-6)
    assert ds.spatial_ref.attrs["grid_mapping_name"] == "latitude_longitude"


def big_fields(count: int):
    """``count`` messages of 2 m temperature on a 181 x 360 grid, one per 6-hour step."""
    rng = np.random.default_rng(3)
    return [{"short": "2t", "level_type": "heightAboveGround", "level": 2, "step": 6 * i,
             "values": 250 + rng.random((181, 360)) * 60} for i in range(count)]


def test_only_headers_are_read_with_or_without_an_index(server, source_dir, store_name):
    """40 messages of 130 KB (5 MB): the first read (1 MiB) and one 4 KiB window a message
    beyond it, never the data of the messages past the first read. With NOAA's ``.idx`` beside
    the file, the index says where each message is and their headers are read side by side:
    the same hierarchy, the index named in the summary."""
    plain = source_dir / "plain.grib2"
    places = write_grib(plain, big_fields(40))
    size = plain.stat().st_size
    assert size > 5_000_000 and len(places) == 40
    indexed = source_dir / "indexed.grib2"
    shutil.copy(plain, indexed)
    noaa_index(indexed)
    (scanned,) = register(server, f"{store_name}-scan", plain)["files"]["files"]
    (listed,) = register(server, f"{store_name}-idx", indexed)["files"]["files"]
    assert scanned.get("sidecar") is None and listed["sidecar"] == indexed.as_uri() + ".idx", (scanned, listed)
    for record in (scanned, listed):
        assert record["bytes_read"] < (1 << 20) + 40 * 8192 < size / 4, record
        assert record["requests"] <= 2 * 40 + 4, record
    a = requests.get(f"{server.url}/{store_name}-scan/zarr.json", timeout=TIMEOUT).json()["consolidated_metadata"]
    b = requests.get(f"{server.url}/{store_name}-idx/zarr.json", timeout=TIMEOUT).json()["consolidated_metadata"]
    assert a == b
    values = zarr.open_array(f"{server.url}/{store_name}-idx/hag/instant/tmp", mode="r")
    expected = cfgrib_datasets(indexed)["heightAboveGround"]["t2m"].values
    np.testing.assert_allclose(values[[0, 17, 39]], expected[[0, 17, 39]], rtol=1e-6)


def test_a_stale_index_is_not_believed(server, source_dir, store_name):
    path = source_dir / "grown.grib2"
    write_grib(path, big_fields(3))
    noaa_index(path)
    # Two more messages appended after the index was written.
    more = source_dir / "more.grib2"
    write_grib(more, big_fields(5)[3:])
    with open(path, "ab") as out:
        out.write(more.read_bytes())
    summary = register(server, store_name, path)
    assert any("its index does not match it" in w for w in summary["warnings"]), summary
    assert zarr.open_array(f"{server.url}/{store_name}/hag/instant/tmp", mode="r").shape == (5, 181, 360)


def test_a_truncated_grib_file_is_refused_naming_it_and_nothing_is_stored(server, source_dir, store_name):
    path = source_dir / "cut.grib2"
    write_grib(path, small_fields())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    answer = put_files(server, store_name, [path.as_uri()], status=422)
    assert path.as_uri() in answer["detail"] and "truncated" in answer["detail"], answer
    assert requests.get(f"{server.url}/api/v1/stores/{store_name}", timeout=TIMEOUT).status_code == 404
    # Not GRIB at all, though asked to read it as GRIB.
    other = source_dir / "other.bin"
    other.write_bytes(b"\0" * 64 + b"not grib")
    answer = put_files(server, store_name, [other.as_uri()], parser="grib", status=422)
    assert other.as_uri() in answer["detail"] and "GRIB" in answer["detail"], answer


def test_forecast_runs_join_along_time(server, source_dir, store_name):
    """Two runs' files (the same fields a day apart) joined along ``time`` by references only:
    every group's arrays have both runs' steps, equal to cfgrib's values of each file."""
    for day in (1, 2):
        fields = small_fields()
        for field in fields:
            field["date"] = 20240100 + day
        write_grib(source_dir / f"run{day}.grib2", fields)
    summary = put_files(server, store_name, {"prefix": source_dir.as_uri() + "/", "glob": "run*.grib2"},
                        combine={"join": "existing", "dim": "time"})
    assert summary["chunks"]["assembled"] == 0 and summary["chunks"]["virtual"] == 16, summary
    with xr.open_zarr(f"{server.url}/{store_name}", group="isobar/instant") as ds:
        ds = ds.load()
    runs = [cfgrib_datasets(source_dir / f"run{day}.grib2")["isobaricInhPa"] for day in (1, 2)]
    np.testing.assert_array_equal(ds.time.values, np.concatenate([r.valid_time.values for r in runs]))
    want = np.concatenate([r.t.sel(isobaricInhPa=500).values for r in runs])
    np.testing.assert_allclose(ds.tmp.sel(isobar=50000.0).values, want, rtol=1e-6)


def test_grib2_served_portable_is_read_by_zarrita_without_plugins(server, source_dir, store_name,
                                                                           js_env, tmp_path):  # noqa: F811
    """A GRIB2 file (ecCodes: simple packing, and surface pressure with a bitmap) registered with
    portable codecs: its messages are transcoded to ``bytes`` + ``gzip`` float64, which zarrita.js
    (both views) reads with no plugin (it has no GRIB decoder), equal to
    cfgrib's values, the masked point NaN."""
    path = source_dir / "small.grib2"
    write_grib(path, small_fields())
    want = cfgrib_datasets(path)["surface"]["sp"].values
    summary = put_files(server, store_name, [path.as_uri()], codecs="portable")
    assert summary["transcoded_arrays"] == 3 and not summary.get("warnings"), summary
    root = f"{server.url}/{store_name}"
    assert codec_names(f"{root}/sfc/instant/pres/zarr.json") == ["bytes", "gzip"]
    for fmt, url in (("v3", root), ("v2", f"{server.url}/v2/{store_name}")):
        got = read(js_env, tmp_path / fmt, url, "sfc/instant/pres", fmt, [None, None, None])
        values = np.array([np.nan if v is None else v for v in got["data"]], dtype="float64").reshape(got["shape"])
        np.testing.assert_allclose(values, want, rtol=1e-6, err_msg=f"zarrita {fmt}")
    # GDAL is not run here: in a process that has used ecCodes, rasterio.open crashes it (a
    # segmentation fault, reproduced). It read this store equal to cfgrib when run on its own
    # (stop 46's note); its v2 view is what GDAL reads everywhere else: gzip, no filter.
    zarray = requests.get(f"{server.url}/v2/{store_name}/sfc/instant/pres/.zarray", timeout=TIMEOUT).json()
    assert zarray["compressor"]["id"] == "gzip" and zarray["filters"] is None, zarray


def test_zarr_python_2_reads_portable_grib(server, source_dir, store_name, tmp_path, zarr2_python):  # noqa: F811
    """zarr-python 2 (its own venv, through the v2 view) decodes portable GRIB2 with no plugin."""
    path = source_dir / "small.grib2"
    write_grib(path, small_fields())
    put_files(server, store_name, [path.as_uri()], codecs="portable")
    _, arrays, _ = read_v2(zarr2_python, f"{server.url}/{store_name}", tmp_path / "grib", groups=("sfc/instant",))
    np.testing.assert_allclose(arrays["sfc/instant/pres"], cfgrib_datasets(path)["surface"]["sp"].values, rtol=1e-6)
