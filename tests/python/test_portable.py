"""Stores any client decodes: ``?codecs=portable``.

netCDF4 compresses with zlib and HDF5's shuffle by default; GDAL 3.10 (rasterio's wheels) has no
``shuffle`` ("Filter shuffle not handled") and reads nothing of such a store. Registered with
``codecs=portable``, every array whose codecs are not all of ``bytes``, ``gzip``, ``zstd``,
``blosc``, ``crc32c``, ``transpose`` is served as ``bytes`` + ``gzip``, its chunks transcoded
when read: GDAL (through the Zarr v2 view), zarrita.js in Node, zarr-python 3 and xarray then
read the numbers the netCDF library reads, with no plugin. The same file registered as it is
(``as-is``) is parsed once for both stores.
"""

from __future__ import annotations

import json

import netCDF4
import numpy as np
import pytest
import requests
import xarray as xr
import zarr

import fixtures
from test_files import assert_same, open_plain, put_files
from test_files_combine import metric
from test_reach import read_v2, zarr2_python  # noqa: F401  (zarr2_python is a fixture)
from test_zarrita import js_env, read  # noqa: F401  (js_env is a fixture)

rasterio = pytest.importorskip("rasterio")

PORTABLE = {"bytes", "gzip", "zstd", "blosc", "crc32c", "transpose"}


def codec_names(url: str) -> list[str]:
    return [c["name"] for c in requests.get(url, timeout=30).json()["codecs"]]


@pytest.fixture
def air(server, source_dir, store_name):
    """netCDF4 air (zlib + shuffle, the netCDF library's default), registered twice: as it is,
    and with portable codecs. The two stores' URLs, the file, and netCDF4's values."""
    path = fixtures.make_netcdf4_air(source_dir)
    url = path.as_uri()
    as_is = put_files(server, f"{store_name}-as-is", [url])
    parses = metric(server, "zarrgate_parse_files_total", outcome="ok")
    portable = put_files(server, f"{store_name}-portable", [url], codecs="portable")
    assert metric(server, "zarrgate_parse_files_total", outcome="ok") == parses, "parsed once for both"
    assert (as_is["codecs"], portable["codecs"]) == ("as-is", "portable")
    assert portable["transcoded_arrays"] >= 1, portable
    with netCDF4.Dataset(path) as nc:
        nc.set_auto_mask(False)
        raw = nc["air"][...]
    return f"{server.url}/{store_name}-as-is", f"{server.url}/{store_name}-portable", path, raw


def test_the_served_metadata_is_portable_and_the_stored_is_the_files(air, server):
    as_is, portable, _, _ = air
    assert "numcodecs.shuffle" in codec_names(f"{as_is}/air/zarr.json")
    names = codec_names(f"{portable}/air/zarr.json")
    assert names == ["bytes", "gzip"], names
    zarray = requests.get(f"{portable.replace(server.url, server.url + '/v2')}/air/.zarray", timeout=30).json()
    assert zarray["compressor"]["id"] == "gzip" and zarray["filters"] is None, zarray
    # Every array the store serves is portable: the whole consolidated metadata says so.
    consolidated = requests.get(f"{portable}/zarr.json", timeout=30).json()["consolidated_metadata"]["metadata"]
    for path, node in consolidated.items():
        if node["node_type"] == "array":
            assert {c["name"] for c in node["codecs"]} <= PORTABLE, (path, node["codecs"])
    store = portable.rsplit("/", 1)[1]
    exported = requests.get(f"{server.url}/api/v1/stores/{store}/manifest", timeout=60).json()
    assert "numcodecs.shuffle" in [c["name"] for c in exported["nodes"]["air"]["codecs"]], "the export is as stored"


def test_gdal_reads_the_portable_store_where_it_cannot_read_the_file_as_it_is(air, server):
    as_is, portable, _, raw = air
    v2 = lambda url: url.replace(server.url, server.url + "/v2", 1)  # noqa: E731
    with pytest.raises(rasterio.errors.RasterioIOError, match="shuffle"):
        with rasterio.open(f'ZARR:"/vsicurl/{v2(as_is)}":/air') as ds:
            ds.read()
    with rasterio.open(f'ZARR:"/vsicurl/{v2(portable)}":/air') as ds:
        assert (ds.count, ds.height, ds.width) == raw.shape
        assert ds.nodata == -9999.0
        values = ds.read()
    np.testing.assert_array_equal(values, raw)
    assert metric(server, "zarrgate_transcoded_chunks_total", outcome="ok") >= 1


def test_xarray_and_zarr_python_read_the_portable_store_as_the_file(air):
    _, portable, path, raw = air
    with xr.open_dataset(path) as expected:
        assert_same(open_plain(portable), expected.load())
    array = zarr.open_array(f"{portable}/air", mode="r")
    np.testing.assert_array_equal(array[...], raw)


def test_zarrita_reads_the_portable_store_in_both_views(air, js_env, tmp_path, server):  # noqa: F811
    _, portable, _, raw = air
    for fmt, url in (("v3", portable), ("v2", portable.replace(server.url, server.url + "/v2", 1))):
        got = read(js_env, tmp_path / fmt, url, "air", fmt, [[1, 3], None, [2, 6]])
        np.testing.assert_array_equal(np.array(got["data"], dtype=np.float32).reshape(got["shape"]),
                                      raw[1:3, :, 2:6])


def test_the_query_and_the_document_must_agree(server, source_dir, store_name):
    path = fixtures.make_netcdf4_air(source_dir)
    resp = requests.put(f"{server.url}/api/v1/stores/{store_name}", params={"format": "files", "codecs": "as-is"},
                        json={"files": [path.as_uri()], "codecs": "portable"}, timeout=60)
    assert resp.status_code == 422, resp.text
    assert "codecs=as-is" in json.dumps(resp.json()), resp.text
    assert requests.get(f"{server.url}/api/v1/stores/{store_name}", timeout=30).status_code == 404, "nothing stored"
    resp = requests.put(f"{server.url}/api/v1/stores/{store_name}", params={"codecs": "everything"},
                        json={"nodes": {}}, timeout=60)
    assert resp.status_code == 400 and "portable" in resp.json()["detail"], resp.text


# --------------------------------------------------------------------------
# TIFF (tifffile's LZW, PackBits, JPEG, predictors) and FITS, read with no plugin
# --------------------------------------------------------------------------

def assert_decoded(got, want, name: str, what: str):
    """tifffile's values exactly; for JPEG, within one in a few samples: zarrgate decodes with
    zune-jpeg and tifffile with libjpeg-turbo, whose inverse DCTs round differently (JPEG allows
    it; the standard does not fix the decoder's arithmetic)."""
    if not name.startswith("jpeg"):
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    assert got.shape == want.shape, (what, got.shape, want.shape)
    diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
    assert diff.max() <= 1 and (diff > 0).mean() < 0.02, (what, diff.max(), (diff > 0).mean())


def test_tiffs_served_portable_are_read_by_zarrita_gdal_and_zarr_python_without_plugins(
        server, source_dir, store_name, js_env, tmp_path):  # noqa: F811
    """Every tifffile image of test_files_tiff.py registered with portable codecs: its arrays are
    served with portable codecs only (TIFF's LZW, PackBits, JPEG, horizontal and floating-point
    predictors transcoded, in either byte order, chunky samples too). zarrita.js in Node, GDAL
    (through the v2 view) and zarr-python 3, which have none of imagecodecs' codecs, read
    tifffile's numbers."""
    from test_files_tiff import TIFFS, write_tiff

    for name in sorted(TIFFS):
        path, expected = write_tiff(source_dir, name)
        store = f"{store_name}-{name.replace('_', '-')}"
        summary = put_files(server, store, [path.as_uri()], codecs="portable")
        assert not [w for w in summary["warnings"] if "served with its own codecs" in w], (name, summary)
        root = f"{server.url}/{store}"
        for index, want in enumerate(expected):
            names = set(codec_names(f"{root}/{index}/zarr.json"))
            assert names <= PORTABLE, (name, names)
            got = read(js_env, tmp_path / name, root, str(index), "v3", [None] * want.ndim)
            got = np.array(got["data"], dtype=want.dtype.newbyteorder("=")).reshape(got["shape"])
            assert_decoded(got, want, name, f"zarrita: {name} page {index}")
            got = zarr.open_array(f"{root}/{index}", mode="r")[...]
            assert_decoded(got, want, name, f"zarr-python: {name} page {index}")
            if want.ndim == 2:
                with rasterio.open(f'ZARR:"/vsicurl/{server.url}/v2/{store}":/{index}') as ds:
                    assert_decoded(ds.read(1), want, name, f"GDAL: {name} page {index}")
        # zstd and no compression are portable as they are.
        as_they_are = name in ("zstd_pages", "uncompressed_float64")
        assert (summary["transcoded_arrays"] == 0) == as_they_are, (name, summary)


def test_fits_is_portable_as_it_is(server, source_dir, store_name):
    """A FITS image is raw big-endian values (the ``bytes`` codec): nothing is transcoded, and GDAL
    reads it through the v2 view."""
    from astropy.io import fits

    data = (np.arange(48 * 40, dtype=">f4").reshape(48, 40) / 7).astype(">f4")
    path = source_dir / "image.fits"
    fits.PrimaryHDU(data).writeto(path)
    summary = put_files(server, store_name, [path.as_uri()], codecs="portable")
    assert summary["transcoded_arrays"] == 0, summary
    assert set(codec_names(f"{server.url}/{store_name}/PRIMARY/zarr.json")) <= PORTABLE
    with rasterio.open(f'ZARR:"/vsicurl/{server.url}/v2/{store_name}":/PRIMARY') as ds:
        np.testing.assert_array_equal(ds.read(1), data.astype("=f4"))


def test_kerchunk_references_served_portable_and_a_patch_keeps_it(server, source_dir, store_name):
    """The same file as VirtualiZarr's kerchunk references, registered with ``codecs=portable``:
    GDAL reads it; a PATCH of the store (no ``codecs``) keeps serving it portable."""
    from virtual import virtual_dataset

    path = fixtures.make_netcdf4_air(source_dir)
    with netCDF4.Dataset(path) as nc:
        nc.set_auto_mask(False)
        raw = nc["air"][...]
    refs = virtual_dataset(path).vz.to_kerchunk(format="dict")
    resp = requests.put(f"{server.url}/api/v1/stores/{store_name}", params={"codecs": "portable"},
                        data=json.dumps(refs), timeout=60)
    assert resp.status_code == 201, resp.text
    assert resp.json()["codecs"] == "portable" and resp.json()["transcoded_arrays"] >= 1, resp.json()
    assert set(codec_names(f"{server.url}/{store_name}/air/zarr.json")) <= PORTABLE
    with rasterio.open(f'ZARR:"/vsicurl/{server.url}/v2/{store_name}":/air') as ds:
        np.testing.assert_array_equal(ds.read(), raw)
    patch = {"nodes": {"air": {"attributes": {"comment": "patched"}}}}
    resp = requests.patch(f"{server.url}/api/v1/stores/{store_name}", data=json.dumps(patch), timeout=60)
    assert resp.status_code == 200, resp.text
    assert resp.json()["codecs"] == "portable" and resp.json()["transcoded_arrays"] >= 1, resp.json()
    served = requests.get(f"{server.url}/{store_name}/air/zarr.json", timeout=30).json()
    assert served["attributes"]["comment"] == "patched"
    assert {c["name"] for c in served["codecs"]} <= PORTABLE, served["codecs"]
    np.testing.assert_array_equal(zarr.open_array(f"{server.url}/{store_name}/air", mode="r")[...], raw)


def test_zarr_python_2_reads_the_portable_stores(air, tmp_path, zarr2_python):  # noqa: F811
    """zarr-python 2 (its own venv, through the v2 view) decodes what ``codecs=portable`` emits,
    with no plugin: netCDF4's zlib + shuffle served as gzip (GRIB2's: test_files_grib.py)."""
    _, portable, _, raw = air
    _, arrays, _ = read_v2(zarr2_python, portable, tmp_path / "air")
    np.testing.assert_array_equal(arrays["air"], raw)
