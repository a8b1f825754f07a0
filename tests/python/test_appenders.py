"""Concurrent appenders through the Python client: ``zarrgate_client.patch`` with a function
reads the store, makes the append from that version and sends it with ``If-Match``, starting
again on 412; every append lands, where PATCHes made from the same version replaced each
other's chunk."""

from __future__ import annotations

import base64
import struct
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

import zarrgate_client
from conftest import register


def _array(shape: int, manifest: dict) -> dict:
    return {"zarr_format": 3, "node_type": "array", "shape": [shape], "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "manifest": manifest}


def _inline(value: float) -> dict:
    return {"data": base64.b64encode(struct.pack("<f", value)).decode()}


def test_concurrent_appends_through_the_client_all_land(server, store_name):
    register(server, store_name, {"nodes": {"t": _array(1, {"0": _inline(0.0)})}})

    def append(value: float) -> None:
        def update(version: int) -> dict:
            meta = requests.get(f"{server.url}/{store_name}@{version}/t/zarr.json", timeout=30).json()
            n = meta["shape"][0]
            return {"nodes": {"t": {"shape": [n + 1], "manifest": {str(n): _inline(value)}}}}
        zarrgate_client.patch(server.url, store_name, update)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(append, [float(v) for v in range(1, 25)]))
    meta = requests.get(f"{server.url}/{store_name}/t/zarr.json", timeout=30).json()
    assert meta["shape"] == [25]
    values = sorted(struct.unpack("<f", requests.get(f"{server.url}/{store_name}/t/c/{k}", timeout=30).content)[0]
                    for k in range(25))
    assert values == [float(v) for v in range(25)]

    # A stale version: 412, with the current one named, and nothing changed.
    with pytest.raises(zarrgate_client.ZarrgateError) as refused:
        zarrgate_client.patch(server.url, store_name, {"nodes": {"t": {"shape": [30]}}}, if_match=1)
    assert refused.value.status == 412
    assert "another write came first" in refused.value.detail
    assert requests.get(f"{server.url}/{store_name}/t/zarr.json", timeout=30).json()["shape"] == [25]
