"""Real archival files of several kinds (tests/python/fixtures.py), virtualized
with VirtualiZarr, converted to the native format, registered, and read back
over HTTP with ``xr.open_zarr``: each must equal ``xr.open_dataset`` of the
original file. These run the whole server (catalog, object store reads, chunk
serving) on real bytes.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
import zarr
from virtualizarr.parsers import NetCDF3Parser

import fixtures
import zarrgate_client
from conftest import register
from virtual import assert_same_dataset, open_file, open_served, virtual_dataset


def _serve(server, store_name, vds_or_doc, **convert) -> tuple[dict, xr.Dataset]:
    doc = (vds_or_doc if isinstance(vds_or_doc, dict)
           else zarrgate_client.manifeststore_to_native(vds_or_doc, **convert))
    summary = register(server, store_name, doc)
    return summary, open_served(f"{server.url}/{store_name}")


def test_packed_int16_with_scale_factor_and_add_offset(server, source_dir, store_name):
    path = fixtures.make_netcdf4_packed(source_dir)
    _, served = _serve(server, store_name, virtual_dataset(path))
    expected = open_file(path)
    # Relaxed: netCDF stores scale_factor/add_offset as float32, so xarray
    # unpacks to float32; Zarr attributes are JSON numbers, read as Python
    # floats, so xarray unpacks to float64. xarray's own to_zarr/open_zarr
    # round trip of this file does the same; no converter can keep float32.
    assert served.t2m.dtype == np.float64 and expected.t2m.dtype == np.float32
    xr.testing.assert_allclose(served, expected.astype(np.float64), rtol=1e-6)
    assert served.t2m.attrs == expected.t2m.attrs == {"units": "K",
                                                      "long_name": "2 metre temperature"}
    # unpacked on read, the packed fill value masked
    assert np.isnan(served.t2m.values[1, 2, 3])
    assert int(np.isnan(served.t2m.values).sum()) == 1
    np.testing.assert_allclose(served.t2m.values[0, 0, 0], 270.0, atol=0.006)
    assert served.t2m.encoding["dtype"] == np.int16
    assert served.t2m.encoding["scale_factor"] == np.float32(0.01)


def test_nonfinite_attributes_are_carried_as_strings(server, source_dir, store_name):
    # JSON has no NaN or infinity: the client writes them as the strings zarr-python's fill
    # values use, and the numbers read back are the file's.
    path = fixtures.make_netcdf4_nonfinite_attributes(source_dir)
    _, served = _serve(server, store_name, virtual_dataset(path))
    expected = open_file(path)
    np.testing.assert_array_equal(served.air.values, expected.air.values)
    assert np.isnan(served.air.values[0, 1, 1])
    assert served.air.attrs == {"units": "K", "valid_max": "Infinity"}
    assert served.air.encoding["missing_value"] == "NaN"
    assert served.attrs == {"comment_max": "-Infinity"}


def test_hdf5_contiguous_datasets(server, source_dir, store_name):
    path = fixtures.make_hdf5_contiguous(source_dir)
    summary, served = _serve(server, store_name, virtual_dataset(path))
    # A dataset without dimension scales gets "phony" dimensions. VirtualiZarr
    # numbers them per dataset (phony_dim_0), as h5netcdf's phony_dims="access"
    # does; netCDF-C and phony_dims="sort" number them file-wide (phony_dim_2).
    expected = open_file(path, phony_dims="access")
    assert_same_dataset(served, expected)
    assert served.counts.dims == ("phony_dim_0",)
    np.testing.assert_array_equal(served.counts.values, np.arange(7))
    np.testing.assert_array_equal(served.grid.values, np.arange(12).reshape(3, 4) / 4)
    # grid and counts are one contiguous byte range each
    assert summary["chunks"]["virtual"] == 2


def test_hdf5_unallocated_chunks_read_as_fill_value(server, source_dir, store_name):
    path = fixtures.make_hdf5_sparse(source_dir)
    summary, served = _serve(server, store_name, virtual_dataset(path))
    assert summary["chunks"]["virtual"] == 2 and summary["chunks"]["missing"] == 2
    assert_same_dataset(served, open_file(path))
    data = served.data.values
    assert (data[0:4, 4:8] == -1).all() and (data[4:8, 0:4] == -1).all()
    np.testing.assert_array_equal(data[4:8, 4:8], 100 + np.arange(16).reshape(4, 4))


def test_netcdf3_record_variables(server, source_dir, store_name):
    path = fixtures.make_netcdf3_record(source_dir)
    vds = virtual_dataset(path, parser=NetCDF3Parser())
    # kerchunk put the netCDF _FillValue into the Zarr fill_value (see the converter)
    _, served = _serve(server, store_name, vds, fill_value_as_mask=True)
    expected = open_file(path, engine="scipy")
    assert_same_dataset(served, expected)
    assert np.isnan(served.temp.values[2, 1])
    np.testing.assert_array_equal(served.rh.values[:, 2], 70 + np.arange(5))
    np.testing.assert_array_equal(served.elev.values, [12.5, 300.0, 1250.25])


def test_netcdf4_files_concatenated_along_time(server, source_dir, store_name):
    paths = fixtures.make_netcdf4_series(source_dir, n=3)
    vds = xr.concat([virtual_dataset(p) for p in paths], dim="time",
                    coords="minimal", compat="override", combine_attrs="override")
    summary, served = _serve(server, store_name, vds)
    assert summary["sources"] == 3
    expected = xr.concat([open_file(p) for p in paths], dim="time",
                         coords="minimal", compat="override", combine_attrs="override")
    assert_same_dataset(served, expected)
    assert served.sizes["time"] == 6
    hours = (served.time.values - np.datetime64("2000-01-01")) / np.timedelta64(1, "h")
    np.testing.assert_array_equal(hours, np.arange(6) * 6)


def test_big_endian_variables(server, source_dir, store_name):
    path = fixtures.make_netcdf4_bigendian(source_dir)
    vds = virtual_dataset(path)
    doc = zarrgate_client.manifeststore_to_native(vds)
    bytes_codec = doc["nodes"]["be_f4"]["codecs"][0]
    assert bytes_codec == {"name": "bytes", "configuration": {"endian": "big"}}
    _, served = _serve(server, store_name, doc)
    assert_same_dataset(served, open_file(path))
    np.testing.assert_array_equal(served.be_f4.values, np.arange(40).reshape(4, 10) * 1.5)
    np.testing.assert_array_equal(served.be_i4.values, np.arange(10) - 5)


def test_loaded_variables_are_served_inline(server, source_dir, store_name):
    path = fixtures.make_netcdf4_air(source_dir)
    vds = virtual_dataset(path, loadable_variables=["time", "lat", "lon", "air", "crs"])
    doc = zarrgate_client.manifeststore_to_native(vds)
    assert all("data" in entry for entry in doc["nodes"]["air"]["manifest"].values())
    summary, served = _serve(server, store_name, doc)
    assert summary["chunks"] == {"virtual": 0, "inline": 5, "assembled": 0, "missing": 0}
    assert summary["sources"] == 0
    expected = open_file(path)
    assert_same_dataset(served, expected)
    assert int(np.isnan(served.air.values).sum()) == 3
    assert served.crs.item() == 4326


def test_netcdf_char_variables(server, source_dir, store_name):
    """``char`` variables (numpy ``S1``) are ``null_terminated_bytes`` in Zarr v3, a data type
    zarrs has no codec path for yet: the server validates them as raw bytes of the same width
    and serves them as they are; xarray joins the characters into strings as it does for the
    file."""
    path = fixtures.make_netcdf4_chars(source_dir)
    summary, served = _serve(server, store_name, virtual_dataset(path))
    assert summary["chunks"]["virtual"] == 3  # station_name in 2 chunks, temp in 1
    assert_same_dataset(served, open_file(path))
    assert list(served.station_name.values) == [b"alpha", b"bravo", b"charlie"]
    raw = zarr.open_group(f"{server.url}/{store_name}", mode="r")["station_name"][...]
    assert raw.dtype == np.dtype("S1") and raw[2].tobytes() == b"charlie\0"


def test_a_manifest_store_straight_from_a_parser(server, source_dir, store_name):
    """``manifeststore_to_native`` also takes the ``ManifestStore`` a VirtualiZarr parser
    returns, without an xarray Dataset in between: the served arrays carry the file's
    numbers and the metadata the parser read."""
    from virtualizarr.parsers import HDFParser
    from virtual import REGISTRY

    path = fixtures.make_netcdf4_air(source_dir)
    manifest_store = HDFParser()(url=path.as_uri(), registry=REGISTRY)
    doc = zarrgate_client.manifeststore_to_native(manifest_store)
    assert {"", "air", "time", "lat", "lon", "crs"} <= set(doc["nodes"])
    register(server, store_name, doc)
    group = zarr.open_group(f"{server.url}/{store_name}", mode="r")
    import h5py
    with h5py.File(path, "r") as f:
        for name in ("air", "time", "lat", "lon"):
            np.testing.assert_array_equal(group[name][...], f[name][()], err_msg=name)
    served = open_served(f"{server.url}/{store_name}")
    np.testing.assert_array_equal(served.air.values, open_file(path).air.values)
