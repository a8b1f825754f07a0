"""The OpenAPI description of the control plane, against the server it describes.

``GET /api/v1/openapi.json`` serves ``src/http/openapi.json`` as it is. Here:

* it is a valid OpenAPI document (openapi-spec-validator);
* it documents exactly the routes the server has: the ``.route(...)`` calls
  of ``src/http/*.rs`` (with the ``/api/v1`` nesting of ``src/http/mod.rs``)
  are compared with its operations, and the live server is probed for every
  documented operation (it must exist) and every other method on a
  documented path (``405``, with an ``Allow`` header naming exactly the
  documented methods);
* schemathesis generates requests from it, valid and invalid, against a live
  server holding a small store and its ``file://`` object store: no request
  may get a ``5xx``, and every answer must have a documented status code,
  content type and headers and match the documented schema.

Also here, as regressions of the bugs this run found: a request the framework
rejects before a handler runs (a query string that does not deserialize, a
path name that is not UTF-8, a body over a limit, a method a path does not
have) is answered ``application/problem+json`` like every other error, and a
kerchunk ``gen`` entry that expands to too many references is a ``422``, not a
``500`` or a crash.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from openapi_spec_validator import validate

from conftest import REPO, Server, private_server

SPEC = REPO / "src" / "http" / "openapi.json"
HTTP_SOURCES = REPO / "src" / "http"
METHODS = ("get", "put", "post", "patch", "delete")

# The data plane (what Zarr clients read, its listings, the browser pages and the root page for
# browsers, GET /) is what the control-plane description leaves out on purpose: README.md
# documents it.
DATA_PLANE = {("GET", "/{store}/{*key}"), ("GET", "/{store}/"), ("GET", "/{store}"), ("GET", "/"),
              ("GET", "/v2/{store}/{*key}"), ("GET", "/v2/{store}/"), ("GET", "/v2/{store}")}


def served_spec(server: Server) -> dict:
    resp = requests.get(f"{server.url}/api/v1/openapi.json", timeout=30)
    assert resp.status_code == 200, resp.text[:500]
    assert resp.headers["content-type"] == "application/json"
    return resp.json()


# --------------------------------------------------------------------------
# (a) a valid document, served as written
# --------------------------------------------------------------------------

def test_the_served_document_is_valid_openapi(server: Server):
    doc = served_spec(server)
    assert doc == json.loads(SPEC.read_text()), (
        "GET /api/v1/openapi.json differs from src/http/openapi.json: rebuild the server "
        "(cargo build --bin zarrgate) after editing the document"
    )
    validate(doc)
    assert doc["openapi"].startswith("3.")
    # Every operation says what it does, for a person reading the rendered document.
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                assert item[method].get("summary"), f"{method.upper()} {path} has no summary"
                assert item[method].get("operationId"), f"{method.upper()} {path} has no operationId"


def test_the_document_states_how_authentication_works(server: Server):
    doc = served_spec(server)
    scheme = doc["components"]["securitySchemes"]["bearerAuth"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    # Optional: a server with no admin token needs no header.
    assert doc["security"] == [{"bearerAuth": []}, {}]
    # Operations outside /api/v1 never need one; every /api/v1 call, this document included, does.
    public = {path for path, item in doc["paths"].items() if item.get("get", {}).get("security") == []}
    assert public == {"/healthz", "/readyz", "/metrics"}
    for path, item in doc["paths"].items():
        if path.startswith("/api/v1/") and path not in public:
            for method in METHODS:
                if method in item:
                    assert "401" in item[method]["responses"], f"{method.upper()} {path} lacks 401"


TOKEN = "openapi-test-token"


@pytest.fixture
def guarded_server(tmp_path: Path):
    """A zarrgate with an admin token, for what the document says of tokens."""
    with private_server(tmp_path, ZARRGATE_ADMIN_TOKENS=TOKEN) as (url, _):
        yield url


def test_with_an_admin_token_the_api_needs_it_and_the_rest_does_not(guarded_server: str):
    url = guarded_server
    assert requests.get(f"{url}/api/v1/openapi.json", timeout=30).status_code == 401
    doc = requests.get(f"{url}/api/v1/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert doc.status_code == 200, "the document, with the token"
    for path, item in doc.json()["paths"].items():
        if "get" not in item or "{" in path:
            continue
        public = item["get"].get("security") == []
        anonymous = requests.get(url + path, timeout=30)
        if public:
            assert anonymous.status_code == 200, f"GET {path} without a token: {anonymous.status_code}"
            continue
        assert anonymous.status_code == 401, f"GET {path} without a token: {anonymous.status_code}"
        assert anonymous.headers["content-type"] == "application/problem+json"
        assert anonymous.headers["www-authenticate"] == "Bearer"
        assert anonymous.json()["type"] == "urn:zarrgate:problem:unauthorized"
        wrong = requests.get(url + path, headers={"Authorization": "Bearer nope"}, timeout=30)
        assert wrong.status_code == 401
        right = requests.get(url + path, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        assert right.status_code == 200, f"GET {path} with the token: {right.status_code} {right.text[:300]}"


# --------------------------------------------------------------------------
# (b) documented routes == the server's routes
# --------------------------------------------------------------------------

def _route_calls(text: str) -> list[tuple[str, str]]:
    """``(path, method router expression)`` of every ``.route("path", expr)`` in ``text``."""
    calls = []
    for found in re.finditer(r"\.route\(\s*\"([^\"]*)\"\s*,", text):
        depth, at = 1, found.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[at], 0)
            at += 1
        calls.append((found.group(1), text[found.end():at - 1]))
    assert len(calls) == text.count(".route("), "a .route( call without a literal path: update this parser"
    return calls


def _methods(expr: str, where: str) -> set[str]:
    """The methods of an axum method router such as ``get(a).put(b)``."""
    # `fallback` takes the methods axum has no filter for (the data plane's PROPFIND)
    called = [m for m in re.findall(r"(?:^|\.)\s*([a-z_]+)\(", expr.strip()) if m != "fallback"]
    unknown = set(called) - set(METHODS)
    assert not unknown, f"{where}: cannot read method router {expr!r} (update this parser)"
    return {m.upper() for m in called}


def server_routes() -> set[tuple[str, str]]:
    """``(METHOD, path)`` of every route in src/http, with axum's path syntax."""
    mod = (HTTP_SOURCES / "mod.rs").read_text()
    api = re.search(r"let api = Router::new\(\)(.*?);", mod, re.S)
    nest = re.search(r"\.nest\(\"([^\"]+)\",\s*api\)", mod)
    assert api and nest, "src/http/mod.rs no longer builds a nested `api` router: update this test"
    nested = set(re.findall(r"\.merge\((\w+)::router\(\)\)", api.group(1)))
    assert nested, "no module is merged into the /api/v1 router"
    routes = set()
    for source in sorted(HTTP_SOURCES.glob("*.rs")):
        text = source.read_text()
        assert ".nest(" not in text or source.name == "mod.rs", f"{source}: nesting not understood here"
        prefix = nest.group(1) if source.stem in nested else ""
        for path, expr in _route_calls(text):
            for method in _methods(expr, f"{source.name} route {path}"):
                # A nested router's "/" is the prefix itself (axum 0.8).
                routes.add((method, prefix if prefix and path == "/" else prefix + path))
    return routes


def documented_routes(doc: dict) -> set[tuple[str, str]]:
    """``(METHOD, path)`` of every operation, in the same syntax as :func:`server_routes`."""
    return {(m.upper(), path) for path, item in doc["paths"].items() for m in METHODS if m in item}


def test_every_route_is_documented_and_every_documented_route_exists(server: Server):
    routes = server_routes()
    assert DATA_PLANE <= routes, "the data-plane route changed: update DATA_PLANE"
    documented = documented_routes(served_spec(server))
    control = routes - DATA_PLANE
    assert sorted(control - documented) == [], "routes the document does not describe"
    assert sorted(documented - control) == [], "documented operations the server does not route"


def _probe(server: Server, method: str, path: str) -> requests.Response:
    """``method path`` with names that exist nowhere and bodies that change nothing."""
    url = server.url + path.replace("{store}", "no-such-store").replace("{name}", "no-such-object-store")
    body = b"{}" if method in ("PUT", "PATCH", "POST") else None
    headers = {"Content-Type": "application/json"}
    return requests.request(method, url, data=body, headers=headers, timeout=30)


def test_the_live_server_answers_exactly_the_documented_methods(server: Server):
    doc = served_spec(server)
    for path, item in doc["paths"].items():
        documented = {m.upper() for m in METHODS if m in item}
        for method in documented:
            resp = _probe(server, method, path)
            assert resp.status_code != 405, f"{method} {path}: 405, yet documented"
            if resp.status_code == 404:
                # The handler's own 404 (no such store), not "nothing is served here".
                assert "nothing is served at" not in resp.json()["detail"], f"{method} {path}: not routed"
            assert str(resp.status_code) in item[method.lower()]["responses"], (
                f"{method} {path}: undocumented status {resp.status_code}: {resp.text[:300]}"
            )
        for method in {m.upper() for m in METHODS} - documented:
            resp = _probe(server, method, path)
            assert resp.status_code == 405, f"{method} {path}: {resp.status_code}, not 405 (undocumented)"
            allowed = {m.strip() for m in resp.headers["allow"].split(",")} - {"HEAD"}
            assert allowed == documented, f"{path}: Allow {sorted(allowed)}, documented {sorted(documented)}"


# --------------------------------------------------------------------------
# errors the framework writes, and kerchunk gen limits
# --------------------------------------------------------------------------

FRAMEWORK_REJECTIONS = [
    pytest.param("GET", "/api/v1/stores?limit=ten", None, 400, id="GET stores?limit=ten"),
    pytest.param("GET", "/api/v1/stores?colour=blue", None, 400, id="GET stores?colour=blue"),
    pytest.param("PUT", "/api/v1/stores/bad-query?verify=maybe", b'{"nodes": {}}', 400,
                 id="PUT store?verify=maybe"),
    pytest.param("PATCH", "/api/v1/stores/bad-query?verify=true&verify=false", b'{"nodes": {}}', 400,
                 id="PATCH store?verify twice"),
    pytest.param("GET", "/api/v1/stores/bad-query/manifest?zip=1", None, 400, id="GET manifest?zip=1"),
    pytest.param("GET", "/api/v1/stores/%FF", None, 400, id="GET stores/%FF"),
    pytest.param("PUT", "/api/v1/object-stores/too-big", b" " * (2 * 1024 * 1024 + 1), 413,
                 id="PUT object store, 2 MiB + 1 body"),
    pytest.param("POST", "/api/v1/stores", b"{}", 405, id="POST stores"),
]
PROBLEM_KINDS = {400: "bad-request", 405: "method-not-allowed", 413: "too-large"}


@pytest.mark.parametrize(("method", "target", "body", "status"), FRAMEWORK_REJECTIONS)
def test_a_request_the_server_cannot_read_is_answered_with_a_problem(
    server: Server, method: str, target: str, body: bytes | None, status: int
):
    resp = requests.request(method, server.url + target, data=body, timeout=30)
    assert resp.status_code == status, resp.text[:300]
    assert resp.headers["content-type"] == "application/problem+json", resp.text[:300]
    problem = resp.json()
    assert problem["status"] == status
    assert problem["type"] == f"urn:zarrgate:problem:{PROBLEM_KINDS[status]}"
    assert problem["detail"]
    if status == 405:
        assert resp.headers["allow"] == "GET,HEAD"


def put_kerchunk(url: str, store: str, gen: dict) -> requests.Response:
    doc = {"version": 1, "refs": {".zgroup": '{"zarr_format":2}'},
           "gen": [{"key": "a/{{i}}", "url": "/x", **gen}]}
    return requests.put(f"{url}/api/v1/stores/{store}", json=doc, timeout=60)


def test_a_huge_kerchunk_gen_range_is_refused_and_the_server_survives(tmp_path: Path):
    # This once made the server allocate 800 GB and abort, dropping every request in flight.
    with private_server(tmp_path) as (url, log):
        try:
            resp = put_kerchunk(url, "huge-gen", {"dimensions": {"i": {"start": 0, "stop": 10**11}}})
        except requests.ConnectionError as e:
            last_words = re.findall(r".*(?:memory allocation|panicked).*", log.read_text(errors="replace"))
            raise AssertionError(f"zarrgate died: {last_words}") from e
        assert resp.status_code == 422, resp.text[:300]
        assert "limit" in resp.json()["problems"][0]
        assert requests.get(f"{url}/healthz", timeout=30).status_code == 200


def test_a_kerchunk_gen_product_past_2_to_the_64_is_refused(server: Server):
    # 65,536^4 references overflowed the u64 count: a 500 'attempt to multiply with overflow'.
    dims = {name: 65536 for name in "ijkl"}
    resp = put_kerchunk(server.url, f"gen-overflow-{uuid.uuid4().hex[:6]}", {"dimensions": dims})
    assert resp.status_code == 422, f"{resp.status_code}: {resp.text[:300]}"
    assert resp.headers["content-type"] == "application/problem+json"
    assert "limit" in resp.json()["problems"][0]


# --------------------------------------------------------------------------
# (c) schemathesis against a live server
# --------------------------------------------------------------------------

# The schema is read from the file (test (a) checks that the server serves it unchanged), so
# that schemathesis can make one test per operation when pytest collects this module. (Its lazy
# loader, schemathesis.pytest.from_fixture, would read the served one, but schemathesis 4.32.5's
# fails under pytest 9: "'Function' object has no attribute '_nodeid'".)
STORE, USED, SPARE = "openapi-demo", "openapi-files", "openapi-spare"
schema = schemathesis.openapi.from_path(SPEC, config=schemathesis.Config.from_dict({
    "generation": {"max-examples": 40, "deterministic": True, "database": "none"},
    "phases": {"stateful": {"enabled": False}},
    # Which manifests are valid cannot be said in JSON Schema (Zarr metadata, chunk grids,
    # registered object stores): a schema-valid body may get a documented 422.
    "checks": {"positive_data_acceptance": {"enabled": False}},
    # Half of the path names are those of the seeded resources.
    "dictionaries": {"stores": {"values": [STORE]}, "object-stores": {"values": [USED, SPARE]}},
    "parameters": {"path.store": {"dictionary": "stores", "probability": 0.5},
                   "path.name": {"dictionary": "object-stores", "probability": 0.5}},
}))


# A kerchunk parquet upload is a tar archive: send generated bytes as they are.
schemathesis.serializer.alias("application/x-tar", "application/octet-stream")


@pytest.fixture(scope="session")
def seed_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("openapi-sources").resolve()
    (folder / "spare").mkdir()
    (folder / "a.bin").write_bytes(bytes(range(64)))
    return folder


@pytest.fixture
def seeded(server: Server, seed_folder: Path) -> None:
    """Before each operation's run: a ``file://`` object store with a small store over it (a
    virtual and an inline chunk), and an object store no store uses, so that GET, PATCH,
    verify, export and DELETE find something (the run of one operation may delete them)."""
    for name, directory in ((USED, seed_folder), (SPARE, seed_folder / "spare")):
        resp = requests.put(f"{server.url}/api/v1/object-stores/{name}",
                            json={"url": directory.as_uri() + "/"}, timeout=30)
        assert resp.status_code in (200, 201), resp.text
    resp = requests.put(f"{server.url}/api/v1/stores/{STORE}", timeout=30, json={"nodes": {
        "": {"zarr_format": 3, "node_type": "group", "attributes": {"title": "openapi"}},
        "x": {"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "uint8",
              "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
              "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
              "fill_value": 0, "codecs": [{"name": "bytes"}],
              "manifest": {"0": {"path": (seed_folder / "a.bin").as_uri(), "offset": 8, "length": 2},
                           "1": {"data": "AQI="}}},
    }})
    assert resp.status_code in (200, 201), resp.text


def keep_sources_local(case) -> None:
    """The server contacts the object stores manifests point into (to record their facts). An
    object store registration for anything but ``file://`` (the document's examples name
    ``s3://`` buckets) is redirected to a closed loopback port, so that nothing generated here
    can make the server reach out of this machine."""
    if case.method.upper() == "PUT" and case.path == "/api/v1/object-stores/{name}":
        body = case.body
        url = body.get("url") if isinstance(body, dict) else None
        if isinstance(url, str) and not url.startswith("file:"):
            digest = hashlib.sha256(body["url"].encode()).hexdigest()[:12]
            body["url"] = f"http://127.0.0.1:1/{digest}/"


@pytest.mark.parametrize("server", ["sqlite"], indirect=True)
@schema.parametrize()
# `seeded` runs once per operation, before all its examples: that is the point.
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_server_keeps_to_its_openapi_document(case, server: Server, seeded: None):
    keep_sources_local(case)
    case.call_and_validate(base_url=server.url, timeout=60)
