"""TIFF, BigTIFF, GeoTIFF and COG registered as ``?format=files``: the server reads the files.

Files are written here by tifffile (imagecodecs' compressors and predictors, classic and
BigTIFF, both byte orders, chunky and planar samples, several pages) and by GDAL through
rasterio's wheels (a GeoTIFF with nodata, a COG with overviews), registered by their URLs, and
read over HTTP by zarr-python 3 with the README's codec plugins ("TIFF, GeoTIFF, GRIB2 and
FITS", run as written): every image must equal what tifffile or rasterio reads from the file.
A GeoTIFF opens with plain ``xr.open_zarr`` masked by its nodata, with a ``spatial_ref``
coordinate whose CRS and GeoTransform rasterio reads back (as rioxarray reads them); a COG's
overviews are sibling levels that ``xr.open_datatree`` opens. A corrupt TIFF is a 422 naming
the file, and nothing is stored.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import rasterio
import requests
import tifffile
import xarray as xr
import zarr
from affine import Affine
from rasterio.crs import CRS
from rasterio.transform import from_origin

from test_files import put_files
from test_kerchunk_formats import readme_recipe

TIMEOUT = 60
RNG = np.random.default_rng(37)


@pytest.fixture(scope="module", autouse=True)
def zarr3_codecs():
    """The README's plugin recipe, run as written (imagecodecs' LZW, predictors, PackBits)."""
    exec(readme_recipe(), {"__name__": "__main__"})


def register(server, store: str, path) -> dict:
    summary = put_files(server, store, [path.as_uri()], parser="auto")
    assert summary["files"]["files"][0]["parser"] == "tiff", summary
    return summary


def plugins_warned(summary: dict) -> set[str]:
    """The codecs the summary says readers need a plugin for."""
    return {w.split(": codec ", 1)[1].split(" ", 1)[0] for w in summary["warnings"] if ": codec " in w}


# --------------------------------------------------------------------------
# tifffile: every compression, predictor, sample layout, offset size and byte order
# --------------------------------------------------------------------------

U16 = RNG.integers(0, 4000, (256, 300), dtype="uint16")
# An 8-bit image with edges and texture, as JPEG is meant for.
SMOOTH = ((np.add.outer(np.arange(64) * 3, np.arange(80) * 2) + RNG.integers(0, 12, (64, 80))) % 256).astype("uint8")
TIFFS = {
    # name: (values, tifffile.imwrite options, codecs readers need a plugin for)
    "tiled_deflate": (U16, dict(tile=(64, 64), compression="zlib"), set()),
    "lzw_predictor": (U16, dict(rowsperstrip=64, compression="lzw", predictor=2),
                      {"numcodecs.imagecodecs_delta", "numcodecs.imagecodecs_lzw"}),
    "floatpred_big_endian": ((RNG.random((128, 96), dtype="float32") * 40 - 10).astype("float32"),
                             dict(tile=(32, 32), compression="zlib", predictor=3, byteorder=">"),
                             {"numcodecs.imagecodecs_floatpred"}),
    "zstd_pages": (RNG.integers(0, 255, (4, 64, 80), dtype="uint8"),
                   dict(compression="zstd", photometric="minisblack", rowsperstrip=16), set()),
    "bigtiff_rgb_chunky_predictor": (RNG.integers(0, 255, (64, 80, 3), dtype="uint8"),
                                     dict(bigtiff=True, tile=(32, 32), compression="zlib", predictor=2,
                                          photometric="rgb"),
                                     {"numcodecs.imagecodecs_delta"}),
    "bigtiff_planar_big_endian": (RNG.integers(-3000, 3000, (3, 64, 64), dtype="int16"),
                                  dict(bigtiff=True, byteorder=">", tile=(32, 32), compression="lzw",
                                       planarconfig="separate", photometric="rgb"),
                                  {"numcodecs.imagecodecs_lzw"}),
    "packbits": (RNG.integers(0, 3, (40, 50), dtype="uint8"), dict(compression="packbits", rowsperstrip=8),
                 {"numcodecs.imagecodecs_packbits"}),
    "uncompressed_float64": (RNG.random((30, 20)), dict(rowsperstrip=10), set()),
    "floatpred_float64": ((RNG.random((48, 30)) * 2e6 - 1e6), dict(rowsperstrip=16, compression="zlib", predictor=3),
                          {"numcodecs.imagecodecs_floatpred"}),
    "floatpred_rgb_chunky": ((RNG.random((64, 80, 3), dtype="float32") - 0.5).astype("float32"),
                             dict(tile=(32, 32), compression="lzw", predictor=3, photometric="rgb"),
                             {"numcodecs.imagecodecs_floatpred", "numcodecs.imagecodecs_lzw"}),
    # JPEG tiles that are whole JPEG streams (tifffile writes no JPEGTables): grey, and RGB
    # written without the colour transform (tifffile's default is YCbCr, which is left out).
    "jpeg_grey": (SMOOTH, dict(tile=(32, 32), compression="jpeg", photometric="minisblack"),
                  {"numcodecs.imagecodecs_jpeg"}),
    "jpeg_rgb": (np.stack([SMOOTH, 255 - SMOOTH, SMOOTH // 2 + 40], axis=-1),
                 dict(tile=(32, 32), compression="jpeg", photometric="rgb", subsampling=(1, 1),
                      compressionargs={"outcolorspace": "rgb"}),
                 {"numcodecs.imagecodecs_jpeg"}),
}


def write_tiff(directory, name: str):
    """TIFFS[name] written by tifffile under ``directory``: its path, and each page as tifffile
    reads it."""
    values, options, _ = TIFFS[name]
    path = directory / f"{name}.tif"
    pages = values if name == "zstd_pages" else [values]
    write_options = {k: v for k, v in options.items() if k not in ("bigtiff", "byteorder")}
    with tifffile.TiffWriter(path, bigtiff=options.get("bigtiff", False),
                             byteorder=options.get("byteorder", "<")) as tif:
        for page in pages:
            tif.write(page, metadata=None, **write_options)
    with tifffile.TiffFile(path) as tif:
        expected = [p.asarray() for p in tif.pages]
        assert tif.is_bigtiff == options.get("bigtiff", False)
    return path, expected


@pytest.mark.parametrize("name", sorted(TIFFS))
def test_tifffile_images_read_as_tifffile_reads_them(server, source_dir, store_name, name):
    plugins = TIFFS[name][2]
    path, expected = write_tiff(source_dir, name)
    summary = register(server, store_name, path)
    assert plugins_warned(summary) == plugins, summary
    root = zarr.open_group(f"{server.url}/{store_name}", mode="r")
    assert sorted(root.array_keys()) == [str(i) for i in range(len(expected))]
    for index, want in enumerate(expected):
        array = root[str(index)]
        got = array[...]
        assert got.dtype.newbyteorder("=") == want.dtype.newbyteorder("="), name
        np.testing.assert_array_equal(got, want, err_msg=f"{name} page {index}")
    dims = root["0"].metadata.dimension_names
    if "planar" in name:
        assert dims == ("band", "y", "x")
    elif "rgb" in name:
        assert dims == ("y", "x", "band")
    else:
        assert dims == ("y", "x")


# --------------------------------------------------------------------------
# GDAL (rasterio): a GeoTIFF with nodata, a COG with overviews
# --------------------------------------------------------------------------

UTM = dict(crs=CRS.from_epsg(32633), transform=from_origin(500000.0, 4000000.0, 10.0, 10.0))


def test_a_geotiff_opens_in_xarray_masked_with_its_crs_and_transform(server, source_dir, store_name):
    path = source_dir / "dem.tif"
    values = (RNG.random((100, 120), dtype="float32") * 1000).astype("float32")
    values[10:20, 30:50] = -9999.0
    with rasterio.open(path, "w", driver="GTiff", width=120, height=100, count=1, dtype="float32",
                       nodata=-9999.0, tiled=True, blockxsize=32, blockysize=32, compress="deflate",
                       predictor=3, **UTM) as dst:
        dst.write(values, 1)
    with rasterio.open(path) as src:
        expected, crs, transform = src.read(1), src.crs, src.transform

    summary = register(server, store_name, path)
    assert plugins_warned(summary) == {"numcodecs.imagecodecs_floatpred"}, summary
    array = zarr.open_group(f"{server.url}/{store_name}", mode="r")["0"]
    np.testing.assert_array_equal(array[...], expected)
    assert array.attrs["ProjectedCSTypeGeoKey"] == 32633
    assert Affine(*array.attrs["transform"]) == transform

    ds = xr.open_zarr(f"{server.url}/{store_name}")
    assert ds["0"].dims == ("y", "x")
    masked = ds["0"].values
    np.testing.assert_array_equal(np.isnan(masked), expected == -9999.0)
    np.testing.assert_array_equal(masked[~np.isnan(masked)], expected[expected != -9999.0])
    assert ds["0"].encoding["_FillValue"] == -9999.0
    # what rioxarray reads: the grid mapping named by the variable, its CRS and GeoTransform
    assert ds["0"].encoding.get("grid_mapping", ds["0"].attrs.get("grid_mapping")) == "spatial_ref"
    spatial_ref = ds.coords["spatial_ref"]
    assert CRS.from_user_input(spatial_ref.attrs["spatial_ref"]) == crs
    assert Affine.from_gdal(*map(float, spatial_ref.attrs["GeoTransform"].split())) == transform
    # x and y: the pixel centres rasterio (and rioxarray's open_rasterio) give
    with rasterio.open(path) as src:
        xs, _ = src.xy(np.zeros(120, dtype=int), np.arange(120))
        _, ys = src.xy(np.arange(100), np.zeros(100, dtype=int))
    np.testing.assert_allclose(ds["x"].values, xs)
    np.testing.assert_allclose(ds["y"].values, ys)
    assert float(ds["0"].sel(x=500105.0, y=3999895.0, method="nearest")) == expected[10, 10]


def test_a_cog_is_a_multiscales_group_whose_levels_read_as_gdal_reads_its_overviews(server, source_dir,
                                                                                    store_name):
    path = source_dir / "cog.tif"
    values = (np.arange(512 * 512, dtype="uint32").reshape(512, 512) % 5000).astype("uint16")
    with rasterio.open(path, "w", driver="COG", width=512, height=512, count=1, dtype="uint16",
                       blocksize=128, compress="deflate", overview_resampling="average", nodata=0,
                       **UTM) as dst:
        dst.write(values, 1)
    with rasterio.open(path) as src:
        levels = [src.read(1)]
        factors = src.overviews(1)
        transform = src.transform
    assert factors == [2, 4], factors
    for level in range(len(factors)):
        with rasterio.open(path, overview_level=level) as src:
            levels.append(src.read(1))

    summary = register(server, store_name, path)
    assert summary["warnings"] == [], summary
    root = zarr.open_group(f"{server.url}/{store_name}", mode="r")
    assert sorted(root.group_keys()) == ["0", "1", "2"]
    layout = root.attrs["multiscales"]["layout"]
    assert [entry["asset"] for entry in layout] == ["0", "1", "2"]
    assert layout[2]["transform"]["scale"] == [4.0, 4.0]
    for level, want in enumerate(levels):
        np.testing.assert_array_equal(root[f"{level}/0"][...], want, err_msg=f"level {level}")
        got = Affine(*root[f"{level}/0"].attrs["transform"])
        assert got == transform * Affine.scale(2 ** level), level

    tree = xr.open_datatree(f"{server.url}/{store_name}", engine="zarr")
    assert tree["1"].dataset["0"].shape == (256, 256)
    assert tree["2"].dataset["x"].values[0] == transform.c + 4 * transform.a / 2
    assert CRS.from_user_input(tree["2"].dataset.coords["spatial_ref"].attrs["spatial_ref"]) == UTM["crs"]


def test_a_cog_is_registered_from_its_header_alone(server, source_dir, store_name):
    path = source_dir / "big-cog.tif"
    values = RNG.integers(0, 65535, (2048, 2048), dtype="uint16")
    with rasterio.open(path, "w", driver="COG", width=2048, height=2048, count=1, dtype="uint16",
                       blocksize=256, compress="deflate", **UTM) as dst:
        dst.write(values, 1)
    size = path.stat().st_size
    assert size > 4 << 20, size
    summary = put_files(server, store_name, [path.as_uri()], parser="tiff")
    (record,) = summary["files"]["files"]
    # one first read (files.first_read_bytes, 1 MiB) holds every IFD and tile index of a COG
    # (with parser "auto", a GET looking for a DMR++ sidecar comes first)
    assert (record["requests"], record["bytes_read"]) == (1, 1 << 20), record
    root = zarr.open_group(f"{server.url}/{store_name}", mode="r")
    np.testing.assert_array_equal(root["0/0"][1000:1300, 200:700], values[1000:1300, 200:700])


# --------------------------------------------------------------------------
# corrupt files: a 422 naming the file, nothing stored
# --------------------------------------------------------------------------

def test_corrupt_tiffs_are_refused_naming_the_file(server, source_dir, store_name):
    good = source_dir / "good.tif"
    tifffile.imwrite(good, U16, tile=(64, 64), compression="zlib", metadata=None)
    data = good.read_bytes()
    (first_ifd,) = struct.unpack("<I", data[4:8])
    (entries,) = struct.unpack("<H", data[first_ifd:first_ifd + 2])
    next_at = first_ifd + 2 + 12 * entries
    looping = bytearray(data)
    looping[next_at:next_at + 4] = struct.pack("<I", first_ifd)
    past_end = bytearray(data)
    past_end[4:8] = struct.pack("<I", len(data) + 100)
    cases = {"cut.tif": data[: len(data) // 2] if first_ifd < len(data) // 2 else data[:first_ifd + 20],
             "loop.tif": bytes(looping), "past-end.tif": bytes(past_end), "header.tif": data[:6]}
    for name, bad in cases.items():
        path = source_dir / name
        path.write_bytes(bad)
        answer = put_files(server, f"{store_name}-{name[:-4]}", [path.as_uri()], parser="tiff", status=422)
        assert path.as_uri() in answer["detail"], answer
        assert requests.get(f"{server.url}/api/v1/stores/{store_name}-{name[:-4]}",
                            timeout=TIMEOUT).status_code == 404, name
    assert "loops" in put_files(server, f"{store_name}-again", [(source_dir / "loop.tif").as_uri()],
                                status=422)["detail"]
