#!/usr/bin/env python3
"""The same kerchunk references as JSON and as parquet, for bench/kerchunk_registration.py.

Writes into --out:
  source.bin       the source file (sparse: registration never reads ranged references)
  refs.json        kerchunk JSON, version 1: one float32 array `data` whose SIDE x SIDE chunks of
                   2 x 2 values are consecutive 16-byte ranges of source.bin
  refs.parq/       the same references written by kerchunk's own parquet writer
                   (kerchunk.df.refs_to_dataframe, what VirtualiZarr's to_kerchunk(format="parquet") calls)
  refs.parq.tar    that directory as a tar, .zmetadata first

Run with the test venv, which has kerchunk and fastparquet:
  "$(scripts/python-env.sh | tail -1)/bin/python" bench/gen_kerchunk.py --out /tmp/zarrgate-bench-kerchunk
"""

import argparse
import json
import os
import shutil
import tarfile
import time

from kerchunk.df import refs_to_dataframe

CHUNK_BYTES = 16  # 2 x 2 float32


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--side", type=int, default=1000, help="chunk grid side: SIDE^2 references (default 1000)")
    parser.add_argument("--record-size", type=int, default=100_000, help="rows per refs.k.parq (kerchunk's default)")
    args = parser.parse_args()

    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    side = args.side
    source = os.path.join(out, "source.bin")
    with open(source, "wb") as f:
        f.truncate(side * side * CHUNK_BYTES)

    refs = {
        ".zgroup": json.dumps({"zarr_format": 2}),
        ".zattrs": json.dumps({"title": "zarrgate registration benchmark"}),
        "data/.zarray": json.dumps(
            {
                "zarr_format": 2,
                "shape": [2 * side, 2 * side],
                "chunks": [2, 2],
                "dtype": "<f4",
                "fill_value": None,
                "order": "C",
                "filters": None,
                "compressor": None,
                "dimension_separator": ".",
            }
        ),
        "data/.zattrs": json.dumps({"_ARRAY_DIMENSIONS": ["y", "x"]}),
    }
    for i in range(side):
        for j in range(side):
            refs[f"data/{i}.{j}"] = [source, (i * side + j) * CHUNK_BYTES, CHUNK_BYTES]

    started = time.perf_counter()
    with open(os.path.join(out, "refs.json"), "w") as f:
        json.dump({"version": 1, "refs": refs}, f)
    print(f"refs.json: {side * side} references in {time.perf_counter() - started:.1f} s")

    started = time.perf_counter()
    parq = os.path.join(out, "refs.parq")
    shutil.rmtree(parq, ignore_errors=True)
    refs_to_dataframe(refs, parq, record_size=args.record_size)
    print(f"refs.parq: written by kerchunk in {time.perf_counter() - started:.1f} s")

    with tarfile.open(os.path.join(out, "refs.parq.tar"), "w") as tar:
        tar.add(os.path.join(parq, ".zmetadata"), arcname="refs.parq/.zmetadata")
        for root, _, files in sorted(os.walk(parq)):
            for name in sorted(files):
                if name != ".zmetadata":
                    path = os.path.join(root, name)
                    tar.add(path, arcname=os.path.relpath(path, out))
    for name in ("refs.json", "refs.parq.tar"):
        print(f"{name}: {os.path.getsize(os.path.join(out, name)):,} bytes")


if __name__ == "__main__":
    main()
