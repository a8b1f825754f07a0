"""An upstream that breaks off the body of a chunk every time (half the bytes, then a TCP
reset): zarr-python and xarray reading through zarrgate raise, they never hand back fill
values or wrong numbers, and the chunks of a healthy source in the same array read right.
The Rust tests (tests/upstream_faults.rs) cover each fault byte by byte; this one is what a
scientist would see.
"""

from __future__ import annotations

import json
import socket
import socketserver
import struct
import uuid

import numpy as np
import pytest
import requests
import xarray as xr
import zarr

import zarrgate_client
from upstream import serve

VALUES = np.arange(8, dtype="<f4") * 1.5 + 1.0


class _Upstream(socketserver.BaseRequestHandler):
    """Serves VALUES' bytes under any path; under /reset/ it sends the head and half the body
    asked for, then resets the connection."""

    def handle(self) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            data = self.request.recv(4096)
            if not data:
                return
            request += data
        lines = request.decode("latin-1").split("\r\n")
        path = lines[0].split()[1]
        body = VALUES.tobytes()
        start, end = 0, len(body)
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "range":
                first, _, last = value.strip().removeprefix("bytes=").partition("-")
                start, end = int(first), int(last) + 1
        head = (f"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{end - 1}/{len(body)}\r\n"
                f"Content-Length: {end - start}\r\nETag: \"v1\"\r\nConnection: close\r\n\r\n")
        if path.startswith("/reset/"):
            self.request.sendall(head.encode() + body[start:start + (end - start) // 2])
            self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            self.request.sendall(head.encode() + body[start:end])


@pytest.fixture
def upstream():
    with serve(socketserver.ThreadingTCPServer, _Upstream) as url:
        yield url


def test_a_chunk_cut_short_upstream_raises(server, store_name, upstream):
    zarrgate_client.register_object_store(server.url, f"faulty-{uuid.uuid4().hex[:8]}", upstream)
    array = {
        "zarr_format": 3, "node_type": "array", "shape": [8], "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": -1.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "dimension_names": ["t"],
        "manifest": {
            "0": {"path": f"{upstream}ok/v.bin", "offset": 0, "length": 16},
            "1": {"path": f"{upstream}reset/v.bin", "offset": 16, "length": 16},
        },
    }
    doc = {"nodes": {"": {"zarr_format": 3, "node_type": "group", "attributes": {}}, "v": array}}
    resp = requests.put(f"{server.url}/api/v1/stores/{store_name}?verify=false", data=json.dumps(doc),
                        timeout=60)
    assert resp.status_code == 201, resp.text

    url = f"{server.url}/{store_name}"
    answer = requests.get(f"{url}/v/c/1", timeout=60)
    assert answer.status_code == 502, answer.text
    assert answer.json()["type"] == "urn:zarrgate:problem:source-interrupted"

    served = zarr.open_group(url, mode="r", zarr_format=3)["v"]
    np.testing.assert_array_equal(served[:4], VALUES[:4])
    with pytest.raises(Exception) as raised:
        served[:]
    assert "502" in str(raised.value) or "Bad Gateway" in str(raised.value), raised.value
    with xr.open_zarr(url, zarr_format=3, consolidated=True) as ds:
        np.testing.assert_array_equal(ds["v"][:4].values, VALUES[:4])
        with pytest.raises(Exception):
            ds["v"].values
