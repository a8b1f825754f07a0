"""Reads a store's Zarr v2 view with zarr-python 2 and xarray, for test_reach.py.

Runs in the zarr-2 venv (scripts/python-env-zarr2.sh), which cannot hold zarr 3, so the tests
(in the main venv) run it as a program and compare what it wrote with the v3 view:

    python zarr2_reader.py URL OUT_DIR GROUP [GROUP ...]     ("" is the root group)

OUT_DIR receives ``raw.npz`` (every array of the consolidated hierarchy, as zarr 2 reads it,
keyed by path), ``xarray.npz`` (every variable of ``xr.open_zarr(URL, group=GROUP)``, keyed
``GROUP|NAME``) and ``meta.json`` (versions, attributes, dtypes, fill values, dimensions, the
members found with and without consolidated metadata).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import xarray as xr
import zarr


def plain(value):
    """JSON for attribute values and fill values (NaN spelled as the v2 spec does)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, np.generic):
        return plain(value.item())
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, float) and not np.isfinite(value):
        return "NaN" if np.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def members(group) -> list[str]:
    found = []
    group.visititems(lambda name, _: found.append(name))
    return sorted(found)


def main(url: str, out: Path, groups: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    meta = {"zarr": zarr.__version__, "xarray": xr.__version__, "arrays": {}, "datasets": {}}
    root = zarr.open_consolidated(url, mode="r")
    meta["root_attrs"] = plain(root.attrs.asdict())
    meta["members"] = members(root)
    # the same hierarchy found by listing the store (fsspec reads the HTML listings)
    meta["listed_members"] = members(zarr.open_group(url, mode="r"))
    raw = {}

    def visit(name, node):
        if isinstance(node, zarr.Array):
            raw[name] = node[...]
            meta["arrays"][name] = {"dtype": node.dtype.str, "fill_value": plain(node.fill_value),
                                    "attrs": plain(node.attrs.asdict())}

    root.visititems(visit)
    np.savez(out / "raw.npz", **raw)
    values = {}
    for group in groups:
        with xr.open_zarr(url, group=group or None, consolidated=True) as ds:
            ds = ds.load()
        meta["datasets"][group] = {
            "attrs": plain(ds.attrs),
            "variables": {name: {"dims": list(var.dims), "dtype": var.dtype.str, "attrs": plain(var.attrs),
                                 "encoding_fill": plain(var.encoding.get("_FillValue"))}
                          for name, var in ds.variables.items()},
        }
        for name, var in ds.variables.items():
            values[f"{group}|{name}"] = var.values
    np.savez(out / "xarray.npz", **values)
    (out / "meta.json").write_text(json.dumps(meta, indent=1, allow_nan=False))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3:])
