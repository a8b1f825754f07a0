"""Writes Icechunk repositories for test_icechunk.py, and dumps Icechunk's own reading of them.

Runs in an Icechunk writer venv (scripts/python-env-icechunk.sh 1|2: icechunk 1.x writes format
1, icechunk 2.x format 2), as a subprocess of the tests, which run in the main venv:

    python icechunk_writer.py create SPEC.json    # a repository: commit, tag v1, commit
    python icechunk_writer.py commit SPEC.json    # one more commit on main
    python icechunk_writer.py dump SPEC.json REF OUT  # JSON in OUT: Icechunk's keys and bytes

SPEC holds ``storage`` (``{"local": DIR}`` or ``{"s3": {bucket, prefix, endpoint}}``),
``netcdf`` (the netCDF4 files to reference, under ``sources``, a ``file://`` prefix) and
``raw`` (a file of bytes for the array of many virtual references). REF is ``branch:NAME``,
``tag:NAME`` or ``snapshot:ID``.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import sys
from pathlib import Path

import icechunk as ic
import numpy as np
import xarray as xr
import zarr
from obspec_utils.registry import ObjectStoreRegistry
from obstore.store import LocalStore
from virtualizarr import open_virtual_dataset
from virtualizarr.parsers import HDFParser
from zarr.core.buffer import default_buffer_prototype

# More virtual references than Icechunk 2 keeps uncompressed: their locations go in a
# per-manifest dictionary.
MANY = 1200


def storage(spec: dict) -> ic.Storage:
    if "local" in spec["storage"]:
        return ic.local_filesystem_storage(spec["storage"]["local"])
    s3 = spec["storage"]["s3"]
    return ic.s3_storage(bucket=s3["bucket"], prefix=s3["prefix"], endpoint_url=s3["endpoint"],
                         region="us-east-1", allow_http=True, access_key_id="test",
                         secret_access_key="test", force_path_style=True)


def open_repo(spec: dict, create: bool = False) -> ic.Repository:
    sources = spec["sources"]  # file:///dir/
    config = ic.RepositoryConfig.default()
    config.set_virtual_chunk_container(
        ic.VirtualChunkContainer(sources, ic.local_filesystem_store(sources.removeprefix("file://"))))
    credentials = ic.containers_credentials({sources: None})
    if create:
        return ic.Repository.create(storage(spec), config=config,
                                    authorize_virtual_chunk_access=credentials)
    return ic.Repository.open(storage(spec), config=config,
                              authorize_virtual_chunk_access=credentials)


def create(spec: dict) -> None:
    repo = open_repo(spec, create=True)
    registry = ObjectStoreRegistry({"file://": LocalStore()})
    session = repo.writable_session("main")
    store = session.store
    # Virtual references to real netCDF4 files, through VirtualiZarr, in nested groups.
    for i, path in enumerate(spec["netcdf"]):
        vds = open_virtual_dataset(Path(path).as_uri(), registry=registry, parser=HDFParser())
        vds.vz.to_icechunk(store, group=f"virtual/file{i}")
    # Native chunks written by xarray: small ones inlined by Icechunk, big ones as objects, and
    # one array left partly unwritten (missing chunks).
    native = xr.Dataset(
        {
            "small": (("x",), np.arange(40, dtype="int16")),
            "big": (("y", "x"), np.arange(400 * 40, dtype="float64").reshape(400, 40)),
        },
        attrs={"title": "native chunks"},
    )
    native.to_zarr(store, group="native/deep", zarr_format=3, consolidated=False, mode="w",
                   encoding={"small": {"chunks": (10,)}, "big": {"chunks": (100, 20)}})
    root = zarr.open_group(store, mode="a", zarr_format=3)
    sparse = root.create_array("native/sparse", shape=(8, 8), chunks=(4, 4), dtype="int32",
                               fill_value=-1, dimension_names=["a", "b"], attributes={"units": "K"})
    sparse[:4, :4] = 7
    # Many virtual references, one per byte of a raw file (format 2 compresses their locations).
    many = root.create_array("many", shape=(MANY,), chunks=(1,), dtype="uint8", fill_value=0,
                             compressors=None, filters=None)
    del many
    raw = Path(spec["raw"]).as_uri()
    for i in range(MANY):
        store.set_virtual_ref(f"many/c/{i}", raw, offset=i, length=1)
    first = session.commit("first")
    repo.create_tag("v1", snapshot_id=first)
    commit(spec, message="second", repo=repo)


def commit(spec: dict, message: str = "more", repo: ic.Repository | None = None) -> None:
    """A commit on main that changes values and adds an array."""
    repo = repo or open_repo(spec)
    session = repo.writable_session("main")
    root = zarr.open_group(session.store, mode="a", zarr_format=3)
    sparse = root["native/sparse"]
    sparse[4:, 4:] = int(np.asarray(sparse[0, 0])) + 1
    name = f"added/{message}"
    root.create_array(name, data=np.arange(6, dtype="float32").reshape(2, 3), chunks=(1, 3))
    session.commit(message)


def readonly(repo: ic.Repository, ref: str) -> ic.Session:
    kind, name = ref.split(":", 1)
    if kind == "branch":
        return repo.readonly_session(branch=name)
    if kind == "tag":
        return repo.readonly_session(tag=name)
    return repo.readonly_session(snapshot_id=name)


async def dump_store(store) -> dict:
    """Every key Icechunk lists with its bytes, and every chunk key of every array that it
    has no chunk for."""
    proto = default_buffer_prototype()
    keys = sorted([k async for k in store.list()])
    found = {}
    for key in keys:
        buf = await store.get(key, prototype=proto)
        found[key] = base64.b64encode(buf.to_bytes()).decode()
    missing = []
    for key in keys:
        if not key.endswith("zarr.json"):
            continue
        meta = json.loads(base64.b64decode(found[key]))
        if meta.get("node_type") != "array":
            continue
        prefix = key[: -len("zarr.json")]
        grid = meta["chunk_grid"]["configuration"]["chunk_shape"]
        counts = [-(-n // c) for n, c in zip(meta["shape"], grid)]
        sep = meta.get("chunk_key_encoding", {}).get("configuration", {}).get("separator", "/")
        for idx in itertools.product(*[range(n) for n in counts]):
            chunk = prefix + "c" + ("" if not idx else sep + sep.join(map(str, idx)))
            if not idx:
                chunk = prefix + "c"
            if chunk not in found:
                missing.append(chunk)
    return {"keys": found, "missing": missing}


def dump(spec: dict, ref: str, out_path: str) -> None:
    repo = open_repo(spec)
    session = readonly(repo, ref)
    out = asyncio.run(dump_store(session.store))
    out["snapshot_id"] = session.snapshot_id
    Path(out_path).write_text(json.dumps(out))


def main() -> None:
    command, spec_path = sys.argv[1], sys.argv[2]
    spec = json.loads(Path(spec_path).read_text())
    if command == "create":
        create(spec)
    elif command == "commit":
        commit(spec, message=sys.argv[3] if len(sys.argv) > 3 else "more")
    elif command == "dump":
        dump(spec, sys.argv[3], sys.argv[4])
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main()
    # Icechunk's runtime threads sometimes crash the interpreter's teardown (SIGSEGV or SIGABRT
    # after everything was written): leave without it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
