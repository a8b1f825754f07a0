"""obstore lists a store of 20,000 arrays through PROPFIND: ``list`` (``Depth: infinity``, which
the server streams a piece at a time instead of building 28 MB per request) finds every key, and
``list_with_delimiter`` (``Depth: 1``) every array as a prefix. Both are timed."""

from __future__ import annotations

import json
import time

import obstore
import requests
from obstore.store import HTTPStore

ARRAYS = 20_000


def _wide_store(n: int) -> dict:
    node = {
        "zarr_format": 3, "node_type": "array", "shape": [1000, 100], "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [100, 100]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "dimension_names": ["y", "x"], "attributes": {"units": "K"},
    }
    return {"nodes": {"": {"zarr_format": 3, "node_type": "group"}, **{f"a{i:05}": node for i in range(n)}}}


def test_obstore_lists_a_store_of_20000_arrays(server, store_name):
    resp = requests.put(f"{server.url}/api/v1/stores/{store_name}", data=json.dumps(_wide_store(ARRAYS)),
                        headers={"Content-Type": "application/json"}, timeout=300)
    assert resp.status_code == 201, resp.text[:2000]
    store = HTTPStore.from_url(f"{server.url}/{store_name}", client_options={"allow_http": True})

    started = time.monotonic()
    listed = [meta["path"].removeprefix(f"{store_name}/") for meta in obstore.list(store).collect()]
    recursive = time.monotonic() - started
    documents = {key for key in listed if key.endswith("zarr.json")}
    assert documents == {"zarr.json"} | {f"a{i:05}/zarr.json" for i in range(ARRAYS)}
    assert len(listed) == len(set(listed)), "no key listed twice"

    started = time.monotonic()
    one = obstore.list_with_delimiter(store)
    shallow = time.monotonic() - started
    prefixes = set(one["common_prefixes"]) - {store_name}
    assert prefixes == {f"{store_name}/a{i:05}" for i in range(ARRAYS)}
    sizes = {o["path"].removeprefix(f"{store_name}/"): o["size"] for o in one["objects"]}
    assert sizes["zarr.json"] == len(obstore.get(store, "zarr.json").bytes())
    print(f"obstore on {ARRAYS} arrays: list {len(listed)} keys in {recursive:.2f} s, "
          f"list_with_delimiter {len(prefixes)} prefixes in {shallow:.2f} s")
