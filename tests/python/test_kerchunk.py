"""Kerchunk references in and out of zarrgate, read by xarray and zarr-python.

Import (``PUT /api/v1/stores/{store}`` with kerchunk JSON, Zarr v2 metadata
converted to v3): the real-file fixtures of tests/python/fixtures.py go
through VirtualiZarr's ``vds.vz.to_kerchunk`` and through kerchunk's own
translators (``SingleHdf5ToZarr``, ``NetCDF3ToZarr``, ``MultiZarrToZarr``),
the document's bytes are registered unchanged, and what ``xr.open_zarr`` and
``zarr.open_group`` read over HTTP is compared with ``xr.open_dataset`` (and
h5py/scipy) on the original file. Hand-made version 0 and version 1
documents (``templates``, ``gen``, ``[url]``, inline strings) check exact
numbers against a binary file written here.

Export (``GET .../manifest?format=kerchunk``): the document is read the way
kerchunk users read references (fsspec's reference file system + zarr, Zarr
v2), and registered again as a new store, which must serve every chunk key
with the same bytes as the original.

Parquet: a tar of ``to_kerchunk(format="parquet")``'s directory, uploaded
with ``Content-Type: application/x-tar``.

Differences from ``assert_identical`` that the formats force (each one
spelt out where it is applied):

* ``netcdf4_packed``: unpacked values are float64 over Zarr, float32 from
  netCDF (see tests/python/test_real_files.py).
* Fill values. Kerchunk's translators (and VirtualiZarr's netCDF3 parser)
  move a netCDF ``_FillValue`` into the Zarr v2 ``fill_value`` and drop the
  attribute (a netCDF variable without one gets null); plain HDF5 datasets get
  their storage fill value, which xarray does not mask. The import declares
  ``_FillValue = fill_value`` again unless it is 0, NaN, netCDF's default for
  an integer type (-2147483647 for int32...), or on an array whose dimensions
  are all h5netcdf's ``phony_dim_N``; packed integers (``scale_factor`` or
  ``add_offset``) always (src/zarr/kerchunk/convert.rs;
  :func:`test_import_fill_values` checks each branch). With the fixtures here
  that rule agrees with the file's values everywhere (real zeros stay 0,
  ``crs`` stays int32, packed ``t2m`` and netCDF3 ``temp`` read NaN; netCDF's
  default 9.97e36 that VirtualiZarr writes for ``bigendian.nc``'s floats is
  declared but no value equals it), so the served store is compared with
  ``xr.open_dataset`` directly, except for one array: ``sparse.h5``'s
  ``data``, a plain HDF5 dataset with dimension scales (so its dimensions
  have names), whose HDF5 fill value -1 is not a ``_FillValue`` in the file
  but looks exactly like one in the references, so its two unallocated chunks
  read NaN (:func:`expected_served`).
* The export's v2 ``fill_value`` is the v3 fill value where chunks are
  missing (Zarr v2 has no other way to say what they hold), so xarray, which
  reads a v2 ``fill_value`` as the mask, masks those chunks of
  ``sparse.h5``'s ``data`` in the export and in the export registered again.
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import fsspec
import h5py
import numpy as np
import pytest
import requests
import xarray as xr
import zarr
from kerchunk.combine import MultiZarrToZarr
from kerchunk.hdf import SingleHdf5ToZarr
from kerchunk.netCDF3 import NetCDF3ToZarr
from scipy.io import netcdf_file
from virtualizarr.parsers import NetCDF3Parser
from xarray.backends.zarr import ZarrStore
from zarr.storage import FsspecStore

import fixtures
import zarrgate_client
from conftest import register
from virtual import (assert_same_dataset, open_file, open_served, virtual_dataset,
                     virtual_datatree)

TIMEOUT = 60

pytestmark = pytest.mark.filterwarnings(
    # netcdf4_inline loads every variable on purpose (all chunks inline)
    "ignore:Attempting to write an entirely non-virtual Dataset:UserWarning")


# --------------------------------------------------------------------------
# the files, as VirtualiZarr, kerchunk, xarray and h5py/scipy see them
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One real-file fixture and how each tool opens it."""

    name: str
    netcdf3: bool = False          # scipy / NetCDF3Parser / NetCDF3ToZarr instead of HDF5
    series: bool = False           # several files concatenated along time
    loadable: tuple = ()           # VirtualiZarr loadable_variables (served inline)
    groups: tuple = (None,)        # groups to compare
    open_kwargs: dict = field(default_factory=dict)

    @property
    def maker(self):
        return fixtures.ALL_FIXTURES[self.name.replace("_inline", "_air")]

    def files(self, directory: Path) -> list[Path]:
        made = self.maker(directory)
        return list(made) if isinstance(made, list) else [made]

    def expected(self, paths: list[Path], group: str | None = None) -> xr.Dataset:
        """``xr.open_dataset`` of the original file(s)."""
        if self.netcdf3:
            return open_file(paths[0], engine="scipy")
        if self.series:
            return xr.concat([open_file(p) for p in paths], dim="time", coords="minimal",
                             compat="override", combine_attrs="override")
        return open_file(paths[0], group=group, **self.open_kwargs)

    def virtual(self, paths: list[Path]):
        """VirtualiZarr's virtual dataset (datatree for nested groups)."""
        if self.groups != (None,):
            return virtual_datatree(paths[0])
        if self.netcdf3:
            return virtual_dataset(paths[0], parser=NetCDF3Parser())
        if self.series:
            return xr.concat([virtual_dataset(p) for p in paths], dim="time", coords="minimal",
                             compat="override", combine_attrs="override")
        if self.loadable:
            return virtual_dataset(paths[0], loadable_variables=list(self.loadable))
        return virtual_dataset(paths[0])

    def native(self, paths: list[Path]) -> dict:
        """zarrgate's native document, from the client's converter."""
        return zarrgate_client.manifeststore_to_native(self.virtual(paths),
                                                       fill_value_as_mask=self.netcdf3)

    def kerchunk(self, paths: list[Path], inline_threshold: int) -> dict:
        """References from kerchunk's own translators."""
        if self.netcdf3:
            return NetCDF3ToZarr(str(paths[0]), inline_threshold=inline_threshold).translate()
        singles = [SingleHdf5ToZarr(str(p), inline_threshold=inline_threshold).translate()
                   for p in paths]
        if not self.series:
            return singles[0]
        return MultiZarrToZarr(singles, concat_dims=["time"], identical_dims=["lat", "lon"],
                               inline_threshold=inline_threshold).translate()

    def raw(self, paths: list[Path], name: str, dims: list | None) -> np.ndarray:
        """The stored numbers of variable ``name`` (no CF decoding)."""
        if self.netcdf3:
            with netcdf_file(paths[0], "r", mmap=False, maskandscale=False) as f:
                return np.array(f.variables[name][()])
        parts = []
        for path in paths if self.series and dims and dims[0] == "time" else paths[:1]:
            with h5py.File(path, "r") as f:
                parts.append(f[name][()])
        return np.concatenate(parts) if len(parts) > 1 else parts[0]


CASES = [
    Case("netcdf4_air"),
    Case("netcdf4_packed"),
    Case("hdf5_contiguous", open_kwargs={"phony_dims": "access"}),
    Case("hdf5_sparse"),
    Case("netcdf3_record", netcdf3=True),
    Case("netcdf4_series", series=True),
    Case("netcdf4_bigendian"),
    Case("netcdf4_inline", loadable=("time", "lat", "lon", "air", "crs")),
    Case("netcdf4_chars"),
    Case("netcdf4_masks"),
]
BY_NAME = {c.name: c for c in CASES}
GROUPS = Case("netcdf4_groups", groups=(None, "obs", "obs/deep"))


def case_params(cases, marks: dict | None = None):
    marks = marks or {}
    return [pytest.param(c, id=c.name, marks=marks.get(c.name, ())) for c in cases]


# --------------------------------------------------------------------------
# comparisons
# --------------------------------------------------------------------------

def assert_matches_file(served: xr.Dataset, expected: xr.Dataset, case: Case) -> None:
    """``assert_same_dataset``, except for packed integers (documented below)."""
    if case.name != "netcdf4_packed":
        assert_same_dataset(served, expected)
        return
    # netCDF stores scale_factor/add_offset as float32, so xarray unpacks to
    # float32; Zarr attributes are JSON numbers, so xarray unpacks to float64
    # (xarray's own to_zarr/open_zarr round trip does the same).
    assert served.t2m.dtype == np.float64 and expected.t2m.dtype == np.float32
    xr.testing.assert_allclose(served, expected.astype(np.float64), rtol=1e-6)
    for name, var in expected.variables.items():
        assert served[name].attrs == var.attrs, name
    assert served.attrs == expected.attrs
    assert int(np.isnan(served.t2m.values).sum()) == 1 and np.isnan(served.t2m.values[1, 2, 3])


def _v2_metadata(refs: dict) -> dict:
    """``{key: parsed JSON}`` of the ``.zarray``/``.zattrs`` entries of a
    kerchunk document (version 0 or 1)."""
    entries = refs.get("refs", refs)
    out = {}
    for key, value in entries.items():
        if key.endswith((".zarray", ".zattrs")):
            out[key] = json.loads(value) if isinstance(value, str) else value
    return out


def expected_served(case: Case, paths: list[Path], refs: dict,
                    group: str | None = None) -> xr.Dataset:
    """What ``xr.open_zarr`` reads from a store imported from ``refs``: the
    file as ``xr.open_dataset`` reads it, but for ``sparse.h5``'s ``data``.

    The file gives ``data`` an HDF5 fill value of -1 and no ``_FillValue``, so
    ``xr.open_dataset`` reads its two unallocated chunks as -1. The references
    (VirtualiZarr's and kerchunk's alike) carry that -1 as the v2 ``fill_value``
    with no ``_FillValue`` attribute, which is exactly how kerchunk writes a
    netCDF ``_FillValue``; a non-zero float fill is declared (module
    docstring), so the served store reads those chunks as NaN. The document is
    checked to say so, so that the exception cannot hide another cause.
    """
    expected = case.expected(paths, group)
    if case.name != "hdf5_sparse":
        return expected
    meta = _v2_metadata(refs)
    assert meta["data/.zarray"]["fill_value"] == -1.0, meta["data/.zarray"]
    assert "_FillValue" not in meta.get("data/.zattrs", {}), meta.get("data/.zattrs")
    return _sparse_missing_chunks_nan(expected)


def _sparse_missing_chunks_nan(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with the two unallocated chunks of ``sparse.h5``'s ``data``
    (rows 0-3 x columns 4-7, rows 4-7 x columns 0-3) NaN; the written chunks,
    0..15 and 100..115, unchanged."""
    assert (ds.data.values[0:4, 4:8] == -1).all() and (ds.data.values[4:8, 0:4] == -1).all()
    data = ds.data.values.copy()
    data[0:4, 4:8] = np.nan
    data[4:8, 0:4] = np.nan
    return ds.assign(data=ds.data.copy(data=data))


def served_arrays(url: str) -> dict[str, zarr.Array]:
    """Every array of a store, by path, read with zarr-python over HTTP."""
    out = {}

    def walk(group: zarr.Group, prefix: str) -> None:
        for name, member in group.members():
            path = f"{prefix}{name}"
            if isinstance(member, zarr.Array):
                out[path] = member
            else:
                walk(member, f"{path}/")

    walk(zarr.open_group(url, mode="r"), "")
    return out


def assert_raw_numbers(arrays: dict, case: Case, paths: list[Path]) -> None:
    """zarr-python's numbers are the file's stored numbers, array by array."""
    assert arrays, "no arrays"
    for path, array in arrays.items():
        want = case.raw(paths, path, list(array.metadata.dimension_names or []))
        got = array[...]
        assert got.dtype.newbyteorder("=") == want.dtype.newbyteorder("="), (path, got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want, err_msg=path)


def put(server, store: str, body: bytes, params: dict | None = None,
        headers: dict | None = None) -> requests.Response:
    return requests.put(f"{server.url}/api/v1/stores/{store}", data=body, params=params,
                        headers=headers or {"Content-Type": "application/json"}, timeout=TIMEOUT)


def register_bytes(server, store: str, body: bytes, **kwargs) -> dict:
    resp = put(server, store, body, **kwargs)
    assert resp.status_code == 201, f"PUT {store}: {resp.status_code} {resp.text[:3000]}"
    return resp.json()


def count_refs(refs: dict) -> dict:
    """Chunk references of a kerchunk document by kind, as the summary counts them."""
    entries = refs.get("refs", refs)
    virtual = sum(1 for k, v in entries.items() if isinstance(v, list))
    inline = sum(1 for k, v in entries.items()
                 if isinstance(v, str) and not k.rsplit("/", 1)[-1].startswith(".z"))
    return {"virtual": virtual, "inline": inline}


def read_and_compare(server, store: str, case: Case, paths: list[Path], refs: dict) -> None:
    """xarray and zarr-python over HTTP against the file(s)."""
    url = f"{server.url}/{store}"
    for group in case.groups:
        served = open_served(url, group=group)
        expected = expected_served(case, paths, refs, group)
        assert_matches_file(served, expected, case)
    assert_raw_numbers(served_arrays(url), case, paths)


# --------------------------------------------------------------------------
# 1. VirtualiZarr's kerchunk JSON
# --------------------------------------------------------------------------

@pytest.mark.parametrize("case", case_params(CASES))
def test_virtualizarr_kerchunk_json(server, source_dir, store_name, case):
    paths = case.files(source_dir)
    target = source_dir / "refs.json"
    case.virtual(paths).vz.to_kerchunk(str(target), format="json")
    body = target.read_bytes()
    refs = json.loads(body)
    assert refs["version"] == 1

    summary = register_bytes(server, store_name, body)
    counted = count_refs(refs)
    assert summary["chunks"]["virtual"] == counted["virtual"], summary
    assert summary["chunks"]["inline"] == counted["inline"], summary
    read_and_compare(server, store_name, case, paths, refs)


def test_virtualizarr_zero_d_chunk_key(server, source_dir, store_name):
    """VirtualiZarr writes a 0-d array's one chunk as ``crs/`` (not ``crs/0``,
    the key zarr-python reads); the server files it under the array anyway."""
    case = BY_NAME["netcdf4_air"]
    paths = case.files(source_dir)
    refs = case.virtual(paths).vz.to_kerchunk(format="dict")
    assert "crs/" in refs["refs"] and "crs/0" not in refs["refs"]
    register_bytes(server, store_name, json.dumps(refs).encode())
    url = f"{server.url}/{store_name}"
    assert requests.get(f"{url}/crs/0", timeout=TIMEOUT).content == np.int32(4326).tobytes()
    assert zarr.open_group(url, mode="r")["crs"][()] == 4326
    assert open_served(url).crs.item() == 4326


# --------------------------------------------------------------------------
# 2. kerchunk's own translators
# --------------------------------------------------------------------------

@pytest.mark.parametrize("inline_threshold", [0, 64], ids=["ranges", "inline64"])
@pytest.mark.parametrize("case", case_params([c for c in CASES if not c.loadable] + [GROUPS]))
def test_kerchunk_translators(server, source_dir, store_name, case, inline_threshold):
    """SingleHdf5ToZarr moves packed t2m's _FillValue (-32767, int16) into the v2
    fill_value and drops the attribute: it must read NaN as in the file (packed
    integer, declared). It writes HDF5's 0.0 as the fill_value of contiguous.h5's
    grid, x and y: their real zeros must stay 0 (never declared)."""
    paths = case.files(source_dir)
    refs = case.kerchunk(paths, inline_threshold)
    counted = count_refs(refs)
    if inline_threshold == 0:
        assert counted["inline"] == 0 or case.series, counted  # MultiZarrToZarr inlines coordinates
    target = source_dir / "kerchunk.json"
    target.write_text(json.dumps(refs))

    summary = register_bytes(server, store_name, target.read_bytes())
    assert summary["chunks"]["virtual"] == counted["virtual"], summary
    assert summary["chunks"]["inline"] == counted["inline"], summary
    read_and_compare(server, store_name, case, paths, refs)


def test_kerchunk_char_fill_value(server, source_dir, store_name):
    """SingleHdf5ToZarr keeps a char variable's ``_FillValue`` (" ") in its
    ``.zattrs``. xarray's Zarr v3 reader cannot decode a ``_FillValue`` for
    fixed-width bytes and would refuse the whole dataset ("Failed to decode
    fill_value. Unsupported dtype |S1"), so the import drops it: the dataset
    opens, every other variable reads as in the file, and ``flag`` reads its
    stored characters (xarray on the file masks the " " to NaN; over Zarr v3
    no reader can, as xarray cannot decode that attribute)."""
    path = fixtures.make_netcdf4_masks(source_dir, char_fill=True)
    refs = SingleHdf5ToZarr(str(path), inline_threshold=0).translate()
    assert json.loads(refs["refs"]["flag/.zattrs"])["_FillValue"] == " "
    register_bytes(server, store_name, json.dumps(refs).encode())
    served = open_served(f"{server.url}/{store_name}")
    expected = open_file(path)
    assert "_FillValue" not in served.flag.attrs and "_FillValue" not in served.flag.encoding
    with h5py.File(path, "r") as f:
        stored = f["flag"][()]
    np.testing.assert_array_equal(served.flag.values, stored)
    assert stored[2] == b" " and expected.flag.isnull().values[2]
    assert_same_dataset(served.drop_vars("flag"), expected.drop_vars("flag"))


def test_file_names_are_text_both_ways(server, source_dir, store_name):
    """kerchunk writes the path of ``dir one/air #1 é.nc`` as it is, and fsspec
    reads it as it is: a ``#`` there is part of the name, not a URL fragment.
    The store reads the file's numbers, the export gives the path back exactly
    as kerchunk wrote it (fsspec reads the export), and the export registered
    again serves the same bytes."""
    directory = source_dir / "dir one"
    directory.mkdir()
    path = directory / "air #1 é.nc"
    fixtures.make_netcdf4_air(directory).rename(path)
    refs = SingleHdf5ToZarr(str(path), inline_threshold=0).translate()
    written = {v[0] for v in refs["refs"].values() if isinstance(v, list)}
    assert written == {str(path)}, written
    register_bytes(server, store_name, json.dumps(refs).encode())
    url = f"{server.url}/{store_name}"
    assert_same_dataset(open_served(url), open_file(path))
    _, exported = _export(server, store_name)
    exported_paths = {v[0] for v in exported["refs"].values() if isinstance(v, list)}
    assert exported_paths == {str(path)}, exported_paths
    assert_same_dataset(_open_reference(exported), open_file(path))
    copy = f"{store_name[:100]}-copy"
    register_bytes(server, copy, json.dumps(exported).encode())
    key = next(k for k, v in exported["refs"].items() if isinstance(v, list))
    a = requests.get(f"{url}/{key}", timeout=TIMEOUT)
    b = requests.get(f"{server.url}/{copy}/{key}", timeout=TIMEOUT)
    assert a.status_code == b.status_code == 200 and a.content == b.content


def test_kerchunk_inline_plain_strings(server, source_dir, store_name):
    """kerchunk writes inline chunks that are valid ASCII as plain strings
    (control characters escaped), the others as ``base64:``."""
    case = BY_NAME["hdf5_sparse"]
    paths = case.files(source_dir)
    refs = case.kerchunk(paths, inline_threshold=1000)
    entries = refs["refs"]
    # x and y hold int32 0..7: every byte < 0x80, so plain strings
    assert not entries["x/0"].startswith("base64:") and len(entries["x/0"]) == 32
    assert entries["data/1.1"].startswith("base64:")
    register_bytes(server, store_name, json.dumps(refs).encode())
    url = f"{server.url}/{store_name}"
    assert requests.get(f"{url}/x/0", timeout=TIMEOUT).content == np.arange(8, dtype="<i4").tobytes()
    group = zarr.open_group(url, mode="r")
    np.testing.assert_array_equal(group["x"][...], np.arange(8))
    np.testing.assert_array_equal(group["data"][4:, 4:], 100 + np.arange(16).reshape(4, 4))
    assert (group["data"][:4, 4:] == -1).all()


def test_multizarrtozarr_series(server, source_dir, store_name):
    """MultiZarrToZarr (offline) over three files: the combined time
    coordinate is inline, air's chunks point into three files."""
    case = BY_NAME["netcdf4_series"]
    paths = case.files(source_dir)
    refs = case.kerchunk(paths, inline_threshold=0)
    assert isinstance(refs["refs"]["time/0"], str)  # combined coordinate, inline
    assert {r[0] for k, r in refs["refs"].items() if k.startswith("air/") and isinstance(r, list)} \
        == {str(p) for p in paths}
    summary = register_bytes(server, store_name, json.dumps(refs).encode())
    assert summary["sources"] == 3
    served = open_served(f"{server.url}/{store_name}")
    assert_same_dataset(served, case.expected(paths))
    hours = (served.time.values - np.datetime64("2000-01-01")) / np.timedelta64(1, "h")
    np.testing.assert_array_equal(hours, np.arange(6) * 6)


# --------------------------------------------------------------------------
# 3. hand-made version 0 and version 1 documents
# --------------------------------------------------------------------------

HEADER = b"ZARRGATE-KERCHNK"          # 16 bytes before the first chunk
TEMP = (np.arange(24, dtype="<f4").reshape(4, 6) * 0.5 - 3.0).astype("<f4")
TEMP_FILL = -99.0
WHOLE = np.array([1.5, -2.25, 1e30], dtype="<f4")
INLINE_F8 = np.array([math.pi, -0.0], dtype="<f8")


def _temp_offset(i: int, j: int) -> int:
    """Chunk (i, j) of TEMP (2x2 grid of 2x3 chunks), stored in reverse order."""
    return len(HEADER) + 24 * (3 - (i * 2 + j))


def _write_binary_files(directory: Path) -> tuple[Path, Path]:
    values = directory / "values.bin"
    with open(values, "wb") as f:
        f.write(HEADER)
        for k in reversed(range(4)):
            i, j = divmod(k, 2)
            f.write(TEMP[2 * i:2 * i + 2, 3 * j:3 * j + 3].tobytes())
        f.write(b"TRAILER")
    whole = directory / "whole.bin"
    whole.write_bytes(WHOLE.tobytes())
    return values, whole


def _zarray(shape, chunks, dtype, fill_value, separator=".") -> str:
    return json.dumps({"zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": dtype,
                       "fill_value": fill_value, "order": "C", "filters": None,
                       "compressor": None, "dimension_separator": separator})


def _hand_made_v0(values: Path, whole: Path) -> dict:
    doc = {
        ".zgroup": json.dumps({"zarr_format": 2}),
        ".zattrs": json.dumps({"title": "hand-made v0"}),
        "temp/.zarray": _zarray([4, 6], [2, 3], "<f4", TEMP_FILL),
        "temp/.zattrs": json.dumps({"_ARRAY_DIMENSIONS": ["y", "x"], "units": "degC"}),
        "w/.zarray": _zarray([3], [3], "<f4", None),
        "w/.zattrs": json.dumps({"_ARRAY_DIMENSIONS": ["w"]}),
        "w/0": [str(whole)],                                 # a whole object
        "label/.zarray": _zarray([5], [5], "|u1", 0),
        "label/0": "hello",                                  # inline, plain string
        "inl/.zarray": _zarray([2], [2], "<f8", None),
        "inl/0": "base64:" + base64.b64encode(INLINE_F8.tobytes()).decode(),
    }
    for i, j in [(0, 0), (0, 1), (1, 0)]:                    # (1, 1) missing: fill value
        doc[f"temp/{i}.{j}"] = [str(values), _temp_offset(i, j), 24]
    return doc


def _hand_made_v1(values: Path, whole: Path) -> dict:
    directory = str(values.parent)
    return {
        "version": 1,
        "templates": {"d": directory},
        "refs": {
            ".zgroup": json.dumps({"zarr_format": 2}),
            "temp/.zarray": _zarray([4, 6], [2, 3], "<f4", TEMP_FILL, separator="/"),
            "temp/.zattrs": json.dumps({"_ARRAY_DIMENSIONS": ["y", "x"]}),
            "w/.zarray": _zarray([3], [3], "<f4", None),
            "w/0": ["{{d}}/" + whole.name],
            "inl/.zarray": _zarray([2], [2], "<f8", None),
            "inl/0": "base64:" + base64.b64encode(INLINE_F8.tobytes()).decode(),
        },
        "gen": [{
            "key": "temp/{{i}}/{{j}}",
            "url": "{{d}}/" + values.name,
            "offset": "{{ 16 + 24 * (3 - (i * 2 + j)) }}",
            "length": "24",
            "dimensions": {"i": {"stop": 2}, "j": [0, 1]},
        }],
    }


def _check_with_fsspec(doc: dict, arrays: dict) -> None:
    """The hand-made document is valid kerchunk: fsspec reads the same numbers."""
    # fsspec expands "gen" only with simple_templates=False (its default skips it)
    mapper = fsspec.get_mapper("reference://", fo=doc, remote_protocol="file",
                               simple_templates=False)
    group = zarr.open_group(FsspecStore.from_mapper(mapper, read_only=True), mode="r", zarr_format=2)
    for name, want in arrays.items():
        np.testing.assert_array_equal(group[name][...], want, err_msg=f"fsspec {name}")


@pytest.mark.parametrize("fmt", [None, "kerchunk"], ids=["detected", "format-param"])
def test_hand_made_version_0(server, source_dir, store_name, fmt):
    values, whole = _write_binary_files(source_dir)
    doc = _hand_made_v0(values, whole)
    expected_temp = TEMP.copy()
    expected_temp[2:4, 3:6] = TEMP_FILL
    want = {"temp": expected_temp, "w": WHOLE, "label": np.frombuffer(b"hello", "u1"),
            "inl": INLINE_F8}
    _check_with_fsspec(doc, want)

    summary = register_bytes(server, store_name, json.dumps(doc).encode(),
                             params={"format": fmt} if fmt else None)
    assert summary["chunks"] == {"virtual": 4, "inline": 2, "assembled": 0, "missing": 1}
    assert summary["referenced_bytes"] == 3 * 24 + 12   # the [url] got whole.bin's length
    url = f"{server.url}/{store_name}"
    group = zarr.open_group(url, mode="r")
    for name, array in want.items():
        got = group[name][...]
        assert got.dtype == array.dtype, name
        np.testing.assert_array_equal(got, array, err_msg=name)
    assert group["temp"][3, 5] == np.float32(TEMP_FILL)
    assert group["temp"][1, 4] == TEMP[1, 4]
    assert group["temp"].metadata.dimension_names == ("y", "x")
    assert group["temp"].attrs["units"] == "degC"
    assert group.attrs["title"] == "hand-made v0"
    # v2 chunk keys are served under the v2 encoding; the whole object's bytes
    assert requests.get(f"{url}/w/0", timeout=TIMEOUT).content == WHOLE.tobytes()
    assert requests.get(f"{url}/temp/0.1", timeout=TIMEOUT).content \
        == TEMP[0:2, 3:6].tobytes()
    assert requests.get(f"{url}/temp/1.1", timeout=TIMEOUT).status_code == 404
    assert requests.get(f"{url}/label/0", timeout=TIMEOUT).content == b"hello"


def test_hand_made_version_1_with_templates_and_gen(server, source_dir, store_name):
    values, whole = _write_binary_files(source_dir)
    doc = _hand_made_v1(values, whole)
    want = {"temp": TEMP, "w": WHOLE, "inl": INLINE_F8}
    _check_with_fsspec(doc, want)

    summary = register_bytes(server, store_name, json.dumps(doc).encode())
    assert summary["chunks"] == {"virtual": 5, "inline": 1, "assembled": 0, "missing": 0}
    assert summary["sources"] == 2
    url = f"{server.url}/{store_name}"
    group = zarr.open_group(url, mode="r")
    for name, array in want.items():
        got = group[name][...]
        assert got.dtype == array.dtype, name
        np.testing.assert_array_equal(got, array, err_msg=name)
    assert group["temp"].metadata.chunk_key_encoding.separator == "/"
    assert requests.get(f"{url}/temp/1/0", timeout=TIMEOUT).content == TEMP[2:4, 0:3].tobytes()
    # templates and gen are expanded: the exported references name the real file, by its
    # absolute path as kerchunk writes local files
    exported = requests.get(f"{server.url}/api/v1/stores/{store_name}/manifest",
                            params={"format": "kerchunk"}, timeout=TIMEOUT).json()["refs"]
    assert exported["temp/1/0"] == [str(values), _temp_offset(1, 0), 24]
    assert exported["w/0"] == [str(whole), 0, 12]


def test_hand_made_native_export_is_valid_json(server, source_dir, store_name):
    """The kerchunk arrays ``w`` and ``inl`` have no ``.zattrs``: their v3
    metadata ends with ``"attributes": {}``. The native export must still be
    JSON, name the files the templates resolve to, and register again."""
    values, whole = _write_binary_files(source_dir)
    register_bytes(server, store_name, json.dumps(_hand_made_v1(values, whole)).encode())
    resp = requests.get(f"{server.url}/api/v1/stores/{store_name}/manifest", timeout=TIMEOUT)
    assert resp.status_code == 200
    native = json.loads(resp.content)
    assert native["nodes"]["w"]["manifest"]["0"] == {"path": whole.as_uri(), "offset": 0,
                                                     "length": 12}
    assert {e["path"] for e in native["nodes"]["temp"]["manifest"].values()} == {values.as_uri()}
    copy = f"{store_name[:100]}-copy"
    register(server, copy, native)
    group = zarr.open_group(f"{server.url}/{copy}", mode="r")
    for name, want in {"temp": TEMP, "w": WHOLE, "inl": INLINE_F8}.items():
        np.testing.assert_array_equal(group[name][...], want, err_msg=name)


# The fill-value document: for each array its v2 dtype, v2 fill_value, extra
# .zattrs, its 4 stored numbers (one inline chunk; None: the chunk is missing),
# and what xarray must read over HTTP (values, NaN where masked, and dtype).
_B64_M9999 = base64.b64encode(np.float64(-9999).tobytes()).decode()   # "AAAAAICHw8A="
_B64_M1 = base64.b64encode(np.float64(-1).tobytes()).decode()
NAN = np.nan
FILL_ARRAYS = {
    # float, non-zero fill, no _FillValue: kerchunk moved a netCDF _FillValue
    # here; declared, so -9999 reads NaN (and so does a missing chunk)
    "f_declared": ("<f4", -9999.0, {}, [1.5, -9999, 0, 2], [1.5, NAN, 0, 2], "f4"),
    "f_missing": ("<f4", -9999.0, {}, None, [NAN] * 4, "f4"),
    # float, fill 0.0 (HDF5's default): never declared, real zeros stay 0
    "f_zero": ("<f8", 0.0, {}, [0, 1.5, 0, -2], [0, 1.5, 0, -2], "f8"),
    # NaN or null fill: nothing to declare
    "f_nan": ("<f4", "NaN", {}, [1, 2, 3, 4], [1, 2, 3, 4], "f4"),
    "f_null": ("<f8", None, {}, [1, 0, -1, 4], [1, 0, -1, 4], "f8"),
    # plain integer (netCDF's int32 default, e.g. a crs): never declared
    "i_plain": ("<i4", -2147483647, {}, [4326, -2147483647, 0, 7],
                [4326, -2147483647, 0, 7], "i4"),
    # an integer fill that is not netCDF's default: kerchunk moved the file's
    # _FillValue here (a netCDF variable without one gets null); declared
    "i_declared": ("<i2", -1, {}, [1, -1, 3, 4], [1, NAN, 3, 4], "f4"),
    # netCDF's int16 default: a storage default, never declared
    "i_default": ("<i2", -32767, {}, [1, -32767, 3, 4], [1, -32767, 3, 4], "i2"),
    # dimensions h5netcdf calls phony_dim_N: a plain HDF5 dataset's storage
    # fill, which xarray does not mask reading the file; never declared
    "i_phony": ("<i4", -1, {"_ARRAY_DIMENSIONS": ["phony_dim_0"]}, [1, -1, 3, 4], [1, -1, 3, 4], "i4"),
    "f_phony": ("<f4", -1.0, {"_ARRAY_DIMENSIONS": ["phony_dim_0"]}, [1, -1, 3, 4], [1, -1, 3, 4], "f4"),
    # a char variable's _FillValue: xarray's v3 reader cannot decode one for
    # fixed-width bytes (it fails the whole dataset), so it is dropped
    "s_attr": ("|S1", "IA==", {"_FillValue": " "}, [b"a", b" ", b"c", b"d"], [b"a", b" ", b"c", b"d"], "S1"),
    # packed integers (ERA5-style): declared, the fill reads NaN
    "i_packed": ("<i2", -32767, {"scale_factor": 0.5, "add_offset": 10.0},
                 [0, -32767, 2, 4], [10, NAN, 11, 12], "f8"),
    "i_offset": ("<i2", -1, {"add_offset": 100.0}, [0, -1, 1, 2], [100, NAN, 101, 102], "f8"),
    # packed, but fill 0: 0 is never declared
    "i_packed_zero": ("<i2", 0, {"scale_factor": 0.5}, [0, 2, 4, 6], [0, 1, 2, 3], "f8"),
    # a _FillValue attribute wins over the fill_value and is encoded as
    # xarray's v3 reader wants; an already-encoded one is kept
    "f_attr": ("<f4", -9999.0, {"_FillValue": -1.0}, [-1, -9999, 2, 3], [NAN, -9999, 2, 3], "f4"),
    "f_encoded": ("<f8", None, {"_FillValue": _B64_M9999}, [-9999, 1, 2, 3], [NAN, 1, 2, 3], "f8"),
    # an integer _FillValue stays an integer (xarray masks it: float32)
    "i_attr": ("<i2", None, {"_FillValue": -99}, [-99, 1, 2, 3], [NAN, 1, 2, 3], "f4"),
    # missing_value stays a plain number (xarray masks it too)
    "f_missing_value": ("<f4", None, {"missing_value": -5.0}, [-5, 1, 2, 3], [NAN, 1, 2, 3], "f4"),
}
# the _FillValue attribute of each served zarr.json (None: none)
FILL_DECLARED = {
    "f_declared": _B64_M9999, "f_missing": _B64_M9999, "f_zero": None, "f_nan": None,
    "f_null": None, "i_plain": None, "i_packed": -32767, "i_offset": -1,
    "i_packed_zero": None, "f_attr": _B64_M1, "f_encoded": _B64_M9999, "i_attr": -99,
    "f_missing_value": None, "i_declared": -1, "i_default": None, "i_phony": None,
    "f_phony": None, "s_attr": None,
}


def _dims(name: str) -> list[str]:
    """The dimension names an array of the fill-value document is given."""
    return FILL_ARRAYS[name][2].get("_ARRAY_DIMENSIONS", ["n"])


def _fill_value_doc() -> dict:
    refs = {".zgroup": json.dumps({"zarr_format": 2}),
            # a 0-d array without _ARRAY_DIMENSIONS (no dimension_names once imported)
            "scalar/.zarray": _zarray([], [], "<i4", None),
            "scalar/0": "base64:" + base64.b64encode(np.int32(4326).tobytes()).decode()}
    for name, (dtype, fill, attrs, stored, _, _) in FILL_ARRAYS.items():
        refs[f"{name}/.zarray"] = _zarray([4], [4], dtype, fill)
        refs[f"{name}/.zattrs"] = json.dumps({"_ARRAY_DIMENSIONS": ["n"], "units": "1", **attrs})
        if stored is not None:
            chunk = np.array(stored, dtype=dtype).tobytes()
            refs[f"{name}/0"] = "base64:" + base64.b64encode(chunk).decode()
    return {"version": 1, "refs": refs}


def test_import_fill_values(server, store_name):
    """A v2 fill value becomes a declared ``_FillValue`` as the module
    docstring says (not 0, NaN, netCDF's integer defaults, nor on phony
    dimensions; packed integers always); attributes are encoded the way
    xarray's Zarr v3 reader wants, and dropped where it cannot decode them. Checked in the served
    zarr.json and in what xarray reads over HTTP, array by array."""
    register_bytes(server, store_name, json.dumps(_fill_value_doc()).encode())
    url = f"{server.url}/{store_name}"
    nodes = requests.get(f"{url}/zarr.json", timeout=TIMEOUT).json()[
        "consolidated_metadata"]["metadata"]
    for name, declared in FILL_DECLARED.items():
        attrs = nodes[name]["attributes"]
        assert nodes[name]["dimension_names"] == _dims(name) and "_ARRAY_DIMENSIONS" not in attrs, name
        assert attrs.get("_FillValue") == declared, (name, attrs)
        assert type(attrs.get("_FillValue")) is type(declared), (name, attrs)
    assert nodes["f_missing_value"]["attributes"]["missing_value"] == -5.0
    assert nodes["i_packed"]["attributes"]["scale_factor"] == 0.5
    assert "dimension_names" not in nodes["scalar"], nodes["scalar"]

    served = open_served(url)
    assert served.scalar.dims == () and served.scalar.dtype == np.int32
    assert served.scalar.item() == 4326
    for name, (_, _, _, _, values, dtype) in FILL_ARRAYS.items():
        assert served[name].dtype == np.dtype(dtype), (name, served[name].dtype)
        np.testing.assert_array_equal(served[name].values, np.array(values, dtype), err_msg=name)
        assert served[name].attrs["units"] == "1", name
    # zarr-python reads the stored numbers, a missing chunk as the v3 fill value
    group = zarr.open_group(url, mode="r")
    np.testing.assert_array_equal(group["f_missing"][...], np.full(4, -9999, "f4"))
    np.testing.assert_array_equal(group["i_plain"][...], [4326, -2147483647, 0, 7])


# --------------------------------------------------------------------------
# 4. our export, read by kerchunk's readers, and registered again
# --------------------------------------------------------------------------

def _export(server, store: str) -> tuple[bytes, dict]:
    resp = requests.get(f"{server.url}/api/v1/stores/{store}/manifest",
                        params={"format": "kerchunk"}, timeout=TIMEOUT)
    assert resp.status_code == 200, resp.text[:2000]
    assert resp.headers["content-type"].startswith("application/json")
    refs = resp.json()
    assert refs["version"] == 1 and ".zgroup" in refs["refs"]
    return resp.content, refs


def _registered_and_exported(server, source_dir, store_name, case):
    paths = case.files(source_dir)
    register(server, store_name, case.native(paths))
    body, refs = _export(server, store_name)
    return paths, body, refs


def reference_store(refs: dict, path: str | None = None) -> FsspecStore:
    """zarr-python 3's store over fsspec's reference file system, rooted at
    ``path``. (Rooted at "" zarr-python lists a nested group ``obs`` as
    ``/obs``, which ReferenceFileSystem does not know: the group looks empty.
    That is zarr-python's FsspecStore, not the references.)"""
    fs = fsspec.filesystem("reference", fo=refs, asynchronous=True)
    return FsspecStore(fs, read_only=True, path=path or "")


def _open_reference(refs: dict, group: str | None = None) -> xr.Dataset:
    """xarray on kerchunk references, the way kerchunk's documentation reads
    them (a nested group through a store rooted at it, see reference_store)."""
    if group is None:
        opened = xr.open_dataset("reference://", engine="zarr", backend_kwargs={
            "storage_options": {"fo": refs}, "consolidated": False, "zarr_format": 2})
    else:
        opened = xr.open_dataset(reference_store(refs, group), engine="zarr",
                                 consolidated=False, zarr_format=2)
    with opened as ds:
        return ds.load()


EXPORT_CASES = CASES + [GROUPS]


@pytest.mark.parametrize("case", case_params(EXPORT_CASES))
def test_export_read_by_xarray_through_fsspec(server, source_dir, store_name, case):
    """``xr.open_dataset("reference://", engine="zarr", ...)`` of the export
    (defaults: Zarr v2 ``fill_value`` read as the mask) equals the file:
    arrays that declare no ``_FillValue`` get a null v2 ``fill_value`` (plain
    integers such as ``crs``, ``counts`` or netCDF3 ``time`` stay integers,
    real zeros stay 0), and the 0-d ``crs`` written by xarray's v3 writer
    (no ``dimension_names``, ``netcdf4_inline``) gets ``_ARRAY_DIMENSIONS: []``."""
    paths, _, refs = _registered_and_exported(server, source_dir, store_name, case)
    for group in case.groups:
        expected = case.expected(paths, group)
        if case.name == "hdf5_sparse":
            # Unavoidable in Zarr v2 as xarray reads it: the missing chunks of
            # ``data`` hold HDF5's fill value -1, which the file does not mask;
            # the v2 fill_value is both what missing chunks hold and the mask.
            assert json.loads(refs["refs"]["data/.zarray"])["fill_value"] == -1.0
            expected = _sparse_missing_chunks_nan(expected)
        assert_matches_file(_open_reference(refs, group), expected, case)


@pytest.mark.parametrize("case", case_params(EXPORT_CASES))
def test_export_read_by_xarray_with_v3_fill_semantics(server, source_dir, store_name, case):
    """The export with ``use_zarr_fill_value_as_mask=False`` (xarray then
    decodes the ``_FillValue`` attribute, as it does for Zarr v3) equals the
    file: the export's bytes, attributes and dimensions are complete.

    ``xr.open_dataset``/``xr.open_zarr`` pass ``use_zarr_fill_value_as_mask``
    on as None (xarray 2026.9.0 ignores it), hence the explicit ZarrStore."""
    paths, _, refs = _registered_and_exported(server, source_dir, store_name, case)
    for group in case.groups:
        store = ZarrStore.open_group(reference_store(refs, group), mode="r",
                                     consolidated=False, zarr_format=2,
                                     use_zarr_fill_value_as_mask=False)
        with xr.open_dataset("reference://", engine="zarr", store=store) as ds:
            served = ds.load()
        assert_matches_file(served, case.expected(paths, group), case)


@pytest.mark.parametrize("case", case_params(EXPORT_CASES))
def test_export_raw_numbers_with_zarr_python_and_fsspec(server, source_dir, store_name, case):
    """zarr-python 3 on ``FsspecStore`` over the export's references reads the
    file's stored numbers, array by array; an array with missing chunks has
    the served v3 store's fill value (what those chunks read as)."""
    paths, _, refs = _registered_and_exported(server, source_dir, store_name, case)
    exported = {key[:-len("/.zarray")]: zarr.open_array(
                    reference_store(refs, key[:-len("/.zarray")]), mode="r", zarr_format=2)
                for key in refs["refs"] if key.endswith("/.zarray")}
    # and the root group lists its own arrays
    root = zarr.open_group(reference_store(refs), mode="r", zarr_format=2)
    assert {n for n, _ in root.arrays()} == {p for p in exported if "/" not in p}
    served = served_arrays(f"{server.url}/{store_name}")
    assert sorted(exported) == sorted(served)
    for path, array in exported.items():
        original = served[path]
        assert array.shape == original.shape and array.chunks == original.chunks, path
        if _stored_chunks(refs, path) < math.prod(original.cdata_shape):
            same_fill = (array.fill_value == original.fill_value
                         or (np.isnan(array.fill_value) and np.isnan(original.fill_value)))
            assert same_fill, (path, array.fill_value, original.fill_value)
        want = case.raw(paths, path, list(original.metadata.dimension_names or []))
        got = array[...]
        assert got.dtype.newbyteorder("=") == want.dtype.newbyteorder("="), path
        np.testing.assert_array_equal(got, want, err_msg=path)


def _stored_chunks(refs: dict, path: str) -> int:
    """How many chunk references array ``path`` has in an exported document."""
    return sum(1 for key in refs["refs"]
               if key.startswith(f"{path}/")
               and re.fullmatch(r"\d+([./]\d+)*", key[len(path) + 1:]))


def _chunk_key(meta: dict, coords: tuple) -> str:
    """The chunk key of grid ``coords`` under ``meta``'s chunk_key_encoding."""
    encoding = meta["chunk_key_encoding"]
    sep = encoding.get("configuration", {}).get("separator")
    if encoding["name"] == "default":
        sep = sep or "/"
        return "c" + "".join(f"{sep}{c}" for c in coords)
    sep = sep or "."
    return sep.join(str(c) for c in coords) if coords else "0"


def _grid(meta: dict):
    shape = meta["shape"]
    chunks = meta["chunk_grid"]["configuration"]["chunk_shape"]
    return np.ndindex(*[-(-s // c) for s, c in zip(shape, chunks)])


@pytest.mark.parametrize("case", case_params(EXPORT_CASES))
def test_export_registered_again_serves_the_same_bytes(server, source_dir, store_name, case):
    paths, body, refs = _registered_and_exported(server, source_dir, store_name, case)
    copy = f"{store_name[:100]}-copy"
    resp = put(server, copy, body)   # the exported bytes, unchanged, format detected
    assert resp.status_code == 201, resp.text[:3000]
    original = requests.get(f"{server.url}/api/v1/stores/{store_name}", timeout=TIMEOUT).json()
    assert resp.json()["chunks"] == original["chunks"]
    assert resp.json()["referenced_bytes"] == original["referenced_bytes"]

    def nodes(store):
        root = requests.get(f"{server.url}/{store}/zarr.json", timeout=TIMEOUT).json()
        return root["consolidated_metadata"]["metadata"]

    before, after = nodes(store_name), nodes(copy)
    arrays = {p: m for p, m in before.items() if m["node_type"] == "array"}
    assert {p for p, m in after.items() if m["node_type"] == "array"} == set(arrays)
    assert {p for p, m in after.items() if m["node_type"] == "group"} \
        == {p for p, m in before.items() if m["node_type"] == "group"}
    compared = 0
    with requests.Session() as http:
        for path, meta in arrays.items():
            new = after[path]
            assert new["chunk_key_encoding"]["name"] == "v2", path
            for key in ("shape", "data_type", "codecs"):
                assert new.get(key) == meta.get(key), (path, key)
            if meta["shape"] == [] and "dimension_names" not in meta:
                # the export gives a 0-d array _ARRAY_DIMENSIONS: [] (xarray
                # needs it), which comes back as dimension_names []: the same
                # (no dimensions) to every reader
                assert new["dimension_names"] == [], path
            else:
                assert new.get("dimension_names") == meta.get("dimension_names"), path
            attributes = dict(meta["attributes"])
            if case.name == "hdf5_sparse" and path == "data":
                # exported with fill_value -1.0 (it has missing chunks) and no
                # _FillValue: the import declares it (a non-zero float fill,
                # module docstring), encoded the way xarray's v3 reader wants
                assert "_FillValue" not in attributes
                attributes["_FillValue"] = base64.b64encode(np.float64(-1).tobytes()).decode()
            assert new["attributes"] == attributes, path
            if _stored_chunks(refs, path) < sum(1 for _ in _grid(meta)):
                assert new["fill_value"] == meta["fill_value"], path
            for coords in _grid(meta):
                a = http.get(f"{server.url}/{store_name}/{path}/{_chunk_key(meta, coords)}",
                             timeout=TIMEOUT)
                b = http.get(f"{server.url}/{copy}/{path}/{_chunk_key(new, coords)}",
                             timeout=TIMEOUT)
                assert a.status_code == b.status_code, (path, coords, a.text[:300], b.text[:300])
                assert a.status_code in (200, 404), (path, coords, a.status_code)
                if a.status_code == 200:
                    assert a.content == b.content, (path, coords)
                compared += a.status_code == 200
    assert compared == original["chunks"]["virtual"] + original["chunks"]["inline"]


@pytest.mark.parametrize("case", case_params(EXPORT_CASES))
def test_export_registered_again_reads_the_same_in_xarray(server, source_dir, store_name, case):
    """What a user sees: xarray over HTTP on the re-imported export equals
    xarray on the original store. (Arrays without a declared _FillValue are
    exported with a null fill_value unless chunks are missing, so nothing is
    declared on the way back: contiguous.h5's grid keeps its real 0.0.)"""
    _, body, _ = _registered_and_exported(server, source_dir, store_name, case)
    copy = f"{store_name[:100]}-copy"
    assert put(server, copy, body).status_code == 201
    for group in case.groups:
        original = open_served(f"{server.url}/{store_name}", group=group)
        if case.name == "hdf5_sparse":
            # The one array with missing chunks and no _FillValue: the export
            # must say they hold -1 (v2 fill_value), and kerchunk cannot tell
            # that from a _FillValue kerchunk moved there, so the copy declares
            # it (module docstring) and reads those chunks as NaN, exactly as
            # xarray reads the export through fsspec.
            original = _sparse_missing_chunks_nan(original)
        assert_same_dataset(open_served(f"{server.url}/{copy}", group=group), original)


# The v2 fill_value each array of the fill-value document is exported with:
# the v3 fill value where chunks are missing, else the declared _FillValue
# (decoded), else null.
EXPORTED_FILL = {
    "f_declared": -9999.0, "f_missing": -9999.0, "f_zero": None, "f_nan": None,
    "f_null": None, "i_plain": None, "i_packed": -32767, "i_offset": -1,
    "i_packed_zero": None, "f_attr": -1.0, "f_encoded": -9999.0, "i_attr": -99,
    "f_missing_value": None, "scalar": None, "i_declared": -1, "i_default": None,
    "i_phony": None, "f_phony": None, "s_attr": None,
}


def test_export_fill_values(server, store_name):
    """The export's v2 ``fill_value`` is what Zarr v2 readers must mask (or
    null), the ``_FillValue`` attribute stays, and a 0-d array without
    dimension names gets ``_ARRAY_DIMENSIONS: []``: xarray reading the export
    through fsspec (Zarr v2) sees exactly what it reads from the served store,
    and the export registered again serves the same metadata."""
    register_bytes(server, store_name, json.dumps(_fill_value_doc()).encode())
    url = f"{server.url}/{store_name}"
    body, refs = _export(server, store_name)
    entries = refs["refs"]
    served_nodes = requests.get(f"{url}/zarr.json", timeout=TIMEOUT).json()[
        "consolidated_metadata"]["metadata"]
    for name, fill in EXPORTED_FILL.items():
        zarray = json.loads(entries[f"{name}/.zarray"])
        assert zarray["fill_value"] == fill and type(zarray["fill_value"]) is type(fill), \
            (name, zarray["fill_value"])
        zattrs = json.loads(entries[f"{name}/.zattrs"])
        assert zattrs.get("_FillValue") == served_nodes[name]["attributes"].get("_FillValue"), name
        assert zattrs["_ARRAY_DIMENSIONS"] == ([] if name == "scalar" else _dims(name)), name
    assert "f_missing/0" not in entries and "scalar/0" in entries and "f_declared/0" in entries

    from_export = _open_reference(refs)
    assert_same_dataset(from_export, open_served(url))
    assert from_export.i_plain.dtype == np.int32 and from_export.f_zero.values[0] == 0.0

    copy = f"{store_name[:100]}-copy"
    assert put(server, copy, body).status_code == 201
    copied = requests.get(f"{server.url}/{copy}/zarr.json", timeout=TIMEOUT).json()[
        "consolidated_metadata"]["metadata"]
    for name, meta in served_nodes.items():
        assert copied[name]["attributes"] == meta["attributes"], name
        assert copied[name].get("dimension_names", []) == meta.get("dimension_names", []), name
    assert_same_dataset(open_served(f"{server.url}/{copy}"), open_served(url))


# --------------------------------------------------------------------------
# 5. kerchunk parquet, uploaded as a tar of the directory
# --------------------------------------------------------------------------

def tar_directory(directory: Path) -> bytes:
    """A tar of ``directory``'s contents: members ``.zmetadata``,
    ``air/refs.0.parq``... (no leading directory)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(directory.rglob("*")):
            tar.add(path, arcname=path.relative_to(directory).as_posix(), recursive=False)
    return buf.getvalue()


def _parquet_upload(case: Case, source_dir: Path) -> tuple[list[Path], bytes, dict, list[str]]:
    """The fixture's virtual dataset as a tar of kerchunk parquet references;
    also its JSON references (for the chunk counts) and the 0-d variables left out."""
    paths = case.files(source_dir)
    vds = case.virtual(paths)
    # VirtualiZarr's parquet writer fails on a 0-d array (KeyError 'crs/.zarray'
    # from fsspec's LazyReferenceMapper: its chunk key is written "crs/"), so the
    # 0-d crs is left out here and from the expected dataset.
    zero_d = [name for name, var in vds.variables.items() if var.ndim == 0]
    vds = vds.drop_vars(zero_d)
    directory = source_dir / "refs.parq"
    # record_size=4: several record files for air (8 chunks), temp, rh...
    vds.vz.to_kerchunk(str(directory), format="parquet", record_size=4)
    return paths, tar_directory(directory), vds.vz.to_kerchunk(format="dict"), zero_d


@pytest.mark.parametrize("case", case_params(CASES))
def test_virtualizarr_kerchunk_parquet(server, source_dir, store_name, case):
    paths, body, refs, zero_d = _parquet_upload(case, source_dir)
    resp = put(server, store_name, body, headers={"Content-Type": "application/x-tar"})
    assert resp.status_code == 201, resp.text[:3000]
    counted = count_refs(refs)      # the same references, as JSON
    assert resp.json()["chunks"]["virtual"] == counted["virtual"], resp.json()
    assert resp.json()["chunks"]["inline"] == counted["inline"], resp.json()
    url = f"{server.url}/{store_name}"
    served = open_served(url)
    assert_matches_file(served, expected_served(case, paths, refs).drop_vars(zero_d), case)
    assert_raw_numbers(served_arrays(url), case, paths)


def test_kerchunk_parquet_format_parameter(server, source_dir, store_name):
    """``?format=kerchunk-parquet`` reads the tar whatever its Content-Type."""
    case = BY_NAME["netcdf4_air"]
    paths, body, _, zero_d = _parquet_upload(case, source_dir)
    resp = put(server, store_name, body, params={"format": "kerchunk-parquet"},
               headers={"Content-Type": "application/octet-stream"})
    assert resp.status_code == 201, resp.text[:3000]
    assert_same_dataset(open_served(f"{server.url}/{store_name}"),
                        case.expected(paths).drop_vars(zero_d))


# --------------------------------------------------------------------------
# 6. bad input
# --------------------------------------------------------------------------

def _problems(resp: requests.Response) -> list[str]:
    assert resp.status_code == 422, f"{resp.status_code} {resp.text[:2000]}"
    assert resp.headers["content-type"].startswith("application/problem+json")
    body = resp.json()
    assert body["status"] == 422 and body["problems"], body
    return body["problems"]


@pytest.fixture
def existing_store(server, source_dir, store_name):
    """A registered store (the hand-made v0 document) and a check that it is
    unchanged: same version, same numbers."""
    values, whole = _write_binary_files(source_dir)
    summary = register_bytes(server, store_name, json.dumps(_hand_made_v0(values, whole)).encode())
    url = f"{server.url}/{store_name}"

    def unchanged() -> None:
        now = requests.get(f"{server.url}/api/v1/stores/{store_name}", timeout=TIMEOUT).json()
        assert now["version"] == summary["version"], now
        group = zarr.open_group(url, mode="r")
        np.testing.assert_array_equal(group["temp"][0:2, 0:3], TEMP[0:2, 0:3])
        np.testing.assert_array_equal(group["w"][...], WHOLE)
        assert "x" not in dict(group.members())

    return store_name, unchanged


def _bad_doc(source_dir: Path, zarray: dict, ref) -> dict:
    return {"version": 1, "refs": {
        ".zgroup": json.dumps({"zarr_format": 2}),
        "x/.zarray": json.dumps({"zarr_format": 2, "shape": [3], "chunks": [3], "dtype": "<f4",
                                 "fill_value": None, "order": "C", "filters": None,
                                 "compressor": None, "dimension_separator": ".", **zarray}),
        "x/0": ref,
    }}


def test_unconvertible_array(server, source_dir, existing_store):
    """A structured dtype (a FITS or HDF5 table) has no Zarr v3 form: one problem,
    naming the array (its chunk ``x/0`` is not also reported as belonging to no
    array). A codec zarrgate does not know is converted instead
    (test_kerchunk_formats.py)."""
    store, unchanged = existing_store
    doc = _bad_doc(source_dir, {"dtype": [["a", "<f4"], ["b", "<i4"]]},
                   [str(source_dir / "whole.bin"), 0, 12])
    problems = _problems(put(server, store, json.dumps(doc).encode()))
    assert len(problems) == 1, problems
    assert '"x"' in problems[0] and "structured dtypes" in problems[0], problems
    unchanged()


def test_whole_object_reference_to_a_missing_file(server, source_dir, existing_store):
    """A ``[url]`` reference needs its object's length: the problems say, once,
    that the object cannot be read (naming it), then that the chunk's length is
    therefore unknown, never an internal placeholder length. Without the
    registration-time source check (``?verify=false``) the length lookup itself
    reports the missing object."""
    store, unchanged = existing_store
    missing = source_dir / "no-such-file.bin"
    body = json.dumps(_bad_doc(source_dir, {}, [str(missing)])).encode()
    problems = _problems(put(server, store, body))
    assert len(problems) == 2, problems
    assert problems[0].startswith(f"{missing.as_uri()} cannot be read: "), problems
    assert problems[1] == 'array x, chunk "0": its object\'s length is unknown', problems
    unverified = _problems(put(server, store, body, params={"verify": "false"}))
    assert len(unverified) == 2, unverified
    assert unverified[0].startswith(f"cannot learn the length of {missing.as_uri()} "), unverified
    for p in problems + unverified:
        assert "18446744073709551615" not in p and "GiB" not in p, p
    unchanged()


@pytest.mark.parametrize("ref,templates,shown", [
    (["data/x.bin", 0, 12], None, "data/x.bin"),
    (["data/x.bin"], None, "data/x.bin"),
    (["./x.bin", 0, 12], None, "./x.bin"),
    (["{{d}}/x.bin", 0, 12], {"d": "relative/dir"}, "relative/dir/x.bin"),
], ids=["range", "whole-object", "dot-slash", "template"])
def test_relative_paths(server, source_dir, existing_store, ref, templates, shown):
    store, unchanged = existing_store
    doc = _bad_doc(source_dir, {}, ref)
    if templates:
        doc["templates"] = templates
    problems = _problems(put(server, store, json.dumps(doc).encode()))
    assert any(shown in p and "relative" in p for p in problems), problems
    unchanged()


def test_relative_path_from_gen(server, source_dir, existing_store):
    store, unchanged = existing_store
    doc = _bad_doc(source_dir, {"shape": [6]}, ["/dev/null", 0, 0])
    del doc["refs"]["x/0"]
    doc["gen"] = [{"key": "x/{{i}}", "url": "chunks/{{i}}.bin", "offset": "0", "length": "12",
                   "dimensions": {"i": {"stop": 2}}}]
    problems = _problems(put(server, store, json.dumps(doc).encode()))
    assert any("chunks/0.bin" in p for p in problems), problems
    unchanged()
