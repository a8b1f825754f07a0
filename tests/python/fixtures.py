"""Small, real archival files for the Python client tests.

Each ``make_*`` function writes one file (or a few) into ``directory`` with the
real library a data producer would use (netCDF4, h5py, scipy) and returns its
path (or a list of paths). The files are tiny but exercise what matters to a
virtual Zarr store: compression and shuffle, several chunks per dimension,
fill values and CF attributes, packed integers, contiguous storage,
unallocated HDF5 chunks, netCDF3 record variables (interleaved on disk),
multi-file time series, big-endian data and nested groups.

Values are deterministic, so a test can compare a served store with
``xr.open_dataset`` of the same file.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import netCDF4
import numpy as np
from scipy.io import netcdf_file

__all__ = [
    "make_netcdf4_air",
    "make_netcdf4_packed",
    "make_hdf5_contiguous",
    "make_hdf5_sparse",
    "make_netcdf4_masks",
    "make_netcdf3_record",
    "make_netcdf4_series",
    "make_netcdf4_bigendian",
    "make_netcdf4_groups",
    "make_netcdf4_chars",
    "ALL_FIXTURES",
]

NT, NY, NX = 4, 5, 6
FILL_F32 = np.float32(-9999.0)


def _air_values(nt: int = NT, t0: int = 0) -> np.ndarray:
    t = np.arange(t0, t0 + nt, dtype=np.float32)[:, None, None]
    y = np.arange(NY, dtype=np.float32)[None, :, None]
    x = np.arange(NX, dtype=np.float32)[None, None, :]
    return (270.0 + t + 0.5 * y + 0.25 * x).astype(np.float32)


def _add_lat_lon(nc: netCDF4.Dataset) -> None:
    nc.createDimension("lat", NY)
    nc.createDimension("lon", NX)
    lat = nc.createVariable("lat", "f4", ("lat",))
    lat[:] = np.linspace(40.0, 50.0, NY, dtype=np.float32)
    lat.units, lat.standard_name = "degrees_north", "latitude"
    lon = nc.createVariable("lon", "f4", ("lon",))
    lon[:] = np.linspace(-10.0, 15.0, NX, dtype=np.float32)
    lon.units, lon.standard_name = "degrees_east", "longitude"


def _add_air(nc: netCDF4.Dataset, values: np.ndarray, t0: int = 0) -> None:
    nt = values.shape[0]
    nc.createDimension("time", None)
    time = nc.createVariable("time", "i4", ("time",))
    time[:] = np.arange(t0, t0 + nt, dtype=np.int32) * 6
    time.units = "hours since 2000-01-01 00:00:00"
    time.calendar = "standard"
    time.standard_name = "time"
    air = nc.createVariable(
        "air", "f4", ("time", "lat", "lon"),
        zlib=True, complevel=4, shuffle=True,
        chunksizes=(2, 3, 4), fill_value=FILL_F32,
    )
    air[:] = values
    air.units = "K"
    air.long_name = "Air temperature at 2 m"
    air.standard_name = "air_temperature"


def make_netcdf4_air(directory: str | Path) -> Path:
    """netCDF4: float32 air(time, lat, lon), zlib+shuffle, chunks (2, 3, 4).

    ``_FillValue = -9999`` with some masked cells, CF attributes, coordinate
    variables ``time`` (int32, "hours since", unlimited), ``lat``, ``lon``,
    and a 0-d grid-mapping variable ``crs`` holding 4326.
    """
    path = Path(directory) / "air.nc"
    values = np.ma.masked_array(_air_values(), mask=False)
    values.mask[0, 0, :3] = True  # some fill values inside a written chunk
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.title = "zarrgate test: air temperature"
        nc.Conventions = "CF-1.8"
        _add_lat_lon(nc)
        _add_air(nc, values)
        nc["air"].grid_mapping = "crs"
        crs = nc.createVariable("crs", "i4", ())
        crs.grid_mapping_name = "latitude_longitude"
        crs.semi_major_axis = 6378137.0
        crs.assignValue(4326)  # a written 0-d chunk (manifest key "")
    return path


def make_netcdf4_packed(directory: str | Path) -> Path:
    """netCDF4: int16 ``t2m`` packed with scale_factor/add_offset, _FillValue -32767."""
    path = Path(directory) / "packed.nc"
    scale, offset = np.float32(0.01), np.float32(273.15)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        _add_lat_lon(nc)
        nc.createDimension("time", NT)
        t2m = nc.createVariable(
            "t2m", "i2", ("time", "lat", "lon"),
            zlib=True, shuffle=True, chunksizes=(1, NY, NX), fill_value=np.int16(-32767),
        )
        t2m.scale_factor, t2m.add_offset = scale, offset
        t2m.units = "K"
        t2m.long_name = "2 metre temperature"
        t2m.set_auto_maskandscale(False)
        packed = np.round((_air_values() - offset) / scale).astype(np.int16)
        packed[1, 2, 3] = -32767
        t2m[:] = packed
    return path


def make_netcdf4_nonfinite_attributes(directory: str | Path) -> Path:
    """netCDF4: float32 ``air`` whose attributes hold NaN and infinities (``valid_max``,
    ``missing_value``, a global ``comment_max``), which strict JSON cannot carry."""
    path = Path(directory) / "nonfinite.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        _add_lat_lon(nc)
        nc.createDimension("time", NT)
        air = nc.createVariable("air", "f4", ("time", "lat", "lon"), zlib=True, chunksizes=(1, NY, NX))
        air.valid_max = np.float32(np.inf)
        air.missing_value = np.float32(np.nan)
        air.units = "K"
        nc.comment_max = -np.inf
        values = _air_values()
        values[0, 1, 1] = np.nan
        air[:] = values
    return path


def make_hdf5_contiguous(directory: str | Path) -> Path:
    """Plain HDF5 (h5py, not netCDF): contiguous float64 and int32 datasets.

    ``grid`` has dimension scales ``y``/``x``; ``counts`` has none, so
    readers name its dimensions ``phony_dim_*``.
    """
    path = Path(directory) / "contiguous.h5"
    with h5py.File(path, "w") as f:
        f.attrs["source"] = "h5py"
        y = f.create_dataset("y", data=np.arange(3, dtype="f8") * 10.0)
        x = f.create_dataset("x", data=np.arange(4, dtype="f8") * 5.0)
        y.make_scale("y")
        x.make_scale("x")
        grid = f.create_dataset("grid", data=np.arange(12, dtype="f8").reshape(3, 4) / 4)
        grid.dims[0].attach_scale(y)
        grid.dims[1].attach_scale(x)
        grid.attrs["units"] = "m"
        f.create_dataset("counts", data=np.arange(7, dtype="<i4"))
    return path


def make_hdf5_sparse(directory: str | Path) -> Path:
    """Chunked HDF5 with unallocated chunks: ``data`` (8, 8) in 4x4 chunks,
    fillvalue -1, only chunks (0, 0) and (1, 1) written."""
    path = Path(directory) / "sparse.h5"
    with h5py.File(path, "w") as f:
        y = f.create_dataset("y", data=np.arange(8, dtype="i4"))
        x = f.create_dataset("x", data=np.arange(8, dtype="i4"))
        y.make_scale("y")
        x.make_scale("x")
        d = f.create_dataset("data", shape=(8, 8), dtype="f4", chunks=(4, 4), fillvalue=-1.0)
        d[0:4, 0:4] = np.arange(16, dtype="f4").reshape(4, 4)
        d[4:8, 4:8] = 100 + np.arange(16, dtype="f4").reshape(4, 4)
        d.dims[0].attach_scale(y)
        d.dims[1].attach_scale(x)
        assert d.id.get_num_chunks() == 2
    return path


def make_netcdf3_record(directory: str | Path) -> Path:
    """netCDF3 classic (scipy): unlimited ``time`` with two record variables
    (``temp``, ``rh``, interleaved per record on disk), a fixed variable
    ``elev`` and coordinates. netCDF3 data is big-endian on disk."""
    path = Path(directory) / "record.nc"
    with netcdf_file(path, "w", version=1) as f:
        f.history = "scipy netcdf3 fixture"
        f.createDimension("time", None)
        f.createDimension("station", 3)
        time = f.createVariable("time", "i4", ("time",))
        time.units = "days since 2001-01-01"
        station = f.createVariable("station", "i4", ("station",))
        station[:] = [101, 102, 103]
        temp = f.createVariable("temp", "f4", ("time", "station"))
        temp.units = "degC"
        temp._FillValue = np.float32(-999.0)
        rh = f.createVariable("rh", "i2", ("time", "station"))
        rh.units = "%"
        elev = f.createVariable("elev", "f8", ("station",))
        elev[:] = [12.5, 300.0, 1250.25]
        elev.units = "m"
        for i in range(5):
            time[i] = i
            temp[i] = np.array([10.0, 11.5, 12.25], dtype="f4") + i
            rh[i] = np.array([50, 60, 70], dtype="i2") + i
        temp[2, 1] = -999.0
    return path


def make_netcdf4_series(directory: str | Path, n: int = 3) -> list[Path]:
    """``n`` netCDF4 files ``air_000.nc``... with 2 time steps each, same
    layout as :func:`make_netcdf4_air`, to be concatenated along ``time``."""
    paths = []
    for i in range(n):
        path = Path(directory) / f"air_{i:03d}.nc"
        with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
            nc.title = "zarrgate test: air series"
            _add_lat_lon(nc)
            _add_air(nc, _air_values(2, t0=2 * i), t0=2 * i)
        paths.append(path)
    return paths


def make_netcdf4_bigendian(directory: str | Path) -> Path:
    """netCDF4 with big-endian variables: chunked+zlib float32 ``be_f4`` and
    contiguous int32 ``be_i4``, plus a little-endian ``le_f8`` for contrast."""
    path = Path(directory) / "bigendian.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.createDimension("x", 10)
        nc.createDimension("y", 4)
        a = nc.createVariable("be_f4", ">f4", ("y", "x"), endian="big",
                              zlib=True, chunksizes=(2, 5))
        a[:] = np.arange(40, dtype="f4").reshape(4, 10) * 1.5
        a.units = "1"
        b = nc.createVariable("be_i4", ">i4", ("x",), endian="big", contiguous=True)
        b[:] = np.arange(10, dtype="i4") - 5
        c = nc.createVariable("le_f8", "<f8", ("x",), endian="little")
        c[:] = np.linspace(0, 1, 10)
    return path


def make_netcdf4_groups(directory: str | Path) -> Path:
    """netCDF4 with a nested group: root ``a(x)``, ``obs/b(x)`` and
    ``obs/deep/c(x)``, each with attributes."""
    path = Path(directory) / "groups.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.title = "groups"
        nc.createDimension("x", 6)
        a = nc.createVariable("a", "f8", ("x",), zlib=True, chunksizes=(3,))
        a[:] = np.arange(6.0)
        obs = nc.createGroup("obs")
        obs.platform = "buoy"
        b = obs.createVariable("b", "i2", ("x",))
        b[:] = np.arange(6, dtype="i2") * 2
        b.units = "count"
        deep = obs.createGroup("deep")
        c = deep.createVariable("c", "f4", ("x",), fill_value=np.float32(-1))
        c[:] = np.ma.masked_array(np.arange(6, dtype="f4"), mask=[0, 1, 0, 0, 0, 0])
    return path


def make_netcdf4_chars(directory: str | Path) -> Path:
    """netCDF4 with character data, as station and platform files carry it: a
    ``char station_name(station, strlen)`` variable (numpy ``S1``, the fixed-width
    bytes Zarr v3 calls ``null_terminated_bytes``), chunked and zlib-compressed, and
    a float ``temp(station)`` beside it."""
    path = Path(directory) / "chars.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.createDimension("station", 3)
        nc.createDimension("strlen", 8)
        names = nc.createVariable("station_name", "S1", ("station", "strlen"), zlib=True,
                                  chunksizes=(2, 8))
        names[:] = netCDF4.stringtochar(np.array(["alpha", "bravo", "charlie"], dtype="S8"))
        names.long_name = "station name"
        temp = nc.createVariable("temp", "f4", ("station",))
        temp[:] = [1.5, 2.5, 3.5]
        temp.units = "degC"
    return path


def make_netcdf4_masks(directory: str | Path, char_fill: bool = False) -> Path:
    """netCDF4 integer and character variables with and without ``_FillValue``,
    as land-cover, quality-flag and count products carry them: ``landcover``
    (int16, ``_FillValue`` -1), ``quality`` (uint8, ``_FillValue`` 200), each with
    fill values among the data (xarray masks them: float32); and ``count``
    (int32, no ``_FillValue``: netCDF stores its default fill -2147483647 as the
    HDF5 fill value, and values equal to it, and 0, stay numbers). With
    ``char_fill``, also ``flag`` (char, ``_FillValue`` " "), which VirtualiZarr
    2.5 cannot open (its ``encode_cf_fill_value`` refuses a str for ``S1``)."""
    path = Path(directory) / "masks.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.createDimension("x", 6)
        lc = nc.createVariable("landcover", "i2", ("x",), fill_value=np.int16(-1), zlib=True,
                               chunksizes=(3,))
        lc[:] = np.ma.masked_array([1, 2, 0, 4, 5, 6], mask=[0, 1, 0, 0, 1, 0])
        lc.long_name = "land cover class"
        q = nc.createVariable("quality", "u1", ("x",), fill_value=np.uint8(200), chunksizes=(3,))
        q[:] = np.ma.masked_array([0, 1, 2, 3, 4, 5], mask=[0, 0, 0, 1, 0, 0])
        count = nc.createVariable("count", "i4", ("x",), chunksizes=(3,))
        count[:] = [0, 7, -2147483647, 3, 0, 9]
        if char_fill:
            flag = nc.createVariable("flag", "S1", ("x",), fill_value=b" ")
            flag[:] = np.array([b"a", b"b", b" ", b"c", b"d", b"e"], dtype="S1")
    return path


ALL_FIXTURES = {
    "netcdf4_air": make_netcdf4_air,
    "netcdf4_packed": make_netcdf4_packed,
    "hdf5_contiguous": make_hdf5_contiguous,
    "hdf5_sparse": make_hdf5_sparse,
    "netcdf3_record": make_netcdf3_record,
    "netcdf4_series": make_netcdf4_series,
    "netcdf4_bigendian": make_netcdf4_bigendian,
    "netcdf4_groups": make_netcdf4_groups,
    "netcdf4_chars": make_netcdf4_chars,
    "netcdf4_masks": make_netcdf4_masks,
}
"""Fixture name to maker; ``netcdf4_series`` returns a list of paths."""
