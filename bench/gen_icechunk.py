#!/usr/bin/env python3
"""The references of bench/icechunk_registration.py, twice: SIDE x SIDE virtual references in an
Icechunk repository (format 2, written by icechunk 2.x: run in the venv of
scripts/python-env-icechunk.sh 2) and the same references as a native manifest (the baseline).

One float32 array of SIDE x SIDE chunks of 16 x 16 values; chunk (i, j) is 1024 bytes at offset
(i * SIDE + j) * 1024 of one sparse source file, as VirtualiZarr would reference an
uncompressed netCDF variable.

  "$(scripts/python-env-icechunk.sh 2 | tail -n1)/bin/python" bench/gen_icechunk.py --out DIR --side 1000
"""

import argparse
import json
import os

import icechunk as ic
import zarr

CHUNK = 16
CHUNK_BYTES = CHUNK * CHUNK * 4


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--side", type=int, default=1000)
    args = parser.parse_args()
    out, side = os.path.abspath(args.out), args.side
    os.makedirs(out, exist_ok=True)
    source = os.path.join(out, "source.bin")
    with open(source, "wb") as f:
        f.truncate(side * side * CHUNK_BYTES)
    location = f"file://{source}"

    shape = [side * CHUNK, side * CHUNK]
    metadata = {
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [CHUNK, CHUNK]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {}, "dimension_names": ["y", "x"],
    }
    # The native manifest: the same references, written as the document streams.
    with open(os.path.join(out, "native.json"), "w") as f:
        f.write('{"nodes": {"": {"zarr_format": 3, "node_type": "group", "attributes": {}}, "a": ')
        f.write(json.dumps(metadata)[:-1] + ', "manifest": {')
        first = True
        for i in range(side):
            for j in range(side):
                sep = "" if first else ","
                first = False
                f.write(f'{sep}"{i}.{j}": {{"path": "{location}", "offset": {(i * side + j) * CHUNK_BYTES}, '
                        f'"length": {CHUNK_BYTES}}}')
        f.write("}}}}")

    config = ic.RepositoryConfig.default()
    config.set_virtual_chunk_container(ic.VirtualChunkContainer(f"file://{out}/", ic.local_filesystem_store(out)))
    repo = ic.Repository.create(ic.local_filesystem_storage(os.path.join(out, "repo")), config=config,
                                authorize_virtual_chunk_access=ic.containers_credentials({f"file://{out}/": None}))
    session = repo.writable_session("main")
    root = zarr.open_group(session.store, mode="w", zarr_format=3)
    root.create_array("a", shape=shape, chunks=(CHUNK, CHUNK), dtype="float32", fill_value=0.0,
                      compressors=None, filters=None, dimension_names=["y", "x"])
    for i in range(side):
        specs = [ic.VirtualChunkSpec(index=[i, j], location=location, offset=(i * side + j) * CHUNK_BYTES,
                                     length=CHUNK_BYTES) for j in range(side)]
        failed = session.store.set_virtual_refs("a", specs, validate_containers=False)
        assert not failed, failed[:5]
    session.commit("references")


if __name__ == "__main__":
    main()
