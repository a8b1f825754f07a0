"""Acceptance of format ``files``: the server reads the files itself.

A file written by a real tool (netCDF4, h5py, scipy) is registered by its URL
(``PUT /api/v1/stores/{store}?format=files``), with no Python in between, and
read back through plain ``xr.open_zarr(url)`` (no ``zarr_format``, no warning):
it must equal ``xr.open_dataset(file)``. Where VirtualiZarr 2.5 reads a file
correctly, the bytes zarrgate serves for each chunk are those VirtualiZarr's
references point at. Bad requests and hostile files get a 422 and change
nothing; the server keeps serving.
"""

from __future__ import annotations

import json
import re
import subprocess
import warnings
from pathlib import Path

import h5py
import netCDF4
import numpy as np
import pytest
import requests
import xarray as xr
from scipy.io import netcdf_file

import conftest
import fixtures
from conftest import Server, _binary
from virtual import open_file, virtual_dataset


def put_files(server: Server, store: str, files: list[str], status: int = 201, **extra) -> dict:
    body = {"files": files, **extra}
    resp = requests.put(f"{server.url}/api/v1/stores/{store}", params={"format": "files"},
                        json=body, timeout=120)
    assert resp.status_code == status, f"expected {status}, got {resp.status_code}: {resp.text[:2000]}"
    return resp.json()


def open_plain(url: str, expected: tuple = ()) -> xr.Dataset:
    """What a user types: ``xr.open_zarr(url)``; no warning but those in ``expected`` (the
    messages xarray also gives opening the file itself)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with xr.open_zarr(url) as ds:
            loaded = ds.load()
    # zarr-python warns of every numcodecs codec (numcodecs.zlib...), which netCDF4's own
    # compression is, whoever serves it (conftest.py ignores it for every test too).
    extra = [f"{w.category.__name__}: {w.message}" for w in seen
             if _plain(str(w.message)) not in expected and NUMCODECS_WARNING not in str(w.message)]
    assert not extra, f"xr.open_zarr({url!r}) warned: {extra}"
    return loaded


NUMCODECS_WARNING = "Numcodecs codecs are not in the Zarr version 3 specification"


def warnings_of(open_file_fn) -> tuple:
    """The messages of the warnings xarray gives doing ``open_file_fn()``, and its result."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = open_file_fn()
    return tuple(_plain(str(w.message)) for w in seen), result


def _plain(message: str) -> str:
    """A warning's message without numpy's scalar types (``np.int64(1)`` is ``1``): an attribute
    read from JSON is an int64 where the file's was an int32."""
    return re.sub(r"np\.\w+\(([^()]*)\)", r"\1", message)


def assert_same(served: xr.Dataset, expected: xr.Dataset) -> None:
    """``assert_identical``, but for packed variables: netCDF keeps scale_factor/add_offset as
    float32, so xarray unpacks the file to float32, where Zarr's JSON attributes unpack to
    float64 (as xarray's own to_zarr round trip does; test_real_files.py says the same of
    VirtualiZarr's stores): those are compared to 1e-6, and their packed type must agree."""
    packed = [n for n, v in expected.variables.items()
              if {"scale_factor", "add_offset"} & set(v.encoding) and v.dtype == np.float32
              and n in served.variables and served[n].dtype == np.float64]
    for n in packed:
        assert served[n].encoding["dtype"] == expected[n].encoding["dtype"], n
        xr.testing.assert_allclose(served[n], expected[n].astype(np.float64), rtol=1e-6)
    served, expected = served.drop_vars(packed), expected.drop_vars(packed)
    xr.testing.assert_identical(served, expected)
    for name, var in expected.variables.items():
        got, want = served[name].dtype, var.dtype
        if want.kind in "biufc":
            got, want = got.newbyteorder("="), want.newbyteorder("=")
        if want == object and isinstance(got, np.dtypes.StringDType):
            # variable-length strings: h5netcdf hands out Python str objects, zarr-python 3
            # numpy's own variable-width string type (the same strings, as assert_identical saw)
            continue
        assert got == want, f"{name}: {got} != {want}"


# ---------------------------------------------------------------------------
# files: every HDF5 chunk index and layout, written by h5py
# ---------------------------------------------------------------------------

def make_layouts(directory: Path) -> Path:
    """One HDF5 file (libver latest) holding a dataset per chunk index and
    layout, with dimension scales so every reader names the dimensions alike."""
    path = directory / "layouts.h5"
    values = np.arange(8 * 6, dtype="f4").reshape(8, 6) / 4
    with h5py.File(path, "w", libver="latest") as f:
        f.attrs["title"] = "every layout"
        y = f.create_dataset("y", data=np.arange(8, dtype="i4"))
        x = f.create_dataset("x", data=np.arange(6, dtype="i4") * 10)
        y.make_scale("y")
        x.make_scale("x")

        def scaled(d):
            d.dims[0].attach_scale(y)
            d.dims[1].attach_scale(x)
            return d

        scaled(f.create_dataset("contiguous", data=values))
        scaled(f.create_dataset("single_chunk", data=values, chunks=(8, 6)))
        scaled(f.create_dataset("fixed_array", data=values, chunks=(3, 4), compression="gzip", shuffle=True))
        ext = scaled(f.create_dataset("extensible_array", shape=(8, 6), maxshape=(None, 6), chunks=(3, 6),
                                      dtype="f4", compression="gzip"))
        ext[...] = values
        v2 = scaled(f.create_dataset("btree_v2", shape=(8, 6), maxshape=(None, None), chunks=(3, 4),
                                     dtype="f4", fletcher32=True))
        v2[...] = values
        be = scaled(f.create_dataset("big_endian", shape=(8, 6), dtype=">f8", chunks=(4, 3)))
        be[...] = values
    # the v1 B-tree, as the earliest file format (and netCDF-C before 4.9) writes it
    old = directory / "btree_v1.h5"
    with h5py.File(old, "w", libver="earliest") as f:
        t = f.create_dataset("t", data=np.arange(10, dtype="i8"))
        t.make_scale("t")
        d = f.create_dataset("v", data=np.arange(10, dtype="<u2") * 3, chunks=(4,), compression="gzip")
        d.dims[0].attach_scale(t)
    return path


def make_compact(directory: Path) -> Path:
    """A compact dataset: its data lives in its object header (VirtualiZarr
    cannot serve it; zarrgate stores it inline)."""
    path = directory / "compact.h5"
    with h5py.File(path, "w") as f:
        x = f.create_dataset("x", data=np.arange(5, dtype="i4"))
        x.make_scale("x")
        space = h5py.h5s.create_simple((5,))
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_layout(h5py.h5d.COMPACT)
        dsid = h5py.h5d.create(f.id, b"small", h5py.h5t.NATIVE_INT16, space, plist)
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array([5, -4, 3, -2, 1], dtype="i2"))
        f["small"].dims[0].attach_scale(x)
    return path


def make_netcdf3_variants(directory: Path) -> list[Path]:
    """netCDF3 as scipy (64-bit offset) and netCDF-C (CDF-5 with its new types) write it."""
    out = []
    path = directory / "offset64.nc"
    with netcdf_file(path, "w", version=2) as f:
        f.title = "64-bit offset"
        f.createDimension("x", 4)
        v = f.createVariable("v", "f8", ("x",))
        v[:] = [1.0, 2.5, -3.0, 4.25]
        v.units = "m"
    out.append(path)
    path = directory / "cdf5.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF3_64BIT_DATA") as nc:
        nc.createDimension("time", None)
        nc.createDimension("x", 3)
        u = nc.createVariable("u", "u2", ("time", "x"))
        u[0:2] = np.array([[1, 2, 3], [4, 5, 6]], dtype="u2")
        big = nc.createVariable("big", "i8", ("x",))
        big[:] = [2**40, -5, 7]
        big.long_name = "64-bit integers"
    out.append(path)
    return out


FILES = {
    **{name: maker for name, maker in fixtures.ALL_FIXTURES.items() if name != "netcdf4_series"},
    "hdf5_layouts": make_layouts,
    "hdf5_compact": make_compact,
}


def reference_dataset(path: Path) -> xr.Dataset:
    """What the file holds, read by xarray itself (h5netcdf for HDF5, scipy or
    netCDF4 for netCDF3, as each can)."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head.startswith(b"CDF"):
        return open_file(path, engine="netcdf4")
    return open_file(path, phony_dims="access")


@pytest.mark.parametrize("name", sorted(FILES))
def test_a_file_registered_by_its_url_reads_as_xarray_reads_the_file(server, source_dir, store_name, name):
    path = FILES[name](source_dir)
    summary = put_files(server, store_name, [path.as_uri()])
    assert summary["arrays"] > 0
    served, expected = open_plain(f"{server.url}/{store_name}"), reference_dataset(path)
    if name == "netcdf4_packed":
        assert served.t2m.dtype == np.float64 and served.t2m.encoding["dtype"] == np.int16
    assert_same(served, expected)
    parser = "netcdf3" if name.startswith("netcdf3") else "hdf5"
    record = summary["files"]["files"][0]
    assert record["url"] == path.as_uri() and record["parser"] == parser, record
    assert 0 < record["bytes_read"] <= max(4 * path.stat().st_size, 1 << 20), record


@pytest.mark.parametrize("index", range(2))
def test_netcdf3_variants_read_as_the_netcdf_library_reads_them(server, source_dir, store_name, index):
    path = make_netcdf3_variants(source_dir)[index]
    put_files(server, store_name, [path.as_uri()], parser="netcdf3")
    assert_same(open_plain(f"{server.url}/{store_name}"), open_file(path, engine="netcdf4"))


def test_the_v1_btree_file_reads_as_xarray_reads_it(server, source_dir, store_name):
    make_layouts(source_dir)
    path = source_dir / "btree_v1.h5"
    put_files(server, store_name, [path.as_uri()])
    assert_same(open_plain(f"{server.url}/{store_name}"), open_file(path, phony_dims="access"))


def test_groups_are_served_as_groups(server, source_dir, store_name):
    path = fixtures.make_netcdf4_groups(source_dir)
    put_files(server, store_name, [path.as_uri()])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=NUMCODECS_WARNING)
        served = xr.open_datatree(f"{server.url}/{store_name}", engine="zarr").load()
    expected = xr.open_datatree(path, engine="h5netcdf").load()
    xr.testing.assert_identical(served, expected)


# ---------------------------------------------------------------------------
# the same bytes as VirtualiZarr's references
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["netcdf4_air", "netcdf4_bigendian", "hdf5_sparse", "netcdf4_masks"])
def test_served_chunks_are_the_bytes_virtualizarr_points_at(server, source_dir, store_name, name):
    path = FILES[name](source_dir)
    put_files(server, store_name, [path.as_uri()])
    vds = virtual_dataset(path)
    data = path.read_bytes()
    compared = 0
    for var_name, var in vds.variables.items():
        manifest = getattr(var.data, "manifest", None)
        if manifest is None:
            continue
        for key, entry in manifest.dict().items():
            grid = key.split(".") if key else []
            url = f"{server.url}/{store_name}/{var_name}/c/{'/'.join(grid)}" if grid else f"{server.url}/{store_name}/{var_name}/c"
            got = requests.get(url, timeout=30)
            assert got.status_code == 200, f"{var_name} {key}: {got.status_code} {got.text[:300]}"
            want = data[entry["offset"]:entry["offset"] + entry["length"]]
            assert got.content == want, f"{var_name} chunk {key}: the served bytes differ from VirtualiZarr's"
            compared += 1
    assert compared > 0


# ---------------------------------------------------------------------------
# what the control plane shows
# ---------------------------------------------------------------------------

def test_the_store_shows_its_files_parser_and_etag(server, source_dir, store_name):
    path = fixtures.make_netcdf4_air(source_dir)
    put_files(server, store_name, [path.as_uri()], parser="hdf5")
    shown = requests.get(f"{server.url}/api/v1/stores/{store_name}", timeout=30).json()
    files = shown["files"]
    assert files["parser"] == "hdf5"
    (record,) = files["files"]
    assert record["url"] == path.as_uri()
    assert record["parser"] == "hdf5"
    assert record["size"] == path.stat().st_size
    assert record.get("etag") or record.get("last_modified"), record
    # a file shorter than files.first_read_bytes (1 MiB) is read whole in one request, which
    # also tells its size and ETag (no HEAD)
    assert path.stat().st_size < 1 << 20
    assert (record["requests"], record["bytes_read"]) == (1, path.stat().st_size), record
    metrics = requests.get(f"{server.url}/metrics", timeout=30).text
    assert 'zarrgate_parse_files_total{outcome="ok",parser="hdf5"}' in metrics
    assert 'zarrgate_parse_bytes_total{parser="hdf5"}' in metrics


def make_scattered(path: Path) -> Path:
    """netCDF-C's layout for a file written variable by variable: 4 variables of 100 zlib chunks,
    each chunk B-tree's nodes between its chunks, so the metadata lies in 8 places of 420 KB."""
    rng = np.random.default_rng(7)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        for name, size in (("time", 100), ("y", 16), ("x", 16)):
            nc.createDimension(name, size)
        nc.createVariable("time", "f8", ("time",))[:] = np.arange(100.0)
        for name in ("t2m", "u10", "v10", "sp"):
            v = nc.createVariable(name, "f4", ("time", "y", "x"), zlib=True, chunksizes=(1, 16, 16))
            v.units = "1"
            v[:] = rng.random((100, 16, 16), dtype="f4")
    return path


def test_a_file_on_s3_is_read_in_one_request_or_from_its_metadata_alone(server, store_name, tmp_path):
    path = make_scattered(tmp_path / "scattered.nc")
    size = path.stat().st_size
    with h5py.File(path, "r") as f:
        metadata = size - sum(f[n].id.get_storage_size() for n in f if isinstance(f[n], h5py.Dataset))
    with conftest.moto_s3(tmp_path) as (endpoint, bucket):
        assert requests.put(f"{endpoint}/{bucket}/data/scattered.nc", data=path.read_bytes(), timeout=30).ok
        url = f"s3://{bucket}/data/scattered.nc"
        # By default (files.first_read_bytes = 1 MiB) a file this small is one ranged GET,
        # which also gives its size and ETag; the DMR++ sidecar looked for (auto) is the other.
        conftest.register_s3_store(server, endpoint, bucket)
        (record,) = put_files(server, store_name, [url])["files"]["files"]
        assert (record["url"], record["parser"], record["size"]) == (url, "hdf5", size), record
        assert record["etag"], record
        assert (record["requests"], record["bytes_read"]) == (2, size), record
        assert_same(open_plain(f"{server.url}/{store_name}"), reference_dataset(path))
        # Read from its metadata alone (a first read of 64 KiB), the file's structures are
        # fetched in 4 KiB windows, the four variables' headers and chunk indexes side by
        # side (measured: 135 KiB in 18 requests; 256 KiB windows took 3 requests and 420 KiB).
        # About one request per structure: 4 variables with a B-tree root, two leaves and a
        # header continuation each.
        with conftest.private_server(tmp_path, ZARRGATE_FILES_FIRST_READ_BYTES="65536") as (lean, _):
            lean_server = Server(url=lean, catalog="sqlite", log=tmp_path / "zarrgate.log")
            conftest.register_s3_store(lean_server, endpoint, bucket)
            (record,) = put_files(lean_server, store_name, [url])["files"]["files"]
            assert record["bytes_read"] <= 4 * metadata < size, (record, metadata)
            assert record["requests"] <= 24, record
            assert_same(open_plain(f"{lean}/{store_name}"), reference_dataset(path))


def test_the_command_line_registers_a_file_by_its_url(server, source_dir, store_name):
    path = fixtures.make_netcdf3_record(source_dir)
    out = subprocess.run([str(_binary()), "stores", "--server", server.url, "put", store_name, path.as_uri(),
                          "--parser", "netcdf3", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["files"]["files"][0]["parser"] == "netcdf3"
    assert_same(open_plain(f"{server.url}/{store_name}"), open_file(path, engine="netcdf4"))


# ---------------------------------------------------------------------------
# bad requests and hostile files: a 422 that says why, nothing changed
# ---------------------------------------------------------------------------

def test_bad_requests_are_refused_and_change_nothing(server, source_dir, store_name):
    air = fixtures.make_netcdf4_air(source_dir)
    put_files(server, store_name, [air.as_uri()])
    before = requests.get(f"{server.url}/api/v1/stores/{store_name}", timeout=30).json()["version"]

    two = put_files(server, store_name, [air.as_uri(), air.as_uri()], status=422)
    assert "combine" in two["detail"], two
    text = source_dir / "notes.txt"
    text.write_text("just some text, not a data file\n")
    other = put_files(server, store_name, [text.as_uri()], status=422)
    assert "notes.txt" in other["detail"] and "not a format" in other["detail"], other
    outside = put_files(server, store_name, ["file:///etc/hostname"], status=422)
    assert "not under any registered object store" in outside["detail"], outside
    missing = put_files(server, store_name, [(source_dir / "nope.nc").as_uri()], status=422)
    assert "does not exist" in missing["detail"], missing
    unknown = put_files(server, store_name, [air.as_uri()], parser="bufr", status=400)
    assert "bufr" in unknown["detail"] and "grib (GRIB2)" in unknown["detail"], unknown

    after = requests.get(f"{server.url}/api/v1/stores/{store_name}", timeout=30).json()["version"]
    assert after == before
    assert_same(open_plain(f"{server.url}/{store_name}"), open_file(air))


@pytest.mark.parametrize("name", ["netcdf4_air", "netcdf3_record"])
def test_truncated_and_damaged_files_are_refused_and_the_server_keeps_serving(server, source_dir, store_name, name):
    path = FILES[name](source_dir)
    data = path.read_bytes()
    for cut in (8, 64, len(data) // 3, len(data) // 2):
        bad = source_dir / f"cut{cut}-{path.name}"
        bad.write_bytes(data[:cut])
        answer = put_files(server, f"{store_name}-{cut}", [bad.as_uri()], status=422)
        assert bad.name in answer["detail"], answer
    damaged = bytearray(data)
    for i in range(40, min(len(damaged), 400), 7):
        damaged[i] ^= 0xFF
    bad = source_dir / f"damaged-{path.name}"
    bad.write_bytes(bytes(damaged))
    resp = requests.put(f"{server.url}/api/v1/stores/{store_name}-damaged", params={"format": "files"},
                        json={"files": [bad.as_uri()]}, timeout=120)
    assert resp.status_code in (201, 422), resp.text[:500]
    # the server is still up and serving
    put_files(server, store_name, [path.as_uri()])
    assert requests.get(f"{server.url}/healthz", timeout=10).status_code == 200


# ---------------------------------------------------------------------------
# real files from public test suites (shipped in the installed packages)
# ---------------------------------------------------------------------------

def _suite_file(package: str, relative: str) -> Path:
    import importlib.util
    spec = importlib.util.find_spec(package)
    assert spec and spec.origin, f"{package} is not installed"
    path = Path(spec.origin).parent / relative
    assert path.is_file(), f"{package} no longer ships {relative}"
    return path


SUITE_FILES = {
    "scipy-example_1": ("scipy", "io/tests/data/example_1.nc"),
    "scipy-example_2": ("scipy", "io/tests/data/example_2.nc"),
    "scipy-example_3_maskedvals": ("scipy", "io/tests/data/example_3_maskedvals.nc"),
    "xarray-example_1": ("xarray", "tests/data/example_1.nc"),
    "xarray-bears": ("xarray", "tests/data/bears.nc"),
    "h5py-vlen_string_dset": ("h5py", "tests/data_files/vlen_string_dset.h5"),
    "h5py-vlen_string_dset_utc": ("h5py", "tests/data_files/vlen_string_dset_utc.h5"),
}


@pytest.mark.parametrize("name", sorted(SUITE_FILES))
def test_files_of_public_test_suites_read_as_xarray_reads_them(server, source_dir, store_name, name):
    original = _suite_file(*SUITE_FILES[name])
    path = source_dir / f"{name}{original.suffix}"
    path.write_bytes(original.read_bytes())
    put_files(server, store_name, [path.as_uri()])
    expected_warnings, expected = warnings_of(lambda: reference_dataset(path))
    served = open_plain(f"{server.url}/{store_name}", expected_warnings)
    if name in CHAR_FILLS:
        # xarray's Zarr v3 reader cannot decode a _FillValue of fixed-width bytes (|S1): the
        # attribute is left out (with a warning in the summary), so the characters read as
        # stored where xarray on the file masks them (as in test_kerchunk_char_fill_value).
        var = CHAR_FILLS[name]
        raw = xr.open_dataset(path, engine="netcdf4", mask_and_scale=False)[var].values
        np.testing.assert_array_equal(served[var].values, raw)
        served, expected = served.drop_vars(var), expected.drop_vars(var)
    assert_same(served, expected)


CHAR_FILLS = {"scipy-example_3_maskedvals": "var6_char"}


# ---------------------------------------------------------------------------
# DMR++ sidecars: read instead of the file when there is one (auto), as earthaccess does
# ---------------------------------------------------------------------------

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "files"


def _with_sidecar(source_dir: Path, sidecar: bytes | None = None) -> Path:
    path = source_dir / "granule.h5"
    path.write_bytes((FIXTURES / "dmrpp_nc4.h5").read_bytes())
    text = (FIXTURES / "dmrpp_nc4.h5.dmrpp").read_bytes() if sidecar is None else sidecar
    (source_dir / "granule.h5.dmrpp").write_bytes(text)
    return path


def test_a_dmrpp_sidecar_is_read_in_place_of_its_file(server, source_dir, store_name):
    path = _with_sidecar(source_dir)
    summary = put_files(server, store_name, [path.as_uri()])
    (record,) = summary["files"]["files"]
    assert record["parser"] == "dmrpp" and record["sidecar"] == path.as_uri() + ".dmrpp", record
    # the sidecar's bytes were read, not the file's
    assert record["bytes_read"] == (source_dir / "granule.h5.dmrpp").stat().st_size, record
    served = open_plain(f"{server.url}/{store_name}")
    assert_same(served, reference_dataset(path))
    # the same store as the HDF5 parser makes from the file itself
    put_files(server, f"{store_name}-h5", [path.as_uri()], parser="hdf5")
    assert_same(open_plain(f"{server.url}/{store_name}-h5"), served)
    # registered again, the sidecar's parse is remembered (under the sidecar's URL and ETag)
    (again,) = put_files(server, f"{store_name}-again", [path.as_uri()])["files"]["files"]
    assert again["parser"] == "dmrpp" and again.get("cached") is True, again
    assert again["sidecar"] == record["sidecar"] and again["etag"] == record["etag"], again
    assert_same(open_plain(f"{server.url}/{store_name}-again"), served)


def test_an_empty_sidecar_falls_back_to_the_file_with_a_warning(server, source_dir, store_name):
    path = _with_sidecar(source_dir, sidecar=b"")
    summary = put_files(server, store_name, [path.as_uri()])
    assert summary["files"]["files"][0]["parser"] == "hdf5", summary
    assert any("sidecar" in w and "empty" in w for w in summary.get("warnings", [])), summary
    assert_same(open_plain(f"{server.url}/{store_name}"), reference_dataset(path))


def test_a_broken_sidecar_is_refused_naming_it(server, source_dir, store_name):
    path = _with_sidecar(source_dir, sidecar=b"<?xml version='1.0'?><Dataset name='x'><Float32 name='a'>")
    answer = put_files(server, store_name, [path.as_uri()], status=422)
    assert "granule.h5.dmrpp" in answer["detail"] and "DMR++" in answer["detail"], answer
    nothing = put_files(server, store_name, [(FIXTURES / "server_air.nc").as_uri()], parser="dmrpp", status=422)
    assert "not under any registered object store" in nothing["detail"] or "sidecar" in nothing["detail"]


def test_a_store_made_from_files_refuses_patch(server, source_dir, store_name):
    path = fixtures.make_netcdf4_air(source_dir)
    put_files(server, store_name, [path.as_uri()])
    patch = {"nodes": {"extra": {"zarr_format": 3, "node_type": "group", "attributes": {}}}}
    resp = requests.patch(f"{server.url}/api/v1/stores/{store_name}", json=patch, timeout=30)
    assert resp.status_code == 409, resp.text
    assert "register them again" in resp.json()["detail"]
    assert_same(open_plain(f"{server.url}/{store_name}"), open_file(path))
