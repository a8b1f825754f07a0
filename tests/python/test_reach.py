"""Reach: the Zarr v2 view of a store at its own URL, ``/v2/{store}/``, read by zarr-python 2
and xarray (in their own venv, scripts/python-env-zarr2.sh, through zarr2_reader.py), gives the
numbers the v3 view gives zarr-python 3 and xarray; the v3 URL has no v2 document, so xarray and
zarr-python 3 open it without ``zarr_format`` and without a warning; and the store's listings
let fsspec, obstore and zarr-python 3 find its members without consolidated metadata.

Real netCDF files (fixtures.py), virtualized with VirtualiZarr and registered as in
test_netcdf.py: zlib + shuffle, packed int16 with scale_factor/add_offset, big-endian, a NaN
fill value with unwritten chunks, integer fill values, nested groups, and a sharded array that
Zarr v2 cannot express.
"""

from __future__ import annotations

import json
import os
import subprocess
import warnings
from pathlib import Path

import fsspec
import h5py
import netCDF4
import numpy as np
import obstore
import pytest
import xarray as xr
import zarr
from obstore.store import HTTPStore

import fixtures
import zarrgate_client
from zarr2_reader import plain
from conftest import REPO, register
from virtual import assert_same_dataset, open_file, open_served, virtual_dataset, virtual_datatree

READER = Path(__file__).with_name("zarr2_reader.py")


@pytest.fixture(scope="session")
def zarr2_python() -> str:
    """The interpreter of the zarr-2 venv: $ZARRGATE_ZARR2_PYTHON (scripts/test-python.sh sets
    it), else the venv scripts/python-env-zarr2.sh builds (or finds cached)."""
    if os.environ.get("ZARRGATE_ZARR2_PYTHON"):
        return os.environ["ZARRGATE_ZARR2_PYTHON"]
    done = subprocess.run([str(REPO / "scripts" / "python-env-zarr2.sh")], capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, f"scripts/python-env-zarr2.sh failed:\n{done.stderr[-5000:]}"
    return str(Path(done.stdout.strip().splitlines()[-1]) / "bin" / "python")


def v2_url(url: str) -> str:
    """The URL of the Zarr v2 view of the store at ``url``: ``/v2/{store}``."""
    origin, store = url.rsplit("/", 1)
    return f"{origin}/v2/{store}"


def read_v2(zarr2_python: str, url: str, out: Path, groups=("",)) -> tuple[dict, dict, dict]:
    """What zarr 2 and xarray read from the v2 view of the store at ``url`` (its v3 URL), at
    ``/v2/{store}``: meta, raw arrays, xarray values."""
    url = v2_url(url)
    done = subprocess.run([zarr2_python, str(READER), url, str(out), *groups], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"zarr2_reader.py {url} failed:\n{done.stderr[-8000:]}"
    meta = json.loads((out / "meta.json").read_text())
    assert meta["zarr"].startswith("2."), meta["zarr"]
    with np.load(out / "raw.npz") as raw, np.load(out / "xarray.npz") as values:
        return meta, dict(raw), dict(values)




def same_dtype(a, b) -> bool:
    return np.dtype(a).newbyteorder("=") == np.dtype(b).newbyteorder("=")


def assert_v2_reads_as_v3(url: str, meta: dict, raw: dict, values: dict, omitted=()) -> None:
    """zarr 2 reads every array of the v2 view as zarr 3 reads the v3 view, and xarray
    decodes every group of it to the same dataset (values, dtypes, dimensions, attributes,
    masks)."""
    root3 = zarr.open_group(url, mode="r", zarr_format=3)
    arrays3 = {path: node for path, node in root3.members(max_depth=None) if isinstance(node, zarr.Array)}
    assert sorted(meta["arrays"]) == sorted(set(arrays3) - set(omitted))
    for path, array2 in meta["arrays"].items():
        array3 = arrays3[path]
        assert same_dtype(array2["dtype"], array3.dtype), (path, array2["dtype"], array3.dtype)
        np.testing.assert_array_equal(raw[path], array3[...], err_msg=path)
    for group, dataset in meta["datasets"].items():
        served = open_served(url, group=group or None).drop_vars(list(omitted), errors="ignore")
        assert sorted(dataset["variables"]) == sorted(served.variables), group
        attrs = {k: v for k, v in dataset["attrs"].items() if k != "zarrgate"}
        assert attrs == plain(served.attrs), group
        for name, var in dataset["variables"].items():
            where = f"{group}|{name}"
            assert var["dims"] == list(served[name].dims), where
            assert same_dtype(var["dtype"], served[name].dtype), (where, var["dtype"], served[name].dtype)
            assert var["attrs"] == plain(served[name].attrs), where
            assert var["encoding_fill"] == plain(served[name].encoding.get("_FillValue")), where
            np.testing.assert_array_equal(values[where], served[name].values, err_msg=where)


def make_nan_fill(directory: Path) -> Path:
    """netCDF4 float32 ``v(x)`` with ``_FillValue`` NaN, chunks of 2, one cell masked and the
    last chunk never written (a missing chunk, read as NaN)."""
    path = directory / "nanfill.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.createDimension("x", 6)
        v = nc.createVariable("v", "f4", ("x",), fill_value=np.float32(np.nan), chunksizes=(2,), zlib=True)
        v[0:4] = np.ma.masked_array([1.5, 2.5, 3.5, 4.5], mask=[0, 1, 0, 0])
        v.units = "m"
    return path


MAKERS = {
    "netcdf4_air": fixtures.make_netcdf4_air,        # zlib + shuffle, _FillValue -9999, 0-d crs
    "netcdf4_packed": fixtures.make_netcdf4_packed,  # int16 with scale_factor/add_offset
    "netcdf4_bigendian": fixtures.make_netcdf4_bigendian,
    "netcdf4_masks": fixtures.make_netcdf4_masks,    # integer _FillValue, and none
    "nan_fill": make_nan_fill,
}


@pytest.mark.parametrize("fixture", sorted(MAKERS))
def test_zarr2_and_xarray_read_the_v2_view_as_the_v3_view(server, source_dir, store_name, zarr2_python,
                                                           tmp_path, fixture):
    path = MAKERS[fixture](source_dir)
    register(server, store_name, zarrgate_client.manifeststore_to_native(virtual_dataset(path)))
    url = f"{server.url}/{store_name}"
    meta, raw, values = read_v2(zarr2_python, url, tmp_path / "v2")
    assert meta["members"] == meta["listed_members"], "found by listing as by .zmetadata"
    assert "zarrgate" not in meta["root_attrs"], "nothing left out"
    assert_v2_reads_as_v3(url, meta, raw, values)
    fills = {name: array["fill_value"] for name, array in meta["arrays"].items()}
    if fixture == "netcdf4_air":
        assert fills["air"] == -9999.0
        assert int(np.isnan(values["|air"]).sum()) == 3
        assert meta["arrays"]["air"]["dtype"] == "<f4"
    elif fixture == "netcdf4_packed":
        assert (fills["t2m"], meta["arrays"]["t2m"]["dtype"]) == (-32767, "<i2")
        assert np.isnan(values["|t2m"][1, 2, 3])
    elif fixture == "netcdf4_bigendian":
        assert meta["arrays"]["be_f4"]["dtype"] == ">f4" and meta["arrays"]["be_i4"]["dtype"] == ">i4"
    elif fixture == "netcdf4_masks":
        assert (fills["landcover"], fills["quality"], fills["count"]) == (-1, 200, None)
        assert values["|count"].tolist() == [0, 7, -2147483647, 3, 0, 9], "no _FillValue: nothing masked"
    elif fixture == "nan_fill":
        assert fills["v"] == "NaN"
        assert np.isnan(raw["v"][[1, 4, 5]]).all(), "a masked cell, and a missing chunk read as NaN"
        np.testing.assert_array_equal(values["|v"], [1.5, np.nan, 3.5, 4.5, np.nan, np.nan])


def test_nested_groups_in_the_v2_view(server, source_dir, store_name, zarr2_python, tmp_path):
    path = fixtures.make_netcdf4_groups(source_dir)
    register(server, store_name, zarrgate_client.manifeststore_to_native(virtual_datatree(path)))
    url = f"{server.url}/{store_name}"
    meta, raw, values = read_v2(zarr2_python, url, tmp_path / "v2", groups=("", "obs", "obs/deep"))
    assert meta["members"] == ["a", "obs", "obs/b", "obs/deep", "obs/deep/c"]
    assert meta["listed_members"] == meta["members"]
    assert_v2_reads_as_v3(url, meta, raw, values)
    assert meta["datasets"]["obs"]["attrs"]["platform"] == "buoy"
    np.testing.assert_array_equal(values["obs/deep|c"], [0, np.nan, 2, 3, 4, 5])


def test_a_sharded_array_is_absent_from_the_v2_view_and_named(server, source_dir, store_name, zarr2_python,
                                                              tmp_path):
    path = fixtures.make_netcdf4_air(source_dir)
    doc = zarrgate_client.manifeststore_to_native(virtual_dataset(path))
    doc["nodes"]["sharded"] = {
        "zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0.0, "dimension_names": ["s"],
        "codecs": [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [2], "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}],
        "manifest": {},
    }
    register(server, store_name, doc)
    url = f"{server.url}/{store_name}"
    meta, raw, values = read_v2(zarr2_python, url, tmp_path / "v2")
    assert "sharded" not in meta["members"] and "sharded" not in meta["listed_members"]
    why = meta["root_attrs"]["zarrgate"]["omitted_from_zarr_v2_view"]["sharded"]
    assert "sharding_indexed" in why
    assert meta["datasets"][""]["attrs"]["zarrgate"]["omitted_from_zarr_v2_view"] == {"sharded": why}
    assert "sharded" not in meta["datasets"][""]["variables"]
    # everything else reads as in the v3 view (where `sharded` is a variable of its own)
    assert_v2_reads_as_v3(url, meta, raw, values, omitted=("sharded",))


def test_missing_chunks_read_the_same_fill_value_in_both_views(server, source_dir, store_name, zarr2_python,
                                                               tmp_path):
    """HDF5 with unallocated chunks and no _FillValue attribute: the v2 fill_value is the v3
    one, so zarr 2 reads the missing chunks as zarr 3 does (never uninitialized memory)."""
    path = fixtures.make_hdf5_sparse(source_dir)
    register(server, store_name, zarrgate_client.manifeststore_to_native(virtual_dataset(path)))
    url = f"{server.url}/{store_name}"
    meta, raw, _ = read_v2(zarr2_python, url, tmp_path / "v2")
    assert meta["arrays"]["data"]["fill_value"] == -1.0
    np.testing.assert_array_equal(raw["data"], zarr.open_group(url, mode="r", zarr_format=3)["data"][...])
    assert (raw["data"][0:4, 4:8] == -1).all() and (raw["data"][4:8, 0:4] == -1).all()


# --------------------------------------------------------------------------
# listings
# --------------------------------------------------------------------------

def _groups_store(server, source_dir, store_name) -> str:
    path = fixtures.make_netcdf4_groups(source_dir)
    register(server, store_name, zarrgate_client.manifeststore_to_native(virtual_datatree(path)))
    return f"{server.url}/{store_name}"


def test_fsspec_lists_a_store(server, source_dir, store_name):
    url = _groups_store(server, source_dir, store_name)
    fs = fsspec.filesystem("http")
    names = {entry["name"].removeprefix(url + "/"): entry["type"] for entry in fs.ls(url + "/")}
    assert names == {"zarr.json": "file", "a/": "directory", "obs/": "directory"}
    # a subgroup without its final slash, as zarr's FsspecStore asks for it
    assert sorted(fs.ls(f"{url}/obs", detail=False)) == [f"{url}/obs/b/", f"{url}/obs/deep/", f"{url}/obs/zarr.json"]
    assert f"{url}/obs/deep/c/zarr.json" in fs.find(url + "/")
    # the Zarr v2 view lists its own documents
    v2 = v2_url(url)
    names = {entry["name"].removeprefix(v2 + "/"): entry["type"] for entry in fs.ls(v2 + "/")}
    assert names == {".zgroup": "file", ".zattrs": "file", ".zmetadata": "file", "a/": "directory",
                     "obs/": "directory"}
    assert sorted(fs.ls(f"{v2}/obs", detail=False)) == [
        f"{v2}/obs/.zattrs", f"{v2}/obs/.zgroup", f"{v2}/obs/b/", f"{v2}/obs/deep/"]


def test_obstore_lists_a_store(server, source_dir, store_name):
    url = _groups_store(server, source_dir, store_name)
    store = HTTPStore.from_url(url, client_options={"allow_http": True})
    # object_store's HTTP store names what it lists by the whole URL path (PROPFIND Depth: infinity)
    listed = sorted(meta["path"].removeprefix(f"{store_name}/") for meta in obstore.list(store).collect())
    assert listed == sorted(f"{node}zarr.json" for node in ("", "obs/", "obs/deep/", "a/", "obs/b/", "obs/deep/c/"))
    # PROPFIND Depth: 1: the documents, and the child nodes as prefixes (by whole URL path
    # again, so the listed collection itself is one of them)
    one = obstore.list_with_delimiter(store)
    assert sorted(one["common_prefixes"]) == [store_name, f"{store_name}/a", f"{store_name}/obs"]
    sizes = {o["path"].removeprefix(f"{store_name}/"): o["size"] for o in one["objects"]}
    assert sizes["zarr.json"] == len(obstore.get(store, "zarr.json").bytes())


def test_zarr_finds_members_without_consolidated_metadata(server, source_dir, store_name):
    url = _groups_store(server, source_dir, store_name)
    with warnings.catch_warnings():
        # no v2 document is listed beside zarr.json, so zarr 3 has nothing to skip and warn of
        # ("Object at .zattrs is not recognized"). The file's zlib and shuffle are numcodecs
        # codecs, which zarr 3 warns of whatever serves them: that warning alone is let through.
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message="Numcodecs codecs are not in the Zarr version 3 specification")
        group = zarr.open_group(url, mode="r", use_consolidated=False)
        assert group.metadata.consolidated_metadata is None
        found = sorted(name for name, _ in group.members(max_depth=None))
        assert found == ["a", "obs", "obs/b", "obs/deep", "obs/deep/c"]
        np.testing.assert_array_equal(group["obs/deep/c"][...], [0, -1, 2, 3, 4, 5])
        with xr.open_zarr(url, consolidated=False) as ds:
            assert sorted(ds.data_vars) == ["a"]
            np.testing.assert_array_equal(ds.a.values, np.arange(6.0))


def make_netcdf4_uncompressed(directory: Path) -> Path:
    """netCDF4: float32 ``air(time, lat, lon)`` in chunks (2, 3, 4) with no filter (so every codec
    is a Zarr v3 one, which zarr 3 does not warn of), ``_FillValue`` -9999 with three masked
    cells, CF attributes, and coordinates time (int32 "hours since"), lat and lon."""
    path = directory / "uncompressed.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.title = "zarrgate test: opened by default"
        for name, size in (("time", 4), ("lat", 5), ("lon", 6)):
            nc.createDimension(name, size)
        time = nc.createVariable("time", "i4", ("time",))
        time[:] = [0, 6, 12, 18]
        time.units = "hours since 2000-01-01 00:00:00"
        nc.createVariable("lat", "f4", ("lat",))[:] = np.linspace(40.0, 50.0, 5)
        nc.createVariable("lon", "f4", ("lon",))[:] = np.linspace(-10.0, 15.0, 6)
        air = nc.createVariable("air", "f4", ("time", "lat", "lon"), chunksizes=(2, 3, 4),
                                fill_value=np.float32(-9999.0))
        values = np.ma.masked_array(270.0 + np.arange(120, dtype="f4").reshape(4, 5, 6) / 4, mask=False)
        values.mask[0, 0, :3] = True
        air[:] = values
        air.units = "K"
    return path


def test_default_opens_read_the_file_without_a_warning(server, source_dir, store_name):
    """xarray and zarr-python 3 opened as their documentation shows, without ``zarr_format``,
    every warning an error: they ask for ``zarr.json`` and ``.zgroup`` at once, and warned on
    every open while the store's URL answered both ("Both zarr.json (Zarr format 3) and .zgroup
    (Zarr format 2) metadata objects exist"; with ``consolidated=False``, "Object at .zattrs is
    not recognized")."""
    path = make_netcdf4_uncompressed(source_dir)
    register(server, store_name, zarrgate_client.manifeststore_to_native(virtual_dataset(path)))
    url = f"{server.url}/{store_name}"
    expected = open_file(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with xr.open_zarr(url) as ds:
            served = ds.load()
        with xr.open_zarr(url, consolidated=False) as ds:
            unconsolidated = ds.load()
        group = zarr.open_group(url, mode="r")
        air = group["air"][...]
    assert_same_dataset(served, expected)
    assert_same_dataset(unconsolidated, expected)
    assert int(np.isnan(served.air.values).sum()) == 3
    assert served.air.values[3, 4, 5] == np.float32(270 + 119 / 4)
    assert str(served.time.values[1]).startswith("2000-01-01T06:00")
    assert group.metadata.zarr_format == 3
    with h5py.File(path) as f:
        np.testing.assert_array_equal(air, f["air"][...])
    np.testing.assert_array_equal(air[0, 0, :3], [-9999.0] * 3)
