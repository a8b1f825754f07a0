"""Reading files with VirtualiZarr and the served stores with xarray/zarr, for the tests."""

from __future__ import annotations

from pathlib import Path

import xarray as xr
from obspec_utils.registry import ObjectStoreRegistry
from obstore.store import LocalStore
from virtualizarr import open_virtual_dataset, open_virtual_datatree
from virtualizarr.parsers import HDFParser

# file:///abs/path URLs resolve against the root of the local file system
REGISTRY = ObjectStoreRegistry({"file://": LocalStore()})


def virtual_dataset(path: Path, parser=None, **kwargs) -> xr.Dataset:
    """``open_virtual_dataset`` of a local file (HDFParser unless told otherwise)."""
    return open_virtual_dataset(Path(path).as_uri(), registry=REGISTRY,
                                parser=parser or HDFParser(), **kwargs)


def virtual_datatree(path: Path, parser=None) -> xr.DataTree:
    return open_virtual_datatree(Path(path).as_uri(), registry=REGISTRY,
                                 parser=parser or HDFParser())


def open_served(url: str, **kwargs) -> xr.Dataset:
    """``xr.open_zarr`` of a served store, loaded (every chunk fetched now)."""
    with xr.open_zarr(url, zarr_format=3, **kwargs) as ds:
        return ds.load()


def open_file(path: Path, **kwargs) -> xr.Dataset:
    with xr.open_dataset(path, **{"engine": "h5netcdf", **kwargs}) as ds:
        return ds.load()


def assert_same_dataset(served: xr.Dataset, expected: xr.Dataset) -> None:
    """Same variables, values, attributes and dimensions (``assert_identical``),
    and the same dtypes up to byte order: Zarr hands out native-order arrays
    whatever the stored endianness, which no user computation can tell apart."""
    xr.testing.assert_identical(served, expected)
    for name, var in expected.variables.items():
        want, got = var.dtype, served[name].dtype
        assert got.newbyteorder("=") == want.newbyteorder("="), f"{name}: {got} != {want}"

