"""Messages that never mislead: what the server answers to the mistakes a new user makes,
asserted on its words, against the real server.

* A native document with a typo in its first key is answered as a native document, saying
  why it was not read as kerchunk either.
* A missing required field of an array is named.
* Every problem of a document is listed together: an unknown codec does not hide the chunk
  keys outside the grid.
* A 405 lists the methods the path has, in its body as in ``Allow``.
* An ``/api/v1`` path the control plane does not have is a 404 naming it, not "no store".
* The OpenAPI document says that it, like every ``/api/v1`` call, needs the token.
* ``/api/v1`` itself names the control plane's routes (not "no store is named api").
* The Python client's exception lists a refused document's problems, as the command line does.
* ``--listen localhost:PORT`` is a listen address (names resolve).
* A database password given in the URL's query is never printed: neither by ``zarrgate
  config`` nor in the error of a server that cannot reach its database.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid

import pytest
import requests

import zarrgate_client
from conftest import LISTENING, Server, _binary


def array(**changes) -> dict:
    node = {"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0, "codecs": [{"name": "bytes"}],
            "manifest": {"0": {"data": "AAE="}, "1": {"data": "AgM="}}}
    node.update(changes)
    return {key: value for key, value in node.items() if value is not None}


def put(server: Server, document: dict) -> tuple[str, requests.Response]:
    store = f"messages-{uuid.uuid4().hex[:10]}"
    answer = requests.put(f"{server.url}/api/v1/stores/{store}", data=json.dumps(document), timeout=30)
    assert answer.headers["content-type"] == "application/problem+json", answer.text
    # nothing was stored
    assert requests.get(f"{server.url}/api/v1/stores/{store}", timeout=30).status_code == 404
    return store, answer


def test_a_typo_in_a_native_document_is_answered_as_a_native_document(server: Server):
    store, answer = put(server, {"node": {"": {"zarr_format": 3, "node_type": "group"}}})
    assert answer.status_code == 422
    body = answer.json()
    assert body["detail"] == f'the native manifest for store "{store}" has 3 problem(s); nothing was changed'
    assert body["problems"] == [
        'unknown top-level key "node" (expected "nodes", "sources" or, to PATCH, "delete")',
        'the document has no "nodes"',
        'read as a native manifest, but its first key "node" is not one either ("nodes", "sources"); nor is it '
        'one kerchunk references start with ("version", "refs", or a Zarr key such as ".zgroup" or '
        '"air/.zarray"): if this is kerchunk, send it with ?format=kerchunk',
    ]


def test_kerchunk_references_are_still_detected(server: Server):
    store = f"messages-{uuid.uuid4().hex[:10]}"
    refs = {"version": 1, "refs": {".zgroup": '{"zarr_format": 2}'}}
    answer = requests.put(f"{server.url}/api/v1/stores/{store}", data=json.dumps(refs), timeout=30)
    assert answer.status_code == 201, answer.text
    requests.delete(f"{server.url}/api/v1/stores/{store}", timeout=30)


def test_a_missing_required_field_is_named(server: Server):
    _, answer = put(server, {"nodes": {"a": array(data_type=None, fill_value=None)}})
    assert answer.status_code == 422
    assert answer.json()["problems"] == [
        'node a: the required field "data_type" is missing (an array\'s zarr.json has zarr_format, node_type, '
        "shape, data_type, chunk_grid, chunk_key_encoding, fill_value, codecs)",
        'node a: the required field "fill_value" is missing (an array\'s zarr.json has zarr_format, node_type, '
        "shape, data_type, chunk_grid, chunk_key_encoding, fill_value, codecs)",
    ]


def test_an_unknown_codec_does_not_hide_the_other_problems(server: Server):
    bad = array(codecs=[{"name": "bytes"}, {"name": "no-such-codec"}],
                manifest={"0": {"data": "AAE="}, "7": {"data": "AAE="}, "x": {"data": "AAE="}})
    _, answer = put(server, {"nodes": {"a": bad}})
    assert answer.status_code == 422
    problems = answer.json()["problems"]
    assert len(problems) == 3, problems
    assert any(p.startswith("node a: ") and "no-such-codec" in p for p in problems), problems
    assert 'array "a": manifest key "x" is not chunk indices joined by \'.\'' in problems, problems
    assert 'array a: chunk key "7" is outside the chunk grid [2]' in problems, problems


def test_a_405_lists_the_allowed_methods(server: Server):
    answer = requests.post(f"{server.url}/api/v1/stores", timeout=30)
    assert answer.status_code == 405
    allowed = answer.headers["allow"]
    assert sorted(m.strip() for m in allowed.split(",")) == ["GET", "HEAD"], allowed
    assert answer.json()["detail"] == f"this method is not allowed here; allowed: {allowed}"


def test_an_unknown_api_route_is_named(server: Server):
    for method, path in [("GET", "/api/v1/nothing"), ("POST", "/api/v1/stores/x/nothing")]:
        answer = requests.request(method, f"{server.url}{path}", timeout=30)
        assert answer.status_code == 404, (method, path, answer.text)
        assert answer.json()["detail"] == (
            f"the control plane has no route {method} {path}: its routes are listed in /api/v1/openapi.json")


def test_the_openapi_document_says_it_needs_the_token(server: Server):
    doc = requests.get(f"{server.url}/api/v1/openapi.json", timeout=30).json()
    description = doc["info"]["description"]
    assert "every `/api/v1` request, this document included, needs `Authorization: Bearer <token>`" in description
    assert "except this document" not in description and "this document and the data plane never" not in description
    assert "security" not in doc["paths"]["/api/v1/openapi.json"]["get"]
    assert "401" in doc["paths"]["/api/v1/openapi.json"]["get"]["responses"]


def test_the_api_index_names_the_routes(server: Server):
    for path in ["/api/v1", "/api/v1/"]:
        answer = requests.get(f"{server.url}{path}", timeout=30)
        assert answer.status_code == 200, (path, answer.text)
        index = answer.json()
        assert index["openapi"] == "/api/v1/openapi.json"
        assert "PUT /api/v1/stores/{store}: Register or replace a store" in " ".join(index["routes"]), index
        assert any(r.startswith("DELETE /api/v1/object-stores/{name}") for r in index["routes"]), index


def test_the_client_error_lists_the_problems(server: Server):
    bad = array(codecs=[{"name": "bytes"}, {"name": "no-such-codec"}],
                manifest={"0": {"data": "AAE="}, "7": {"data": "AAE="}})
    with pytest.raises(zarrgate_client.ZarrgateError) as refused:
        zarrgate_client.register(server.url, f"bad-{uuid.uuid4().hex[:8]}", {"nodes": {"a": bad}})
    message = str(refused.value)
    assert refused.value.status == 422
    assert len(refused.value.problems) == 2, refused.value.problems
    assert 'array a: chunk key "7" is outside the chunk grid [2]' in message, message
    assert "no-such-codec" in message, message


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRGATE_") and k != "DATABASE_URL"}
    env.update(NO_COLOR="1", **extra)
    return env


def test_a_listen_address_may_name_its_host(tmp_path):
    env = _env(DATABASE_URL=f"sqlite://{tmp_path}/catalog.db")
    proc = subprocess.Popen([str(_binary()), "--listen", "localhost:0"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = ""
        for line in proc.stdout:
            if LISTENING.search(line):
                break
        found = LISTENING.search(line)
        assert found and found.group(1).startswith("http://127.0.0.1:"), line
        assert requests.get(f"{found.group(1)}/healthz", timeout=30).status_code == 200
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("url", ["postgres://zarrgate@127.0.0.1:9/zarrgate?password=hunter2-in-query",
                                 "postgres://zarrgate:hunter2-in-userinfo@127.0.0.1:9/zarrgate"])
def test_a_database_password_is_never_printed(tmp_path, url):
    secret = re.search(r"hunter2-in-\w+", url).group(0)
    printed = subprocess.run([str(_binary()), "config", "--database-url", url], env=_env(), cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0, printed.stderr
    assert secret not in printed.stdout + printed.stderr
    assert "***" in printed.stdout and "database_url: its password reads ***" in printed.stdout, printed.stdout
    started = subprocess.run([str(_binary()), "--database-url", url], env=_env(ZARRGATE_LOG="debug"),
                             cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert started.returncode != 0
    assert "opening the catalog at postgres://zarrgate" in started.stderr, started.stderr
    assert secret not in started.stdout + started.stderr, started.stderr
