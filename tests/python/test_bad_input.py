"""A careless manifest is refused at registration, not read as wrong numbers.

The example of issue 20: an inline chunk of 3 bytes for a float32 chunk of 2 elements with
codecs ``[bytes]`` (8 bytes needed) was registered with ``201``; then zarr-python raised a
confusing error and zarrita read ``[0, 0, 0, 0]``. Now it is a ``422`` naming the array, the
chunk and both sizes, nothing is stored, and the same store with an 8-byte chunk reads back in
zarr-python exactly. A body that is not JSON at all is a ``400``.
"""

from __future__ import annotations

import base64

import numpy as np
import requests
import zarr

from conftest import register

TIMEOUT = 60


def _doc(chunk: bytes) -> dict:
    return {"nodes": {"a": {
        "zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "manifest": {"0": {"data": base64.b64encode(chunk).decode()}},
    }}}


def test_an_inline_chunk_too_short_for_its_codecs_is_refused(server, store_name):
    answer = register(server, store_name, _doc(b"\x00\x00\x80"), status=422)
    assert answer["type"] == "urn:zarrgate:problem:invalid"
    [problem] = answer["problems"]
    assert problem.startswith('array a, chunk "0": inline: its length is 3 bytes'), problem
    assert "exactly 8 bytes" in problem and "2 element(s) of 4 byte(s)" in problem, problem
    # Nothing was stored: there is no such store.
    assert requests.get(f"{server.url}/{store_name}/zarr.json", timeout=TIMEOUT).status_code == 404

    values = np.array([1.5, -2.0], dtype="<f4")
    register(server, store_name, _doc(values.tobytes()))
    array = zarr.open_array(f"{server.url}/{store_name}/a", mode="r")
    np.testing.assert_array_equal(array[:], [1.5, -2.0, 0.0, 0.0])


def test_a_body_that_is_not_json_is_a_bad_request(server, store_name):
    resp = requests.put(f"{server.url}/api/v1/stores/{store_name}", data=b'{"nodes": {"a": {',
                        headers={"Content-Type": "application/json"}, timeout=TIMEOUT)
    assert resp.status_code == 400, resp.text
    assert resp.headers["content-type"] == "application/problem+json"
    assert "not valid JSON" in resp.json()["detail"], resp.text
