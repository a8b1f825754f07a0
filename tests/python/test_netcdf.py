"""Acceptance: a netCDF4 file, virtualized with VirtualiZarr, converted by
zarrgate_client, registered, and read over HTTP by xarray and zarr-python
gives what the file holds: the same numbers, attributes, masks, groups.

``fixtures.make_netcdf4_air`` writes the file with netCDF4: float32
``air(time, lat, lon)``, chunks (2, 3, 4), zlib + shuffle, ``_FillValue``
-9999 with three masked cells, CF attributes, coordinates time (int32
"hours since"), lat, lon, and a 0-d ``crs`` variable.
"""

from __future__ import annotations

import copy

import h5py
import numpy as np
import pytest
import requests
import xarray as xr
import zarr
from obstore.store import HTTPStore
from zarr.storage import ObjectStore

import fixtures
import zarrgate_client
from conftest import Server, private_server, register
from virtual import (assert_same_dataset, open_file, open_served, virtual_dataset,
                     virtual_datatree)

AIR_CHUNKS = 2 * 2 * 2  # chunk grid of air: time 4/2, lat ceil(5/3), lon ceil(6/4)


def _air_doc(source_dir) -> tuple:
    path = fixtures.make_netcdf4_air(source_dir)
    return path, zarrgate_client.manifeststore_to_native(virtual_dataset(path))


def test_xarray_over_http_equals_the_netcdf_file(server, source_dir, store_name):
    path, doc = _air_doc(source_dir)
    summary = register(server, store_name, doc, status=201)
    # air's 8 chunks and crs's one are byte ranges of the file; the loaded
    # coordinates time, lat, lon are carried inline
    assert summary["chunks"] == {"virtual": AIR_CHUNKS + 1, "inline": 3, "assembled": 0, "missing": 0}

    served = open_served(f"{server.url}/{store_name}")
    expected = open_file(path)
    assert_same_dataset(served, expected)
    # what assert_identical already implies, spelt out for the reader of a failure
    assert served.air.attrs["units"] == "K"
    assert served.air.attrs["long_name"] == "Air temperature at 2 m"
    assert served.attrs["title"] == "zarrgate test: air temperature"
    assert np.isnan(served.air.values[0, 0, :3]).all()
    assert int(np.isnan(served.air.values).sum()) == 3
    assert served.air.values[3, 4, 5] == np.float32(270 + 3 + 2.0 + 1.25)
    assert str(served.time.values[1]).startswith("2000-01-01T06:00")
    assert served.crs.item() == 4326
    assert served.air.encoding["_FillValue"] == -9999.0


def test_zarr_reads_the_raw_numbers(server, source_dir, store_name):
    path, doc = _air_doc(source_dir)
    register(server, store_name, doc)
    group = zarr.open_group(f"{server.url}/{store_name}", mode="r")
    with h5py.File(path, "r") as f:  # the stored numbers, no CF decoding
        for name in ("air", "time", "lat", "lon", "crs"):
            array = group[name]
            raw = f[name][()]
            assert array.dtype == raw.dtype, name
            np.testing.assert_array_equal(array[...], raw, err_msg=name)
    assert (group["air"][0, 0, :3] == -9999.0).all()
    assert group["air"].fill_value == -9999.0
    assert group["air"].metadata.dimension_names == ("time", "lat", "lon")
    assert group.attrs["Conventions"] == "CF-1.8"


def test_nested_groups_with_group_argument(server, source_dir, store_name):
    path = fixtures.make_netcdf4_groups(source_dir)
    doc = zarrgate_client.manifeststore_to_native(virtual_datatree(path))
    assert {"", "a", "obs", "obs/b", "obs/deep", "obs/deep/c"} <= set(doc["nodes"])
    register(server, store_name, doc)
    url = f"{server.url}/{store_name}"
    for group in (None, "obs", "obs/deep"):
        assert_same_dataset(open_served(url, group=group), open_file(path, group=group))
    deep = open_served(url, group="obs/deep")
    np.testing.assert_array_equal(deep.c.values, [0, np.nan, 2, 3, 4, 5])
    assert open_served(url, group="obs").attrs["platform"] == "buoy"

    with xr.open_datatree(url, engine="zarr", zarr_format=3) as tree:
        assert sorted(tree.groups) == ["/", "/obs", "/obs/deep"]
        np.testing.assert_array_equal(tree["obs/b"].values, np.arange(6) * 2)


def test_obstore_http_store_with_trailing_slash(server, source_dir, store_name):
    path, doc = _air_doc(source_dir)
    register(server, store_name, doc)
    # obstore joins a base URL ending in "/" and a key into ".../store//zarr.json"
    http = HTTPStore.from_url(f"{server.url}/{store_name}/", client_options={"allow_http": True})
    store = ObjectStore(http, read_only=True)
    with xr.open_zarr(store, zarr_format=3) as ds:
        served = ds.load()
    assert_same_dataset(served, open_file(path))
    raw = zarr.open_group(store, mode="r")["air"][...]
    assert (raw[0, 0, :3] == -9999.0).all()


def test_missing_chunk_reads_as_fill_value(server, source_dir, store_name):
    path, doc = _air_doc(source_dir)
    first = register(server, store_name, doc, status=201)
    url = f"{server.url}/{store_name}"
    assert requests.get(f"{url}/air/c/0/0/0", timeout=10).status_code == 200

    holed = copy.deepcopy(doc)
    del holed["nodes"]["air"]["manifest"]["0.0.0"]  # time 0:2, lat 0:3, lon 0:4
    summary = register(server, store_name, holed, status=200)  # replaced
    assert summary["chunks"]["virtual"] == AIR_CHUNKS  # 7 of air + crs
    assert summary["chunks"]["missing"] == 1

    missing = requests.get(f"{url}/air/c/0/0/0", timeout=10)
    assert missing.status_code == 404, missing.text
    served = open_served(url)
    expected = open_file(path)
    assert np.isnan(served.air.values[0:2, 0:3, 0:4]).all()
    expected["air"][0:2, 0:3, 0:4] = np.nan
    assert_same_dataset(served, expected)

    raw = zarr.open_group(url, mode="r")["air"][...]
    assert (raw[0:2, 0:3, 0:4] == -9999.0).all()
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(raw[2:], f["air"][2:])

    # the first version stays readable under its pinned URL, chunk included
    pinned = f"{server.url}/{store_name}@{first['version']}"
    assert_same_dataset(open_served(pinned), open_file(path))


def test_a_deleted_store_is_an_error_not_fill_values(server, source_dir, store_name):
    """A dataset opened before its store was deleted: reading it fails, in xarray and in
    zarr-python, instead of giving the fill value for every chunk (what a 404 would mean)."""
    _, doc = _air_doc(source_dir)
    register(server, store_name, doc)
    url = f"{server.url}/{store_name}"
    lazy = xr.open_zarr(url, zarr_format=3)
    array = zarr.open_group(url, mode="r")["air"]
    resp = requests.delete(f"{server.url}/api/v1/stores/{store_name}", timeout=10)
    assert resp.status_code == 204, resp.text

    gone = requests.get(f"{url}/air/c/0/0/0", timeout=10)
    assert gone.status_code == 410, gone.text
    assert gone.json()["type"] == "urn:zarrgate:problem:store-deleted"
    with pytest.raises(Exception, match="410"):
        lazy.air.load()
    with pytest.raises(Exception, match="410"):
        array[...]
    lazy.close()


def test_read_tokens(tmp_path):
    """With read tokens, xarray and zarr-python read with the token in their
    headers; without it they fail with the 401, never an empty or fill-valued
    dataset."""
    token = "a-read-token-of-some-length"
    sources = (tmp_path / "sources").resolve()
    sources.mkdir()
    path = fixtures.make_netcdf4_air(sources)
    with private_server(tmp_path, ZARRGATE_READ_TOKENS=token) as (url, log):
        zarrgate_client.register_object_store(url, "files", sources.as_uri() + "/")
        register(Server(url=url, catalog="sqlite", log=log), "air",
                 zarrgate_client.manifeststore_to_native(virtual_dataset(path)))
        headers = {"Authorization": f"Bearer {token}"}
        served = xr.open_zarr(f"{url}/air", zarr_format=3, consolidated=True,
                              storage_options={"headers": headers})
        assert_same_dataset(served.load(), open_file(path))
        group = zarr.open_group(f"{url}/air", mode="r", storage_options={"headers": headers})
        with h5py.File(path) as f:
            np.testing.assert_array_equal(group["air"][...], f["air"][...])
        for anonymous in ({}, {"headers": {"Authorization": "Bearer wrong"}}):
            with pytest.raises(Exception, match="401|Unauthorized"):
                xr.open_zarr(f"{url}/air", zarr_format=3, consolidated=True,
                             storage_options=anonymous).load()
        assert requests.get(f"{url}/air/air/c/0/0/0", timeout=30).status_code == 401
