"""zarr-python reading an array whose chunks lie one after another in a source far away (an
HTTP upstream that counts its GETs): every value is right, and the gateway asked the upstream a
handful of times, not once per chunk (single-flight, coalescing and read-ahead; the Rust tests
in tests/readahead.rs count each case exactly).
"""

from __future__ import annotations

import http.server
import json
import re
import uuid

import numpy as np
import pytest
import requests
import zarr

import zarrgate_client
from upstream import serve

CHUNK = 1024
CHUNKS = 64
VALUES = np.arange(CHUNK * CHUNKS, dtype="<f4") * 0.25 - 9.0


class _Upstream(http.server.BaseHTTPRequestHandler):
    """VALUES' bytes under any path, ranges clipped at the end as RFC 9110 says, ETag "v1"."""

    protocol_version = "HTTP/1.1"
    gets: list[str] = []

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        body = VALUES.tobytes()
        _Upstream.gets.append(self.headers.get("range", ""))
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("range", ""))
        start, end = (int(m.group(1)), min(int(m.group(2)) + 1, len(body))) if m else (0, len(body))
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(body)}")
        self.send_header("Content-Length", str(end - start))
        self.send_header("ETag", '"v1"')
        self.end_headers()
        self.wfile.write(body[start:end])


@pytest.fixture
def upstream():
    _Upstream.gets = []
    with serve(http.server.ThreadingHTTPServer, _Upstream) as url:
        yield url


def test_a_sequential_array_is_read_in_a_few_upstream_requests(server, store_name, upstream):
    zarrgate_client.register_object_store(server.url, f"far-{uuid.uuid4().hex[:8]}", upstream)
    url = f"{upstream}data/v.bin"
    array = {
        "zarr_format": 3, "node_type": "array", "shape": [CHUNK * CHUNKS], "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [CHUNK]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": -1.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "dimension_names": ["t"],
        "manifest": {str(i): {"path": url, "offset": i * CHUNK * 4, "length": CHUNK * 4} for i in range(CHUNKS)},
    }
    doc = {"nodes": {"": {"zarr_format": 3, "node_type": "group", "attributes": {}}, "v": array},
           "sources": {url: {"etag": '"v1"'}}}
    resp = requests.put(f"{server.url}/api/v1/stores/{store_name}?verify=false", data=json.dumps(doc), timeout=60)
    assert resp.status_code == 201, resp.text

    served = zarr.open_group(f"{server.url}/{store_name}", mode="r", zarr_format=3)["v"]
    np.testing.assert_array_equal(served[:], VALUES)
    # 64 chunks of 4 KiB are 4 blocks of 64 KiB: at most one GET each, whatever the order.
    assert 1 <= len(_Upstream.gets) <= 4, _Upstream.gets
    np.testing.assert_array_equal(served[1000:5000], VALUES[1000:5000])
    assert len(_Upstream.gets) <= 4, _Upstream.gets
