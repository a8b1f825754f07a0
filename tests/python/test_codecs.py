"""Stores whose codecs zarr-python reads through numcodecs but zarrs (which
validates registrations) does not implement: LZ4, LZMA, CRC32, Delta,
Quantize, and numcodecs' own spelling of Blosc, Zstd and GZip. zarr-python
writes the arrays (Zarr v3 with ``numcodecs.*`` codecs, and Zarr v2 with
numcodecs filters and compressors), zarrgate serves them from manifests that
point at zarr-python's own chunk files, and zarr-python and xarray must read
back exactly what they wrote.
"""

from __future__ import annotations

import json
from pathlib import Path

import numcodecs
import numcodecs.zarr3 as nz3
import numpy as np
import pytest
import requests
import xarray as xr
import zarr

from conftest import register
from virtual import open_served

TIMEOUT = 60
VALUES = (np.arange(6 * 8, dtype="f4").reshape(6, 8) * 1.25).astype("f4")

V3_CODECS = {
    "lz4": dict(compressors=[nz3.LZ4(acceleration=1)]),
    "lzma": dict(compressors=[nz3.LZMA()]),
    "blosc": dict(compressors=[nz3.Blosc(cname="lz4", clevel=5, shuffle=1)]),
    "zstd": dict(compressors=[nz3.Zstd(level=3)]),
    "gzip": dict(compressors=[nz3.GZip(level=5)]),
    "crc32": dict(compressors=[nz3.Zlib(level=1), nz3.CRC32()]),
    "delta": dict(filters=[nz3.Delta(dtype="<f4")], compressors=[nz3.Zlib(level=1)]),
    "quantize": dict(filters=[nz3.Quantize(digits=3, dtype="<f4")], compressors=None),
}


def _chunk_files(root: Path, array: str) -> dict[str, Path]:
    """Chunk key (``c/0/1`` or ``0.1``) to file, for an array zarr-python wrote."""
    base = root / array
    return {p.relative_to(base).as_posix(): p for p in base.rglob("*")
            if p.is_file() and not p.name.startswith((".z", "zarr.json"))}


def _manifest(files: dict[str, Path], v2: bool) -> dict:
    out = {}
    for key, path in files.items():
        index = key if v2 else key.removeprefix("c/").replace("/", ".")
        out[index] = {"path": str(path), "offset": 0, "length": path.stat().st_size}
    return out


@pytest.mark.parametrize("codec", sorted(V3_CODECS))
def test_zarr_v3_numcodecs(server, source_dir, store_name, codec):
    root = source_dir / "v3.zarr"
    group = zarr.open_group(root, mode="w", zarr_format=3)
    array = group.create_array("a", shape=VALUES.shape, chunks=(3, 4), dtype="f4",
                               dimension_names=["y", "x"], fill_value=-1.0, **V3_CODECS[codec])
    array[...] = VALUES
    meta = json.loads((root / "a" / "zarr.json").read_text())
    assert any(c["name"].startswith("numcodecs.") for c in meta["codecs"]), meta["codecs"]
    manifest = _manifest(_chunk_files(root, "a"), v2=False)
    assert len(manifest) == 4
    del manifest["1.1"]  # a missing chunk reads as the fill value
    doc = {"nodes": {"": {"zarr_format": 3, "node_type": "group", "attributes": {}},
                     "a": {**meta, "manifest": manifest}}}
    register(server, store_name, doc)
    url = f"{server.url}/{store_name}"
    expected = VALUES.copy()
    expected[3:6, 4:8] = -1.0
    np.testing.assert_array_equal(zarr.open_group(url, mode="r")["a"][...], expected)
    # xarray masks a Zarr v3 array's _FillValue attribute, never its fill_value
    np.testing.assert_array_equal(open_served(url).a.values, expected)


def test_zarr_v2_numcodecs_through_kerchunk_references(server, source_dir, store_name):
    """A Zarr v2 store with a Delta filter and an LZ4 compressor, referenced
    the way kerchunk references an existing Zarr v2 store (its metadata inline,
    every chunk a whole file): the import converts the codecs, and xarray reads
    what it reads from the v2 store itself."""
    root = source_dir / "v2.zarr"
    group = zarr.open_group(root, mode="w", zarr_format=2)
    array = group.create_array("a", shape=VALUES.shape, chunks=(3, 4), dtype="<f4",
                               filters=[numcodecs.Delta(dtype="<f4")],
                               compressors=numcodecs.LZ4(acceleration=1), fill_value=None,
                               attributes={"_ARRAY_DIMENSIONS": ["y", "x"]})
    array[...] = VALUES
    lzma = group.create_array("b", shape=(8,), chunks=(4,), dtype="<i4",
                              compressors=numcodecs.LZMA(), attributes={"_ARRAY_DIMENSIONS": ["x"]})
    lzma[...] = np.arange(8, dtype="<i4") * 3
    refs = {".zgroup": (root / ".zgroup").read_text()}
    for name in ("a", "b"):
        for meta in (".zarray", ".zattrs"):
            refs[f"{name}/{meta}"] = (root / name / meta).read_text()
        for key, path in _chunk_files(root, name).items():
            refs[f"{name}/{key}"] = [str(path)]
    resp = requests.put(f"{server.url}/api/v1/stores/{store_name}",
                        data=json.dumps({"version": 1, "refs": refs}), timeout=TIMEOUT)
    assert resp.status_code == 201, resp.text
    url = f"{server.url}/{store_name}"
    meta = requests.get(f"{url}/a/zarr.json", timeout=TIMEOUT).json()
    assert [c["name"] for c in meta["codecs"]] == ["numcodecs.delta", "bytes", "numcodecs.lz4"]
    served = open_served(url)
    local = xr.open_zarr(root, zarr_format=2, consolidated=False)
    np.testing.assert_array_equal(served.a.values, local.a.values)
    # b's v2 fill_value is zarr-python's default 0, which xarray masks reading
    # Zarr v2 and the import never declares (a real 0 would read NaN): the raw
    # numbers are compared
    np.testing.assert_array_equal(zarr.open_group(url, mode="r")["b"][...], np.arange(8) * 3)
    np.testing.assert_array_equal(served.b.values, np.arange(8) * 3)
