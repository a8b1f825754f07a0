"""FITS files the server reads itself (``PUT ...?format=files``, parser ``fits``).

astropy writes the files: a primary float32 image; an int16 image with BSCALE,
BZERO and BLANK; a multi-extension file (a data-less primary header, two IMAGE
extensions, a binary table). Each is registered by its URL, read over HTTP by
plain ``xr.open_zarr(url)`` (no warning) and by zarr-python 3, and must hold
what astropy reads from the file: the scaled integers decode (xarray, from the
CF ``scale_factor``/``add_offset``/``_FillValue`` attributes) to astropy's
physical values with BLANK as NaN. Arrays are named as kerchunk's
``fits.process_file`` names them, and point at the bytes it points at. A
header with an absurd NAXIS is a 422 naming the file, and nothing is stored.
"""

from __future__ import annotations

import numpy as np
import pytest
import requests
import zarr
from astropy.io import fits
from kerchunk.fits import process_file

from test_files import open_plain, put_files


def astropy_data(path, key) -> np.ndarray:
    with fits.open(path) as hdul:
        return np.array(hdul[key].data)


def make_primary(directory):
    path = directory / "primary.fits"
    pixels = (np.arange(60 * 40, dtype="float32").reshape(60, 40) / 3 - 100).astype("float32")
    hdu = fits.PrimaryHDU(pixels)
    hdu.header["OBJECT"] = "M31"
    hdu.header["EXPTIME"] = (120.5, "seconds")
    hdu.header.add_comment("written by a test")
    hdu.header.add_history("step one")
    hdu.header.add_history("step two")
    hdu.writeto(path)
    return path


def make_scaled(directory):
    """int16 values with BSCALE, BZERO and BLANK: written raw, then the scaling cards set in
    place (astropy rescales data handed to it, so the raw values go in first)."""
    path = directory / "scaled.fits"
    raw = (np.arange(50 * 30, dtype="int16").reshape(50, 30) * 7 - 5000).astype("int16")
    raw[3, 4] = raw[40, 0] = -32768
    fits.PrimaryHDU(raw).writeto(path)
    with fits.open(path, mode="update", do_not_scale_image_data=True) as hdul:
        hdul[0].header["BSCALE"] = 0.25
        hdul[0].header["BZERO"] = 1000.0
        hdul[0].header["BLANK"] = -32768
    return path


def make_multi(directory):
    """A data-less primary header, a 3-d float32 cube of 14 MB (cut into chunks), a 2-d int32
    image and a binary table."""
    path = directory / "multi.fits"
    primary = fits.PrimaryHDU()
    primary.header["TELESCOP"] = "HST"
    cube = (np.arange(3 * 1200 * 1000, dtype="float32").reshape(3, 1200, 1000) / 11).astype("float32")
    counts = np.arange(20 * 8, dtype="int32").reshape(20, 8) - 80
    table = fits.BinTableHDU.from_columns([fits.Column(name="a", format="J", array=np.arange(5))], name="EVENTS")
    fits.HDUList([primary, fits.ImageHDU(cube, name="SCI"), fits.ImageHDU(counts, name="DQ"), table]).writeto(path)
    return path


def test_a_primary_image_reads_as_astropy_reads_it(server, source_dir, store_name):
    path = make_primary(source_dir)
    summary = put_files(server, store_name, [path.as_uri()])
    record = summary["files"]["files"][0]
    assert record["parser"] == "fits" and summary["arrays"] == 1, summary
    assert summary["warnings"] == [], summary
    expected = astropy_data(path, 0)

    ds = open_plain(f"{server.url}/{store_name}")
    np.testing.assert_array_equal(ds["PRIMARY"].values, expected)
    assert ds["PRIMARY"].dims == ("y", "x") and ds["PRIMARY"].dtype == np.float32
    attrs = ds["PRIMARY"].attrs
    assert attrs["OBJECT"] == "M31" and attrs["EXPTIME"] == 120.5
    assert attrs["HISTORY"] == "step one\nstep two" and "written by a test" in attrs["COMMENT"]

    array = zarr.open_group(f"{server.url}/{store_name}", mode="r")["PRIMARY"]
    np.testing.assert_array_equal(array[...], expected)


def test_bscale_bzero_and_blank_decode_to_astropys_physical_values(server, source_dir, store_name):
    path = make_scaled(source_dir)
    expected = astropy_data(path, 0)
    assert expected.dtype == np.float32 and np.isnan(expected[3, 4]) and np.isnan(expected[40, 0])
    put_files(server, store_name, [path.as_uri()], parser="fits")

    ds = open_plain(f"{server.url}/{store_name}")
    served = ds["PRIMARY"]
    assert np.dtype(served.encoding["dtype"]).newbyteorder("=") == np.int16, served.encoding
    np.testing.assert_allclose(served.values, expected, rtol=1e-6, equal_nan=True)
    assert np.isnan(served.values).sum() == 2

    # zarr-python 3 alone reads the raw integers and the CF attributes that unpack them
    array = zarr.open_group(f"{server.url}/{store_name}", mode="r")["PRIMARY"]
    with fits.open(path, do_not_scale_image_data=True) as hdul:
        raw = np.array(hdul[0].data)
    np.testing.assert_array_equal(array[...], raw)
    assert (array.attrs["scale_factor"], array.attrs["add_offset"], array.attrs["_FillValue"]) == (0.25, 1000.0, -32768)


def test_image_extensions_are_arrays_named_as_kerchunk_names_them(server, source_dir, store_name):
    path = make_multi(source_dir)
    summary = put_files(server, store_name, [path.as_uri()])
    assert summary["arrays"] == 2, summary
    # metadata only: the first read (files.first_read_bytes) and the later headers' windows
    record = summary["files"]["files"][0]
    assert path.stat().st_size > 14e6 and record["bytes_read"] <= (1 << 20) + (256 << 10), record
    (warning,) = summary["warnings"]
    assert "EVENTS" in warning and "BINTABLE" in warning and "left out" in warning, warning

    ds = open_plain(f"{server.url}/{store_name}")
    assert set(ds.data_vars) == {"SCI", "DQ"}
    assert ds.attrs["TELESCOP"] == "HST", "the data-less primary header describes the file"
    for name in ("SCI", "DQ"):
        np.testing.assert_array_equal(ds[name].values, astropy_data(path, name), err_msg=name)
    assert ds["SCI"].dims == ("z", "y", "x") and ds["DQ"].dims == ("DQ_y", "DQ_x")

    group = zarr.open_group(f"{server.url}/{store_name}", mode="r")
    sci = group["SCI"]
    assert sci.chunks == (1, 600, 1000), "cut into contiguous chunks of a few MiB"
    np.testing.assert_array_equal(sci[...], astropy_data(path, "SCI"))
    np.testing.assert_array_equal(group["DQ"][...], astropy_data(path, "DQ"))

    # kerchunk's scanner names the same HDUs alike, and its one chunk starts where ours do
    refs = process_file(str(path), extension=[1, 2])
    for name in ("SCI", "DQ"):
        key = f"{name}/" + ".".join("0" * group[name].ndim)
        _, offset, _ = refs[key]
        chunk = "/".join("0" * group[name].ndim)
        served = requests.get(f"{server.url}/{store_name}/{name}/c/{chunk}", timeout=60).content
        with open(path, "rb") as f:
            f.seek(offset)
            assert served == f.read(len(served)), name


@pytest.mark.parametrize("naxis", ["5000", "  -1"])
def test_a_header_with_an_absurd_naxis_is_refused_naming_the_file(server, source_dir, store_name, naxis):
    good = make_primary(source_dir).read_bytes()
    card = b"NAXIS   =                    2"
    assert card in good
    bad = source_dir / "absurd.fits"
    bad.write_bytes(good.replace(card, b"NAXIS   =                 " + naxis.encode(), 1))
    answer = put_files(server, store_name, [bad.as_uri()], status=422)
    assert bad.as_uri() in answer["detail"] and "NAXIS" in answer["detail"], answer
    assert requests.get(f"{server.url}/api/v1/stores/{store_name}", timeout=30).status_code == 404


# ---------------------------------------------------------------------------
# the FITS files astropy's own test suite ships (HST raw frames, unsigned images, random groups,
# compressed images, tables of every kind)
# ---------------------------------------------------------------------------

def _astropy_suite() -> list[str]:
    from pathlib import Path

    import astropy
    return sorted(p.name for p in (Path(astropy.__file__).parent / "io/fits/tests/data").glob("*.fits"))


def expected_arrays(path) -> dict[str, np.ndarray]:
    """What astropy reads from each image HDU with data, under the name the server gives it
    (EXTNAME, else PRIMARY or the index; a repeated EXTNAME with its EXTVER)."""
    out = {}
    with fits.open(path) as hdul:
        for index, hdu in enumerate(hdul):
            if not hdu.is_image or isinstance(hdu, (fits.CompImageHDU, fits.GroupsHDU)) or not hdu.size:
                continue
            name = hdu.header.get("EXTNAME", "").strip() or ("PRIMARY" if index == 0 else str(index))
            if name in out:
                name = f"{name}_{hdu.header.get('EXTVER', index)}"
            out[name] = np.array(hdu.data)
    return out


@pytest.mark.parametrize("name", _astropy_suite())
def test_astropys_own_test_files_read_as_astropy_reads_them(server, source_dir, store_name, name):
    from pathlib import Path

    import astropy
    original = Path(astropy.__file__).parent / "io/fits/tests/data" / name
    path = source_dir / name
    path.write_bytes(original.read_bytes())
    expected = expected_arrays(path)
    summary = put_files(server, store_name, [path.as_uri()], parser="fits")
    assert summary["arrays"] == len(expected), summary
    if not expected:
        return
    ds = open_plain(f"{server.url}/{store_name}")
    assert set(ds.data_vars) == set(expected), (set(ds.data_vars), set(expected))
    for array, want in expected.items():
        got = ds[array].values
        assert got.shape == want.shape, array
        if want.dtype.kind in "iu" and got.dtype.kind == "f":
            # a BLANK without BSCALE/BZERO: astropy leaves it in the integers, xarray masks it
            with fits.open(path) as hdul:
                blank = hdul[array.split("_")[0]].header.get("BLANK")
            want = np.where(want == blank, np.nan, want.astype(got.dtype))
        np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True, err_msg=array)


def test_a_series_of_images_stacks_along_a_new_dimension(server, source_dir, store_name):
    paths = []
    for day in (1, 2, 3):
        path = source_dir / f"frame_2024010{day}.fits"
        fits.PrimaryHDU(np.full((4, 5), day, dtype="float32")).writeto(path)
        paths.append(path.as_uri())
    put_files(server, store_name, paths,
              combine={"join": "new", "dim": "time", "pattern": r"(\d{8})", "format": "%Y%m%d"})
    ds = open_plain(f"{server.url}/{store_name}")
    assert ds["PRIMARY"].dims == ("time", "y", "x")
    np.testing.assert_array_equal(ds["PRIMARY"].values[:, 2, 3], [1, 2, 3])
    assert str(ds["time"].values[1])[:10] == "2024-01-02"
