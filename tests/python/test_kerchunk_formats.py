"""Every format kerchunk scans beside HDF5 and netCDF: TIFF and GeoTIFF, GRIB2, FITS.

The files are written here by the tools that make them (tifffile with
imagecodecs' compressors and predictors; ecCodes, from its PyPI wheels, from
its own GRIB2 sample; astropy), scanned by kerchunk's scanners
(``kerchunk.tiff.tiff_to_zarr``, ``kerchunk.grib2.scan_grib``,
``kerchunk.fits.process_file``), and the references are registered unchanged.
zarr-python 3 then reads the store over HTTP, with the plugins for codecs it
does not have registered by the README's recipe ("TIFF, GeoTIFF, GRIB2 and
FITS", run as written), and must read the values tifffile, ecCodes and
astropy read from the files. The registration summary warns, per array, of the
codecs stock zarr-python or zarrs cannot decode, and every served chunk is the
byte range of the file the references name.

What the scanners need from the writers, each a limit of kerchunk 0.2.10 or
tifffile, not of zarrgate:

* tifffile's own ImageDescription (``shaped`` metadata, its default) makes
  ``tiff_to_zarr`` fail (it tries ``dict()`` of a tuple, then parses it as
  XML), so the TIFFs are written with ``metadata=None``, as GDAL and most other
  writers do.
* tifffile refuses to reference a last strip shorter than the others
  ("incomplete chunks are not supported"): strips divide the image height.
* ``kerchunk.fits.process_file`` returns its metadata as ``bytes``, which JSON
  cannot hold: they are decoded before the references are sent.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import eccodes
import numpy as np
import pytest
import requests
import tifffile
import zarr
from astropy.io import fits
from kerchunk.fits import process_file
from kerchunk.grib2 import scan_grib
from kerchunk.tiff import tiff_to_zarr

from conftest import REPO, register
from test_reach import zarr2_python  # noqa: F401  (the zarr-2 venv's interpreter, a fixture)

TIMEOUT = 60

def readme_recipe() -> str:
    """The README's Python block registering the plugins' codecs with zarr-python 3."""
    section = (REPO / "README.md").read_text().split("### TIFF, GeoTIFF, GRIB2 and FITS", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README lost its codec recipe"
    return match.group(1)


@pytest.fixture(scope="module", autouse=True)
def zarr3_codecs():
    """What a reader does once, as the README says (run as written): imagecodecs' codecs
    into numcodecs' registry (kerchunk.codecs puts its GRIBCodec there on import), then one
    zarr-python 3 codec per ``numcodecs.<id>`` name, wrapping the numcodecs codec."""
    exec(readme_recipe(), {"__name__": "__main__"})


def json_refs(refs: dict) -> dict:
    """References as JSON can hold them (kerchunk's FITS scanner leaves bytes)."""
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in refs.items()}


def virtual_refs(doc: dict) -> dict[str, tuple[str, int, int]]:
    """Chunk key to (path, offset, length) of every ranged reference, templates expanded."""
    refs, templates = doc.get("refs", doc), doc.get("templates", {})
    out = {}
    for key, value in refs.items():
        if isinstance(value, list) and len(value) == 3:
            path = value[0]
            for name, text in templates.items():
                path = path.replace("{{" + name + "}}", text)
            out[key] = (path, value[1], value[2])
    return out


def register_refs(server, store: str, doc: dict) -> dict:
    """Register ``doc``; the store's description keeps the summary's warnings, and every
    ranged chunk is served as the file's bytes."""
    summary = register(server, store, doc)
    described = requests.get(f"{server.url}/api/v1/stores/{store}", timeout=TIMEOUT).json()
    assert described["warnings"] == summary["warnings"], "kept with the version"
    ranges = virtual_refs(doc)
    assert summary["chunks"]["virtual"] == len(ranges), summary
    for key, (path, offset, length) in ranges.items():
        resp = requests.get(f"{server.url}/{store}/{key}", timeout=TIMEOUT)
        assert resp.status_code == 200, (key, resp.status_code, resp.text[:300])
        with open(path, "rb") as f:
            f.seek(offset)
            assert resp.content == f.read(length), key
    return summary


def codecs_warned(summary: dict) -> set[tuple[str, str]]:
    """(array, codec) of each warning that readers need a plugin."""
    out = set()
    for warning in summary["warnings"]:
        assert "decoded by neither stock zarr-python nor zarrs" in warning, warning
        head, codec = warning.split(": codec ", 1)
        out.add((head, codec.split(" ", 1)[0]))
    return out


# --------------------------------------------------------------------------
# TIFF and GeoTIFF (tifffile writes, kerchunk.tiff.tiff_to_zarr scans)
# --------------------------------------------------------------------------

RNG = np.random.default_rng(21)
GEOKEYS = [  # a GeoTIFF in WGS 84, 0.5 degree pixels, top left corner at 10 E 50 N
    (33550, "d", 3, (0.5, 0.5, 0.0), True),                 # ModelPixelScaleTag
    (33922, "d", 6, (0.0, 0.0, 0.0, 10.0, 50.0, 0.0), True),  # ModelTiepointTag
    (34735, "H", 16, (1, 1, 0, 3, 1024, 0, 1, 2, 1025, 0, 1, 1, 2048, 0, 1, 4326), True),
]
TIFFS = {
    # name: (values, tifffile.imwrite options, codecs readers need a plugin for)
    "tiled_zlib": (RNG.integers(0, 4000, (256, 300), dtype="uint16"),
                   dict(tile=(64, 64), compression="zlib"), set()),
    "lzw_predictor": (RNG.integers(0, 4000, (256, 300), dtype="uint16"),
                      dict(rowsperstrip=64, compression="lzw", predictor=True),
                      {"numcodecs.imagecodecs_delta", "numcodecs.imagecodecs_lzw"}),
    "multipage_zstd": (RNG.integers(0, 255, (4, 64, 80), dtype="uint8"),
                       dict(compression="zstd", photometric="minisblack"),
                       {"numcodecs.imagecodecs_zstd"}),
    "geotiff_floatpred": ((RNG.random((128, 96), dtype="float32") * 40 - 10).astype("float32"),
                          dict(tile=(32, 32), compression="zlib", predictor=3, extratags=GEOKEYS),
                          {"numcodecs.imagecodecs_floatpred"}),
}


@pytest.mark.parametrize("name", sorted(TIFFS))
def test_tiff(server, source_dir, store_name, name):
    values, options, plugins = TIFFS[name]
    path = source_dir / f"{name}.tif"
    tifffile.imwrite(path, values, metadata=None, **options)
    with tifffile.TiffFile(path) as tif:
        assert len(tif.pages) == (values.shape[0] if values.ndim == 3 else 1)
        expected = tif.asarray()
    np.testing.assert_array_equal(expected, values)

    refs = tiff_to_zarr(str(path))
    summary = register_refs(server, store_name, refs)
    assert codecs_warned(summary) == {("the root array", codec) for codec in plugins}, summary

    array = zarr.open_array(f"{server.url}/{store_name}", mode="r")
    got = array[...]
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    if name == "geotiff_floatpred":
        attrs = array.attrs.asdict()
        assert attrs["GeographicTypeGeoKey"] == 4326, attrs
        assert attrs["ModelTiepoint"][3:5] == [10.0, 50.0], attrs
        assert array.metadata.dimension_names == ("Y", "X")


# --------------------------------------------------------------------------
# GRIB2 (ecCodes writes, kerchunk.grib2.scan_grib scans)
# --------------------------------------------------------------------------

NJ, NI = 8, 16
MISSING = 9999.0


def make_grib2(path: Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One 2 m temperature message on a regular 5-degree grid, from ecCodes' GRIB2 sample,
    with two missing points (a bitmap); its values as ecCodes decodes them, (lat, lon), and
    its latitudes and longitudes."""
    handle = eccodes.codes_grib_new_from_samples("regular_ll_sfc_grib2")
    try:
        for key, value in [("Ni", NI), ("Nj", NJ),
                           ("latitudeOfFirstGridPointInDegrees", 70.0),
                           ("latitudeOfLastGridPointInDegrees", 35.0),
                           ("longitudeOfFirstGridPointInDegrees", 0.0),
                           ("longitudeOfLastGridPointInDegrees", 75.0),
                           ("iDirectionIncrementInDegrees", 5.0),
                           ("jDirectionIncrementInDegrees", 5.0),
                           ("shortName", "2t"), ("bitsPerValue", 16),
                           ("bitmapPresent", 1), ("missingValue", MISSING)]:
            eccodes.codes_set(handle, key, value)
        values = 250.0 + np.arange(NJ * NI, dtype="float64") / 8
        values[[3, 77]] = MISSING
        eccodes.codes_set_values(handle, values)
        with open(path, "wb") as f:
            eccodes.codes_write(handle, f)
    finally:
        eccodes.codes_release(handle)
    with open(path, "rb") as f:
        handle = eccodes.codes_grib_new_from_file(f)
        try:
            return eccodes.codes_get_values(handle).reshape(NJ, NI), {
                "latitude": eccodes.codes_get_array(handle, "distinctLatitudes"),
                "longitude": eccodes.codes_get_array(handle, "distinctLongitudes"),
            }
        finally:
            eccodes.codes_release(handle)


def test_grib2(server, source_dir, store_name):
    path = source_dir / "t2m.grib2"
    values, coords = make_grib2(path)
    assert np.count_nonzero(values == MISSING) == 2

    [refs] = scan_grib(str(path))
    summary = register_refs(server, store_name, refs)
    assert codecs_warned(summary) == {('array "t2m"', "numcodecs.grib")}, summary

    group = zarr.open_group(f"{server.url}/{store_name}", mode="r")
    t2m = group["t2m"]
    assert t2m.metadata.codecs[0].to_dict()["name"] == "numcodecs.grib"
    got = t2m[...]
    # kerchunk's GRIBCodec reads ecCodes' missing value as NaN
    np.testing.assert_array_equal(got, np.where(values == MISSING, np.nan, values))
    assert np.isnan(got).sum() == 2
    assert t2m.attrs["GRIB_shortName"] == "2t" and t2m.attrs["units"] == "K"
    for name, expected in coords.items():
        np.testing.assert_array_equal(group[name][...], expected, err_msg=name)


# --------------------------------------------------------------------------
# FITS (astropy writes, kerchunk.fits.process_file scans)
# --------------------------------------------------------------------------

def test_fits(server, source_dir, store_name):
    path = source_dir / "image.fits"
    counts = (np.arange(30 * 20, dtype=">i2").reshape(30, 20) - 300).astype(">i2")
    flux = ((np.arange(12 * 10 * 8, dtype="float32") / 7).reshape(12, 10, 8)).astype(">f4")
    table = fits.BinTableHDU.from_columns([fits.Column(name="a", format="J", array=np.arange(5))],
                                          name="TABLE")
    fits.HDUList([fits.PrimaryHDU(counts), fits.ImageHDU(flux, name="FLUX"), table]).writeto(path)
    with fits.open(path) as hdul:
        expected = {"PRIMARY": hdul[0].data.copy(), "FLUX": hdul["FLUX"].data.copy()}

    refs = json_refs(process_file(str(path), extension=[0, "FLUX"]))
    summary = register_refs(server, store_name, refs)
    assert summary["arrays"] == 2 and summary["warnings"] == [], summary

    group = zarr.open_group(f"{server.url}/{store_name}", mode="r")
    for name, want in expected.items():
        got = group[name][...]
        assert got.dtype.newbyteorder("=") == want.dtype.newbyteorder("="), name
        np.testing.assert_array_equal(got, want, err_msg=name)
    assert group["FLUX"].attrs["EXTNAME"] == "FLUX"
    assert group["FLUX"].metadata.dimension_names == ("z", "y", "x")

    # A binary table is a structured dtype, which Zarr v3 cannot express: refused, named.
    with_table = json_refs(process_file(str(path), extension=["TABLE"]))
    resp = requests.put(f"{server.url}/api/v1/stores/{store_name}-table",
                        data=json.dumps(with_table), timeout=TIMEOUT)
    assert resp.status_code == 422, resp.text
    assert "structured dtypes are not supported" in resp.text, resp.text


def test_scaled_fits_images_read_as_their_physical_values(server, source_dir, store_name, zarr2_python, tmp_path):
    # unsigned 16-bit data: astropy stores signed integers with BZERO = 32768, BSCALE = 1
    path = source_dir / "scaled.fits"
    unsigned = (np.arange(40 * 30, dtype="uint32").reshape(40, 30) * 50).astype("uint16")
    fits.HDUList([fits.PrimaryHDU(), fits.ImageHDU(unsigned, name="U16")]).writeto(path)
    with fits.open(path) as hdul:
        assert (hdul["U16"].header["BZERO"], hdul["U16"].header["BITPIX"]) == (32768, 16)
        expected = hdul["U16"].data.copy()
    assert expected.max() > 32767, "values only the scaling makes right"

    refs = json_refs(process_file(str(path), extension=["U16"]))
    zarray = json.loads(refs["U16/.zarray"])
    assert zarray["dtype"] == ">i2" and zarray["filters"][0]["id"] == "fixedscaleoffset", zarray
    summary = register_refs(server, store_name, refs)
    assert summary["warnings"] == [], "stock zarr-python reads it"

    array = zarr.open_group(f"{server.url}/{store_name}", mode="r")["U16"]
    assert array.dtype == np.float64, "declared as what the filter decodes to"
    np.testing.assert_array_equal(array[...], expected)

    # zarr-python 2 reads the same numbers from the v2 view, at /v2/{store}
    out = tmp_path / "v2.npy"
    code = ("import sys, numpy, zarr; a = zarr.open_array(sys.argv[1], mode='r'); "
            "assert zarr.__version__.startswith('2.'); numpy.save(sys.argv[2], a[...])")
    done = subprocess.run([zarr2_python, "-c", code, f"{server.url}/v2/{store_name}/U16", str(out)],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    np.testing.assert_array_equal(np.load(out), expected)
