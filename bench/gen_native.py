#!/usr/bin/env python3
"""Synthetic native manifests of any size, pointing into real local files, for the bench/ scripts.

Everything is written under --out (default $ZARRGATE_BENCH_DIR or /tmp/zarrgate-bench), and a
file already there with the same parameters is kept (the generator is deterministic: --seed):

  data/src-00.bin ..     the source files: --files files of random bytes, --data-bytes in all
                         (default 8 x 128 MiB). Every reference below points inside them.
  native-<N>.json        a native manifest of N virtual references (N = 1e4, 1e5, 1e6, 1e7...):
                         array `var` (uint8, chunks of 1 x 128 x 128, codecs bytes + zstd) on a
                         T x 100 x 100 chunk grid (T = N / 10,000; a 2-D 100 x 100 x ... grid
                         with --ndim 2), plus coordinate arrays `time`, `y`, `x` with one inline
                         chunk each, as VirtualiZarr writes them. Written as it is generated
                         (streamed): memory stays flat whatever N.
                         Chunk lengths vary in [chunk/2, chunk] as compressed chunks do; the
                         chunks of one time step lie one after the other in one file (file
                         t mod --files), wrapping around at its end, like the netCDF files a
                         real manifest points into. The bytes are random: they are served, never
                         decoded (they are not valid zstd frames). --inline-fraction puts that
                         fraction of the chunks inline (64 random bytes each) instead.
  native-<N>.meta.json   what the benchmarks need to pick chunk keys: array, chunk grid, counts.
  inline1k.json          store `inline1k`: array `data` (uint8, 100 x 100 chunks of 32 x 32, codec
                         bytes), every chunk 1 KiB of inline bytes: the warm small-response test.
  inline1k/data/c/I/J    the same chunks as static files, at the same URL paths, for nginx.
  big1m.json             store `big1m`: array `data` (uint8, 1,024 chunks of 1 MiB, codec bytes),
                         chunk i = MiB i of the source files in order: the 1 MiB throughput test
                         (nginx serves the same byte ranges of data/src-*.bin with Range headers).

Usage (Python 3.11, standard library only):
  python3 bench/gen_native.py --sizes 1e4,1e5,1e6,1e7 --extras
"""

import argparse
import base64
import json
import os
import random
import sys
import time

MIB = 1 << 20
SIDE = 100  # chunks along y and x (3-D) or along the last dimension (2-D)


def label(n):
    """1e4 for 10000, 2.5e6 for 2500000: the name of a store size."""
    exp = len(str(n)) - 1
    mant = n / 10**exp
    return f"{mant:g}e{exp}"


def parse_size(text):
    return int(float(text))


def ensure_data(out, files, data_bytes, seed):
    """Random source files, written once."""
    folder = os.path.join(out, "data")
    os.makedirs(folder, exist_ok=True)
    size = data_bytes // files
    paths = []
    rng = random.Random(seed)
    for i in range(files):
        path = os.path.join(folder, f"src-{i:02d}.bin")
        paths.append(path)
        if os.path.exists(path) and os.path.getsize(path) == size:
            continue
        started = time.perf_counter()
        with open(path + ".tmp", "wb") as f:
            left = size
            while left:
                n = min(left, 16 * MIB)
                f.write(rng.randbytes(n))
                left -= n
        os.replace(path + ".tmp", path)
        print(f"{path}: {size:,} random bytes in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return paths, size


def write_if_changed(path, params):
    """True when `path` must be (re)written: absent, or written with other parameters."""
    stamp = path + ".params"
    text = json.dumps(params, sort_keys=True)
    if os.path.exists(path) and os.path.exists(stamp) and open(stamp).read() == text:
        return False
    return True


def stamp(path, params):
    with open(path + ".params", "w") as f:
        f.write(json.dumps(params, sort_keys=True))


def b64(data):
    return base64.b64encode(data).decode()


def native(out, n, paths, file_size, args):
    """native-<N>.json, streamed."""
    name = f"native-{label(n)}"
    path = os.path.join(out, name + ".json")
    params = {"n": n, "files": paths, "file_size": file_size, "ndim": args.ndim, "chunk": args.chunk_side,
              "inline": args.inline_fraction, "seed": args.seed, "v": 2}
    if not write_if_changed(path, params):
        return path
    side = args.chunk_side
    chunk_bytes = side * side
    if args.ndim == 3:
        per_step = SIDE * SIDE
        steps = -(-n // per_step)
        grid = [steps, SIDE, SIDE]
        chunk_shape = [1, side, side]
        dims = ["time", "y", "x"]
    else:
        per_step = SIDE
        steps = -(-n // per_step)
        grid = [steps, SIDE]
        chunk_shape = [1, side * side]
        dims = ["time", "x"]
    shape = [g * c for g, c in zip(grid, chunk_shape)]
    rng = random.Random(args.seed * 1_000_003 + n)
    started = time.perf_counter()
    max_len = chunk_bytes
    usable = file_size - max_len
    half = chunk_bytes // 2
    span = chunk_bytes - half + 1

    def array(shape, chunks, dtype, codecs, dim_names, fill):
        return {
            "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": fill, "codecs": codecs, "dimension_names": dim_names, "attributes": {},
        }

    raw = [{"name": "bytes", "configuration": {"endian": "little"}}]
    with open(path + ".tmp", "w", buffering=8 * MIB) as f:
        f.write('{"nodes": {\n')
        root = {"zarr_format": 3, "node_type": "group",
                "attributes": {"title": f"zarrgate benchmark store, {n:,} references"}}
        f.write(f'"": {json.dumps(root)},\n')
        # Coordinates: one inline chunk each.
        coords = {"time": (steps, bytes(rng.randbytes(8 * steps)))}
        for d, extent in zip(dims[1:], shape[1:]):
            coords[d] = (extent, rng.randbytes(8 * extent))
        for d, (extent, data) in coords.items():
            meta = array([extent], [extent], "float64", raw, [d], "NaN")
            meta["manifest"] = {"0": {"data": b64(data)}}
            f.write(f'{json.dumps(d)}: {json.dumps(meta)},\n')
        meta = array(shape, chunk_shape, "uint8",
                     raw + [{"name": "zstd", "configuration": {"level": 3, "checksum": False}}], dims, 0)
        head = json.dumps(meta)[:-1]
        f.write(f'"var": {head}, "manifest": {{\n')
        urls = [json.dumps(p) for p in paths]
        done = 0
        inline = args.inline_fraction
        for t in range(steps):
            source = urls[t % len(urls)]
            offset = int(rng.random() * usable)
            parts = []
            count = min(per_step, n - done)
            for i in range(count):
                if args.ndim == 3:
                    key = f"{t}.{i // SIDE}.{i % SIDE}"
                else:
                    key = f"{t}.{i}"
                if inline and rng.random() < inline:
                    parts.append(f'"{key}":{{"data":"{b64(rng.randbytes(64))}"}}')
                    continue
                length = half + int(rng.random() * span)
                if offset + length > file_size:
                    offset = 0
                parts.append(f'"{key}":{{"path":{source},"offset":{offset},"length":{length}}}')
                offset += length
            done += count
            f.write(",\n".join(parts))
            f.write(",\n" if done < n else "\n")
        f.write("}}}}\n")
    os.replace(path + ".tmp", path)
    stamp(path, params)
    with open(os.path.join(out, name + ".meta.json"), "w") as f:
        json.dump({"store_file": path, "array": "var", "grid": grid, "chunk_shape": chunk_shape, "refs": n,
                   "inline_fraction": inline, "separator": "/"}, f)
    print(f"{path}: {n:,} references, grid {grid}, {os.path.getsize(path):,} bytes "
          f"in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return path


def per_file(out, n, seed):
    """files-<N>.json: array `var` of N chunks, each the one chunk of its own daily file (a
    contiguous netCDF3/HDF5 time series), every file with a declared S3-style MD5 ETag. The files
    do not exist: the footprint benchmark loads blocks with HEAD, which never reads a source, and
    registers with ?verify=false so that the declared ETags are the ones recorded."""
    name = f"files-{label(n)}"
    path = os.path.join(out, name + ".json")
    params = {"n": n, "seed": seed, "v": 1}
    if not write_if_changed(path, params):
        return path
    rng = random.Random(seed * 7_000_003 + n)
    daily = os.path.join(out, "data", "daily")
    side = 128
    started = time.perf_counter()
    urls = [f"{daily}/era5_2t_{i:07d}.nc" for i in range(n)]
    meta = {"zarr_format": 3, "node_type": "array", "shape": [n, side, side], "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, side, side]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0, "codecs": [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 3, "checksum": False}}],
            "dimension_names": ["time", "y", "x"], "attributes": {}}
    with open(path + ".tmp", "w", buffering=8 * MIB) as f:
        f.write('{"nodes": {"": {"zarr_format": 3, "node_type": "group"},\n')
        f.write(f'"var": {json.dumps(meta)[:-1]}, "manifest": {{\n')
        f.write(",\n".join(f'"{i}.0.0":{{"path":"{u}","offset":4096,"length":{8192 + rng.randrange(8192)}}}'
                             for i, u in enumerate(urls)))
        f.write('}}},\n"sources": {\n')
        f.write(",\n".join(f'"{u}":{{"etag":"\\"{rng.getrandbits(128):032x}\\""}}' for u in urls))
        f.write("}}\n")
    os.replace(path + ".tmp", path)
    stamp(path, params)
    with open(os.path.join(out, name + ".meta.json"), "w") as f:
        json.dump({"store_file": path, "array": "var", "grid": [n, 1, 1], "chunk_shape": [1, side, side], "refs": n,
                   "inline_fraction": 0.0, "separator": "/", "one_file_per_chunk": True}, f)
    print(f"{path}: {n:,} references to as many files, {os.path.getsize(path):,} bytes "
          f"in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return path


def inline1k(out, seed):
    """inline1k.json and its static mirror inline1k/data/c/I/J."""
    path = os.path.join(out, "inline1k.json")
    params = {"seed": seed, "v": 1}
    if not write_if_changed(path, params):
        return path
    rng = random.Random(seed + 1)
    meta = {
        "zarr_format": 3, "node_type": "array", "shape": [SIDE * 32, SIDE * 32], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [32, 32]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": [{"name": "bytes"}], "dimension_names": ["y", "x"], "attributes": {},
    }
    manifest = {}
    for i in range(SIDE):
        folder = os.path.join(out, "inline1k", "data", "c", str(i))
        os.makedirs(folder, exist_ok=True)
        for j in range(SIDE):
            data = rng.randbytes(1024)
            manifest[f"{i}.{j}"] = {"data": b64(data)}
            with open(os.path.join(folder, str(j)), "wb") as f:
                f.write(data)
    meta["manifest"] = manifest
    doc = {"nodes": {"": {"zarr_format": 3, "node_type": "group", "attributes": {"title": "1 KiB inline chunks"}},
                     "data": meta}}
    with open(path, "w") as f:
        json.dump(doc, f)
    stamp(path, params)
    print(f"{path}: {SIDE * SIDE:,} inline chunks of 1 KiB", file=sys.stderr)
    return path


def big1m(out, paths, file_size):
    """big1m.json: chunk i is MiB i of the source files in order."""
    path = os.path.join(out, "big1m.json")
    per_file = file_size // MIB
    n = per_file * len(paths)
    params = {"files": paths, "file_size": file_size, "v": 1}
    if not write_if_changed(path, params):
        return path
    meta = {
        "zarr_format": 3, "node_type": "array", "shape": [n * MIB], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [MIB]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": [{"name": "bytes"}], "dimension_names": ["i"], "attributes": {},
        "manifest": {str(i): {"path": paths[i // per_file], "offset": (i % per_file) * MIB, "length": MIB}
                     for i in range(n)},
    }
    doc = {"nodes": {"": {"zarr_format": 3, "node_type": "group", "attributes": {"title": "1 MiB virtual chunks"}},
                     "data": meta}}
    with open(path, "w") as f:
        json.dump(doc, f)
    stamp(path, params)
    with open(os.path.join(out, "big1m.meta.json"), "w") as f:
        json.dump({"chunks": n, "per_file": per_file, "files": [os.path.basename(p) for p in paths]}, f)
    print(f"{path}: {n:,} virtual chunks of 1 MiB", file=sys.stderr)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("ZARRGATE_BENCH_DIR", "/tmp/zarrgate-bench"))
    parser.add_argument("--sizes", default="1e4,1e5,1e6,1e7", help="comma-separated reference counts ('' for none)")
    parser.add_argument("--extras", action="store_true", help="also inline1k.json and big1m.json")
    parser.add_argument("--files", type=int, default=8, help="number of source files")
    parser.add_argument("--data-bytes", type=parse_size, default=1 << 30, help="total size of the source files")
    parser.add_argument("--ndim", type=int, choices=(2, 3), default=3)
    parser.add_argument("--chunk-side", type=int, default=128,
                        help="chunks are 1 x S x S bytes (3-D) or 1 x S (2-D), stored length in [S*S/2, S*S]")
    parser.add_argument("--inline-fraction", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--per-file-sizes", default="",
                        help="comma-separated reference counts of files-<N>.json (one source file per chunk)")
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    paths, file_size = ensure_data(out, args.files, args.data_bytes, args.seed)
    for text in filter(None, args.sizes.split(",")):
        native(out, parse_size(text), paths, file_size, args)
    for text in filter(None, args.per_file_sizes.split(",")):
        per_file(out, parse_size(text), args.seed)
    if args.extras:
        inline1k(out, args.seed)
        big1m(out, paths, file_size)


if __name__ == "__main__":
    main()
