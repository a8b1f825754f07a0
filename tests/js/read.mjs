// Reads a slice of one array of a Zarr store over HTTP with zarrita, as a web page would, and
// prints what it read as one line of JSON (tests/python/test_zarrita.py compares it with the
// source file):
//
//   node read.mjs STORE_URL ARRAY v2|v3 '[[start, stop], null, ...]'
//
// `null` in the selection takes the whole dimension. NaN prints as null.
import * as zarr from "zarrita";

const [url, path, format, selection] = process.argv.slice(2);
const store = new zarr.FetchStore(url);
const location = zarr.root(store).resolve(path);
const open = format === "v2" ? zarr.open.v2 : zarr.open.v3;
const array = await open(location, { kind: "array" });
const slices = JSON.parse(selection).map((s) => (s === null ? null : zarr.slice(s[0], s[1])));
const { data, shape } = await zarr.get(array, slices);
console.log(
  JSON.stringify({
    dtype: array.dtype,
    array_shape: array.shape,
    chunks: array.chunks,
    fill_value: typeof array.fillValue === "bigint" ? Number(array.fillValue) : array.fillValue,
    shape,
    data: Array.from(data, Number),
  }),
);
