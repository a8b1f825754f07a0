"""GDAL, as bundled in rasterio's wheels (GDAL 3.10), reads a netCDF4 store made by VirtualiZarr
through the snippet the store browser shows (``ZARR:"/vsicurl/<origin>/v2/<store>":/<array>``):
the numbers h5py reads, and its fill value as nodata. This GDAL has no Zarr v3 ``bytes`` codec,
so it reads the store's Zarr v2 view, at its own URL ``/v2/<store>``; and it has no ``shuffle`` filter ("Filter shuffle not handled"),
so the file is compressed without HDF5's shuffle. Every probe GDAL makes on the way (the root's
``.zarray``, sidecars such as ``.aux.xml`` and ``.gmac``, directory listings) gets a true answer:
404 for what is not there, and nothing else but 200 or 206. With read tokens, the snippet's
``GDAL_HTTP_HEADERS`` carries the token.
"""

from __future__ import annotations

import html
import json
import re
import uuid
from pathlib import Path

import h5py
import netCDF4
import numpy as np
import pytest
import requests

import zarrgate_client
from conftest import private_server
from virtual import virtual_dataset

rasterio = pytest.importorskip("rasterio")

HTML = "text/html,application/xhtml+xml,*/*;q=0.8"
# A request as the server logs it at debug level.
LOGGED = re.compile(r"method=(\w+)[^\n]*? status=(\d+) path=(\S+)")


def make_netcdf4_deflate(directory: Path) -> Path:
    """netCDF4: float32 air(time, lat, lon), zlib without shuffle, chunks (2, 3, 4), _FillValue
    -9999 with masked cells, and float coordinates."""
    path = directory / "deflate.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.title = "zarrgate test: GDAL"
        for name, size in (("time", 4), ("lat", 5), ("lon", 6)):
            nc.createDimension(name, size)
        nc.createVariable("lat", "f4", ("lat",))[:] = np.linspace(40.0, 50.0, 5)
        nc.createVariable("lon", "f4", ("lon",))[:] = np.linspace(-10.0, 15.0, 6)
        air = nc.createVariable("air", "f4", ("time", "lat", "lon"), zlib=True, shuffle=False,
                                chunksizes=(2, 3, 4), fill_value=np.float32(-9999.0))
        values = np.ma.masked_array(270.0 + np.arange(120, dtype="f4").reshape(4, 5, 6) / 4, mask=False)
        values.mask[1, 0, :3] = True
        air[:] = values
        air.units = "K"
    return path


def snippet(page: str) -> str:
    """The dataset name of the page's GDAL snippet (``gdalinfo '<name>'``)."""
    found = re.search(r'<pre id="snippet-gdal"[^>]*>(.*?)</pre>', page, re.S)
    assert found, "no GDAL snippet on the page"
    command = html.unescape(found.group(1)).strip()
    name = re.fullmatch(r"gdalinfo '([^']+)'", command)
    assert name, command
    return name.group(1)


def requests_since(log: Path, start: int) -> list[tuple[str, int, str]]:
    text = log.read_text(errors="replace")[start:]
    return [(m.group(1), int(m.group(2)), m.group(3)) for m in LOGGED.finditer(text)]


def test_gdal_reads_a_virtualizarr_store_through_the_pages_snippet(tmp_path):
    (tmp_path / "src").mkdir()
    path = make_netcdf4_deflate(tmp_path / "src")
    with private_server(tmp_path, ZARRGATE_LOG="debug") as (url, log):
        zarrgate_client.register_object_store(url, f"src-{uuid.uuid4().hex[:8]}", (tmp_path / "src").as_uri() + "/")
        store = "gdal"
        doc = zarrgate_client.manifeststore_to_native(virtual_dataset(path))
        resp = requests.put(f"{url}/api/v1/stores/{store}", data=json.dumps(doc), timeout=60)
        assert resp.status_code == 201, resp.text
        with h5py.File(path) as f:
            raw = f["air"][...]

        page = requests.get(f"{url}/{store}/air/", headers={"Accept": HTML}, timeout=30).text
        name = snippet(page)
        assert name == f'ZARR:"/vsicurl/{url}/v2/{store}":/air', name
        start = len(log.read_text(errors="replace"))
        with rasterio.open(name) as ds:
            assert (ds.count, ds.height, ds.width) == (4, 5, 6), "time as bands, lat x lon"
            assert ds.nodata == -9999.0
            values = ds.read()
        np.testing.assert_array_equal(values, raw)
        assert (values == -9999.0).sum() == 3, "the masked cells read as nodata"

        seen = requests_since(log, start)
        statuses = {status for _, status, _ in seen}
        assert statuses <= {200, 206, 404}, seen
        chunks = {p for m, s, p in seen if m == "GET" and s == 200 and re.search(r"/air/\d+[./]\d+[./]\d+$", p)}
        assert len(chunks) == 8, f"every chunk (a grid of 2 x 2 x 2) read from the server: {seen}"
        assert all(p.startswith(f"/v2/{store}") for _, _, p in seen), f"GDAL read the v2 view only: {seen}"
        listed = requests.get(f"{url}/v2/{store}/.zmetadata", timeout=30).json()["metadata"]
        for method, status, where in seen:
            if status == 404:
                key = where.removeprefix(f"/v2/{store}/")
                assert key not in listed, f"{method} {where}: 404 for a key the store has"
                assert requests.get(f"{url}{where}", timeout=30).status_code == 404, where
        probes = {p for _, s, p in seen if s == 404}
        assert f"/v2/{store}/.zarray" in probes, "GDAL asks whether the root is an array: it is not"
        assert any(p.endswith((".aux.xml", ".gmac")) for p in probes), f"sidecar probes: {seen}"

        # the same file from kerchunk references: v2 chunk keys `0.0.0`, which sit in the array's
        # directory whose listing GDAL reads (chunk keys are not listed): still read, not taken
        # for missing
        refs = virtual_dataset(path).vz.to_kerchunk(format="dict")
        resp = requests.put(f"{url}/api/v1/stores/{store}-refs", data=json.dumps(refs), timeout=60)
        assert resp.status_code == 201, resp.text
        start = len(log.read_text(errors="replace"))
        with rasterio.open(f'ZARR:"/vsicurl/{url}/v2/{store}-refs":/air') as ds:
            np.testing.assert_array_equal(ds.read(), raw)
        seen = requests_since(log, start)
        assert ("GET", 200, f"/v2/{store}-refs/air/") in seen, f"GDAL read the array's listing: {seen}"
        assert ("GET", 200, f"/v2/{store}-refs/air/1.1.1") in seen, seen

        # the store's page: its group opens as its one 3-D array
        root = requests.get(f"{url}/{store}/", headers={"Accept": HTML}, timeout=30).text
        group = snippet(root)
        assert group == f'ZARR:"/vsicurl/{url}/v2/{store}"', group
        with rasterio.open(group) as ds:
            np.testing.assert_array_equal(ds.read(), raw)


def test_gdal_reads_with_the_read_token_where_the_snippet_puts_it(tmp_path):
    (tmp_path / "src").mkdir()
    path = make_netcdf4_deflate(tmp_path / "src")
    token = "reader-token-for-gdal-0123456789"
    with private_server(tmp_path, ZARRGATE_READ_TOKENS=token) as (url, _log):
        zarrgate_client.register_object_store(url, "src", (tmp_path / "src").as_uri() + "/")
        doc = zarrgate_client.manifeststore_to_native(virtual_dataset(path))
        for store in ("gdal", "other"):  # GDAL caches what it read: the read without a token gets its own
            resp = requests.put(f"{url}/api/v1/stores/{store}", data=json.dumps(doc), timeout=60)
            assert resp.status_code == 201, resp.text
        page = requests.get(f"{url}/gdal/air/", headers={"Accept": HTML, "Authorization": f"Bearer {token}"},
                            timeout=30).text
        found = re.search(r'<pre id="snippet-gdal"[^>]*>(.*?)</pre>', page, re.S)
        command = html.unescape(found.group(1)).strip()
        shown = re.fullmatch(r"GDAL_HTTP_HEADERS=\"([^\"]+)\" gdalinfo '([^']+)'", command)
        assert shown, command
        header, name = shown.group(1).replace("<read token>", token), shown.group(2)
        with h5py.File(path) as f:
            raw = f["air"][...]
        with rasterio.Env(GDAL_HTTP_HEADERS=header), rasterio.open(name) as ds:
            np.testing.assert_array_equal(ds.read(), raw)
        with pytest.raises(rasterio.errors.RasterioIOError), rasterio.open(name.replace("/gdal", "/other")) as ds:
            ds.read()  # no token: GDAL gets 401 and fails, never reads fill values
