"""zarrgate behind a CDN: real nginx with deploy/cdn's configuration in front of three zarrgate
replicas sharing one PostgreSQL catalog, read by zarr-python, xarray and obstore.

What a user of the CDN relies on, checked here: data read through the cache equals the files;
a chunk read twice is served from the cache; Range requests (a-b, a-, -n, shards) are answered
from the cached chunk with the exact bytes; pinned /store@version URLs keep their bytes after a
re-registration while current URLs move to the new version once max-age has passed; a reader
that pins the version it found in zarr.json never mixes two versions, whatever registrations
happen meanwhile; a source rewritten after registration gives an error, never other numbers,
and the error is never cached; stores registered with ?missing_chunks=fill read the same as with
404s, and their fill chunks are cached.

The replicas run with http.max_age_seconds = 2 and cache.current_version_ttl_ms = 500, so the
waits stay short. Needs nginx (apt-get install -y nginx-light) and PostgreSQL
($ZARRGATE_TEST_POSTGRES_URL, as conftest.py; ZARRGATE_TEST_POSTGRES=skip skips this module).
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path

import aiohttp
import h5py
import numpy as np
import pytest
import requests
import xarray as xr
import zarr
from obstore.store import HTTPStore
from zarr.storage import LocalStore, ObjectStore

import fixtures
import zarrgate_client
from cdn import CdnStack
from virtual import assert_same_dataset, open_file, open_served, virtual_dataset

MAX_AGE = 2          # ZARRGATE_HTTP_MAX_AGE_SECONDS of the replicas
VERSION_TTL = 0.5    # ZARRGATE_CACHE_CURRENT_VERSION_TTL_MS / 1000
# nginx counts freshness in whole seconds of its clock: an entry stored with max-age=2 expires
# 2 to 3 s later.
EXPIRED = MAX_AGE + 1.5
# A re-registration reaches current URLs through the CDN once the cached entry expires, the
# replica asked has noticed the new version (TTL), and, at worst, once more max-age if the
# entry was refilled from a replica that had not noticed yet.
NEW_VERSION_DEADLINE = 2 * EXPIRED + VERSION_TTL + 3


@pytest.fixture(scope="module")
def cdn():
    if os.environ.get("ZARRGATE_TEST_POSTGRES") == "skip":
        pytest.skip("ZARRGATE_TEST_POSTGRES=skip: the CDN tests need PostgreSQL (replicas "
                    "share its catalog)")
    workdir = Path(tempfile.mkdtemp(prefix="zarrgate-cdn-"))
    stack = CdnStack(workdir, {"ZARRGATE_HTTP_MAX_AGE_SECONDS": str(MAX_AGE),
                               "ZARRGATE_CACHE_CURRENT_VERSION_TTL_MS": str(int(VERSION_TTL * 1000))})
    try:
        yield stack
    finally:
        troubles = stack.close()
        if troubles:
            pytest.fail("; ".join(troubles), pytrace=False)
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def sources(cdn, tmp_path_factory) -> Path:
    """A directory every replica may read (a file:// object store in the shared catalog),
    registered through the CDN's /api/."""
    directory = tmp_path_factory.mktemp("cdn-sources").resolve()
    name = f"cdn-{uuid.uuid4().hex[:10]}"
    zarrgate_client.register_object_store(cdn.url, name, directory.as_uri() + "/")
    return directory


@pytest.fixture
def name(request) -> str:
    return f"cdn-{request.node.name.replace('_', '-')[5:40].strip('-')}-{uuid.uuid4().hex[:6]}"


# ---------------------------------------------------------------------------------------------
# helpers


def put_store(base_url: str, store: str, doc: dict, params: dict | None = None) -> dict:
    resp = requests.put(f"{base_url}/api/v1/stores/{store}", params=params,
                        data=json.dumps(doc, allow_nan=False),
                        headers={"Content-Type": "application/json"}, timeout=60)
    assert resp.status_code in (200, 201), f"PUT {store}: {resp.status_code} {resp.text[:1000]}"
    return resp.json()


def get(cdn, path: str, **headers) -> requests.Response:
    return requests.get(f"{cdn.url}{path}", headers=headers, timeout=30)


def cache_status(resp: requests.Response) -> str | None:
    return resp.headers.get("X-Cache-Status")


def array_node(shape, chunks, dtype="<i4", fill_value=0, codecs=None, manifest=None,
               attributes=None) -> dict:
    return {
        "zarr_format": 3, "node_type": "array", "shape": list(shape),
        "data_type": {"<i4": "int32", "<f4": "float32", "|u1": "uint8"}[dtype],
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill_value,
        "codecs": codecs or [{"name": "bytes", "configuration": {"endian": "little"}}],
        "dimension_names": [f"d{i}" for i in range(len(shape))],
        "attributes": attributes or {},
        "manifest": manifest or {},
    }


def inline(data: bytes) -> dict:
    return {"data": base64.b64encode(data).decode()}


def constant_doc(value: int, attributes: dict | None = None) -> dict:
    """A store whose array ``v`` (8 x 6 int32, four chunks of 2 x 6) holds ``value``
    everywhere, chunks inline."""
    chunk = np.full((2, 6), value, dtype="<i4").tobytes()
    manifest = {f"{i}.0": inline(chunk) for i in range(4)}
    return {"nodes": {
        "": {"zarr_format": 3, "node_type": "group", "attributes": attributes or {}},
        "v": array_node((8, 6), (2, 6), manifest=manifest),
    }}


def wait_until(predicate, deadline: float, what: str, step: float = 0.25):
    """Call ``predicate`` until it returns a true value; fail after ``deadline`` seconds."""
    started = time.monotonic()
    last = None
    while time.monotonic() - started < deadline:
        last = predicate()
        if last:
            return time.monotonic() - started
        time.sleep(step)
    pytest.fail(f"{what}: not within {deadline:.1f} s (last: {last!r})")


# ---------------------------------------------------------------------------------------------
# (a) reading through the CDN


def test_xarray_and_zarr_read_a_netcdf_file_through_the_cdn(cdn, sources, name):
    folder = sources / name
    folder.mkdir()
    path = fixtures.make_netcdf4_air(folder)
    doc = zarrgate_client.manifeststore_to_native(virtual_dataset(path))
    zarrgate_client.register(cdn.url, name, doc)  # through nginx's /api/

    url = f"{cdn.url}/{name}"
    assert_same_dataset(open_served(url), open_file(path))
    group = zarr.open_group(url, mode="r", zarr_format=3)
    with h5py.File(path, "r") as f:
        for var in ("air", "time", "lat", "lon", "crs"):
            np.testing.assert_array_equal(group[var][...], f[var][()], err_msg=var)

    # obstore (Rust object_store, as zarrs_object_store uses it) through the same cache
    http = HTTPStore.from_url(url, client_options={"allow_http": True})
    with xr.open_zarr(ObjectStore(http, read_only=True), zarr_format=3) as ds:
        assert_same_dataset(ds.load(), open_file(path))

    # the second and third readers were served by the cache: every air chunk reached a
    # replica once, whoever read it
    for key in ("c/0/0/0", "c/1/1/1"):
        assert cdn.upstream_requests(f"/{name}/air/{key}") == 1, key


def test_replicas_share_the_load(cdn, name):
    version = put_store(cdn.replicas[0].url, name, constant_doc(5))["version"]
    paths = [f"/{name}{at}/v/c/{i}/0" for at in ("", f"@{version}") for i in range(4)]
    for p in paths:
        assert get(cdn, p).status_code == 200, p
    per_replica = [sum(r.requests_for(p) for p in paths) for r in cdn.replicas]
    assert sum(per_replica) == len(paths), per_replica
    assert sum(1 for n in per_replica if n) >= 2, f"one replica took everything: {per_replica}"


# ---------------------------------------------------------------------------------------------
# (b) cache hits


def test_second_read_of_a_chunk_is_a_cache_hit(cdn, name):
    summary = put_store(cdn.replicas[1].url, name, constant_doc(7))
    expected = np.full((2, 6), 7, dtype="<i4").tobytes()
    path = f"/{name}/v/c/1/0"

    first = get(cdn, path)
    second = get(cdn, path)
    assert (first.status_code, cache_status(first)) == (200, "MISS")
    assert (second.status_code, cache_status(second)) == (200, "HIT")
    assert first.content == second.content == expected
    assert second.headers["Zarrgate-Version"] == str(summary["version"])
    assert second.headers["ETag"] == first.headers["ETag"]
    assert cdn.upstream_requests(path) == 1

    # HEAD (zarrs sends one before each ranged read) and If-None-Match are answered by the
    # cache too
    head = requests.head(f"{cdn.url}{path}", timeout=10)
    assert (head.status_code, cache_status(head)) == (200, "HIT")
    assert head.headers["Content-Length"] == str(len(expected))
    not_modified = get(cdn, path, **{"If-None-Match": first.headers["ETag"]})
    assert (not_modified.status_code, cache_status(not_modified)) == (304, "HIT")
    assert cdn.upstream_requests(path) == 1

    # pinned URLs: cached as well, immutable
    pinned = f"/{name}@{summary['version']}/v/c/1/0"
    assert cache_status(get(cdn, pinned)) == "MISS"
    again = get(cdn, pinned)
    assert cache_status(again) == "HIT" and again.content == expected
    assert "immutable" in again.headers["Cache-Control"]

    # once max-age has passed, the entry is revalidated: zarrgate answers 304 (the chunk did
    # not change), nginx serves the bytes it has
    time.sleep(EXPIRED)
    later = get(cdn, path)
    assert (later.status_code, cache_status(later)) == (200, "REVALIDATED")
    assert later.content == expected
    assert cdn.upstream_requests(path) == 2
    assert sum(r.log_text().count(f"status=304 path={path}") for r in cdn.replicas) == 1


def test_the_control_plane_is_never_cached(cdn, name):
    put_store(cdn.url, name, constant_doc(1))
    first = requests.get(f"{cdn.url}/api/v1/stores/{name}", timeout=10).json()
    put_store(cdn.url, name, constant_doc(2))
    second = requests.get(f"{cdn.url}/api/v1/stores/{name}", timeout=10)
    assert second.json()["version"] == first["version"] + 1
    assert cache_status(second) is None


# ---------------------------------------------------------------------------------------------
# (c) ranges


def _file_store(directory: Path, name: str, blobs: list[bytes]) -> tuple[dict, Path]:
    """A uint8 array whose chunks are ``blobs``, stored at odd offsets of one file."""
    path = directory / f"{name}.bin"
    manifest, data, offset = {}, b"", 0
    for i, blob in enumerate(blobs):
        data += b"\xee" * 37  # something else between chunks
        offset = len(data)
        data += blob
        manifest[str(i)] = {"path": str(path), "offset": offset, "length": len(blob)}
    path.write_bytes(data + b"\xee" * 11)
    size = len(blobs[0])
    doc = {"nodes": {"": {"zarr_format": 3, "node_type": "group", "attributes": {}},
                     "b": array_node((size * len(blobs),), (size,), dtype="|u1",
                                     codecs=[{"name": "bytes"}], manifest=manifest)}}
    return doc, path


def test_ranges_are_served_from_the_cached_chunk(cdn, sources, name):
    rng = np.random.default_rng(42)
    blobs = [rng.integers(0, 256, 4096, dtype=np.uint8).tobytes() for _ in range(2)]
    doc, _ = _file_store(sources, name, blobs)
    put_store(cdn.url, name, doc)
    chunk = blobs[0]

    cases = [  # (Range, first byte, last byte): the first one fills the cache
        ("bytes=0-9", 0, 9),
        ("bytes=100-199", 100, 199),
        ("bytes=4000-", 4000, 4095),
        ("bytes=-16", 4080, 4095),
        ("bytes=4090-99999", 4090, 4095),
    ]
    path = f"/{name}/b/c/0"
    for i, (header, a, b) in enumerate(cases):
        resp = get(cdn, path, Range=header)
        assert resp.status_code == 206, (header, resp.status_code, resp.text[:200])
        assert resp.content == chunk[a:b + 1], header
        assert resp.headers["Content-Range"] == f"bytes {a}-{b}/4096", header
        assert resp.headers["Content-Length"] == str(b - a + 1), header
        assert cache_status(resp) == ("MISS" if i == 0 else "HIT"), header
    unsatisfiable = get(cdn, path, Range="bytes=5000-")
    assert unsatisfiable.status_code == 416
    assert unsatisfiable.headers["Content-Range"] == "bytes */4096"
    whole = get(cdn, path)
    assert (whole.status_code, whole.content) == (200, chunk)

    # a suffix range on an uncached chunk: exact bytes at once
    suffix = get(cdn, f"/{name}/b/c/1", Range="bytes=-100")
    assert (suffix.status_code, cache_status(suffix)) == (206, "MISS")
    assert suffix.content == blobs[1][-100:]
    assert suffix.headers["Content-Range"] == "bytes 3996-4095/4096"

    # nginx asked zarrgate for each whole chunk once (200, no Range), and cut every range from
    # its cached copy
    for key in ("c/0", "c/1"):
        p = f"/{name}/b/{key}"
        assert cdn.upstream_requests(p) == 1, p
        assert sum(r.log_text().count(f"status=200 path={p}") for r in cdn.replicas) == 1, p

    # If-Range with the chunk's ETag keeps the range; with another, the whole chunk
    tag = whole.headers["ETag"]
    kept = get(cdn, path, Range="bytes=0-3", **{"If-Range": tag})
    assert (kept.status_code, kept.content) == (206, chunk[:4])
    other = get(cdn, path, Range="bytes=0-3", **{"If-Range": '"something-else"'})
    assert (other.status_code, other.content) == (200, chunk)


def test_sharded_array_through_the_cdn(cdn, sources, name):
    """zarr-python reads a sharded array with a suffix range (the shard index) and one range
    per inner chunk: all of them served from the cached shards."""
    local = sources / name
    values = np.arange(64 * 10, dtype="<i4").reshape(64, 10)
    arr = zarr.create_array(LocalStore(local), shape=values.shape, chunks=(8, 5),
                            shards=(32, 10), dtype="<i4", compressors=None, fill_value=-1,
                            dimension_names=["y", "x"])
    arr[...] = values
    meta = json.loads((local / "zarr.json").read_text())
    meta["manifest"] = {
        f"{i}.0": {"path": str(local / "c" / str(i) / "0"), "offset": 0,
                   "length": (local / "c" / str(i) / "0").stat().st_size}
        for i in range(2)
    }
    doc = {"nodes": {"": {"zarr_format": 3, "node_type": "group", "attributes": {}},
                     "s": meta}}
    put_store(cdn.url, name, doc)

    served = zarr.open_group(f"{cdn.url}/{name}", mode="r", zarr_format=3)["s"]
    np.testing.assert_array_equal(served[...], values)
    np.testing.assert_array_equal(served[40:50, 3:7], values[40:50, 3:7])
    log = cdn.nginx.access_log()
    ranged = [line for line in log.splitlines() if f"/{name}/s/c/" in line and 'range="bytes=' in line]
    assert any('range="bytes=-' in line for line in ranged), "zarr-python sent no suffix range"
    assert all('" 206 ' in line for line in ranged), ranged
    for i in range(2):
        assert cdn.upstream_requests(f"/{name}/s/c/{i}/0") == 1


# ---------------------------------------------------------------------------------------------
# (d) re-registration: pinned URLs keep their bytes, current URLs move after max-age


def test_reregistration_pinned_and_current_urls(cdn, name):
    # same metadata in both versions: only the numbers change
    first = put_store(cdn.replicas[0].url, name, constant_doc(1))
    v1 = first["version"]
    ones, twos = (np.full((2, 6), n, dtype="<i4").tobytes() for n in (1, 2))

    meta = get(cdn, f"/{name}/zarr.json")
    assert meta.headers["Zarrgate-Version"] == str(v1)
    current = get(cdn, f"/{name}/v/c/0/0")
    cached_at = time.monotonic()
    assert current.content == ones
    assert get(cdn, f"/{name}@{v1}/v/c/0/0").content == ones

    # a new version, through another replica
    second = put_store(cdn.replicas[1].url, name, constant_doc(2))
    v2 = second["version"]
    assert v2 > v1
    # the control plane through the CDN knows at once
    assert requests.get(f"{cdn.url}/api/v1/stores/{name}", timeout=10).json()["version"] == v2

    # within max-age, the CDN still answers the current URL from its cache: the old bytes
    if time.monotonic() - cached_at < MAX_AGE - 0.5:
        still = get(cdn, f"/{name}/v/c/0/0")
        assert (cache_status(still), still.content) == ("HIT", ones)

    # pinned URLs: each version its own bytes, whoever asks, for ever
    for _ in range(2):
        assert get(cdn, f"/{name}@{v1}/v/c/0/0").content == ones
        assert get(cdn, f"/{name}@{v2}/v/c/0/0").content == twos
    assert (zarr.open_group(f"{cdn.url}/{name}@{v1}", mode="r", zarr_format=3)["v"][...] == 1).all()
    assert (zarr.open_group(f"{cdn.url}/{name}@{v2}", mode="r", zarr_format=3)["v"][...] == 2).all()

    # current URLs: the new version once max-age has passed, chunks and zarr.json's version
    # alike (a client that pins what zarr.json names must get there too)
    def moved():
        chunk = get(cdn, f"/{name}/v/c/0/0").content == twos
        version = get(cdn, f"/{name}/zarr.json").headers.get("Zarrgate-Version")
        return chunk and version == str(v2)

    wait_until(moved, NEW_VERSION_DEADLINE, "the current URLs through the CDN serve version 2")
    with xr.open_zarr(f"{cdn.url}/{name}", zarr_format=3) as ds:
        assert (ds.v.values == 2).all()
    # and they stay there
    for _ in range(3):
        assert get(cdn, f"/{name}/v/c/3/0").content == twos
        assert get(cdn, f"/{name}/zarr.json").headers["Zarrgate-Version"] == str(v2)
    old = get(cdn, f"/{name}@{v1}/v/c/0/0")
    assert (cache_status(old), old.content) == ("HIT", ones)


# ---------------------------------------------------------------------------------------------
# (e) pinned readers never mix versions


def test_pinned_readers_see_one_version_while_registrations_go_on(cdn, name):
    generations: dict[str, int] = {}   # version -> the value its chunks hold
    register_errors: list[str] = []
    stop = threading.Event()
    targets = [cdn.url] + [r.url for r in cdn.replicas]  # through nginx and each replica

    def registrar():
        try:
            for gen in range(1, 17):  # about 8 s: the CDN's zarr.json moves every 2-3 s
                summary = put_store(targets[gen % len(targets)], name,
                                    constant_doc(gen, {"generation": gen}))
                generations[str(summary["version"])] = gen
                time.sleep(0.5)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            register_errors.append(repr(e))
        finally:
            stop.set()

    generations[str(put_store(cdn.url, name, constant_doc(0, {"generation": 0}))["version"])] = 0
    reads: list[tuple[str, int, int]] = []
    failures: list[str] = []

    def reader():
        while not stop.is_set():
            try:
                meta = get(cdn, f"/{name}/zarr.json")
                version = meta.headers["Zarrgate-Version"]
                attrs_gen = meta.json()["attributes"]["generation"]
                group = zarr.open_group(f"{cdn.url}/{name}@{version}", mode="r", zarr_format=3)
                values = group["v"][...]
                pinned_gen = group.attrs["generation"]
            except Exception as e:  # noqa: BLE001 - reported by the test
                failures.append(f"{type(e).__name__}: {e}")
                return
            distinct = np.unique(values)
            if len(distinct) != 1 or not (distinct[0] == attrs_gen == pinned_gen):
                failures.append(f"version {version}: zarr.json says generation {attrs_gen}, "
                                f"pinned metadata {pinned_gen}, chunks hold {distinct.tolist()}")
            reads.append((version, attrs_gen, int(distinct[0])))
            time.sleep(0.02)

    threads = [threading.Thread(target=registrar)] + [threading.Thread(target=reader)
                                                      for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a reader or the registrar hung"
    assert not register_errors, register_errors
    assert not failures, failures[:5]
    # every read was one whole version, and the one the registrar made under that number
    for version, attrs_gen, value in reads:
        assert generations[version] == attrs_gen == value, (version, attrs_gen, value)
    seen = {v for v, _, _ in reads}
    assert len(seen) >= 3, f"the readers saw only versions {seen}: registrations did not " \
                           "overlap the reads"


# ---------------------------------------------------------------------------------------------
# (f) a source rewritten in place


def _float_file_store(directory: Path, name: str, values: np.ndarray) -> tuple[dict, Path]:
    """float32 (4, 5), two chunks of (2, 5) stored contiguously in one file."""
    path = directory / f"{name}.f32"
    path.write_bytes(b"HEAD" + values.astype("<f4").tobytes())
    row = 2 * 5 * 4
    manifest = {f"{i}.0": {"path": str(path), "offset": 4 + i * row, "length": row}
                for i in range(2)}
    doc = {"nodes": {"": {"zarr_format": 3, "node_type": "group", "attributes": {}},
                     "t": array_node((4, 5), (2, 5), dtype="<f4", fill_value="NaN",
                                     manifest=manifest)}}
    return doc, path


def test_source_rewritten_in_place_gives_errors_never_other_numbers(cdn, sources, name):
    original = np.arange(20, dtype="<f4").reshape(4, 5)
    doc, path = _float_file_store(sources, name, original)
    v1 = put_store(cdn.url, name, doc)["version"]
    url = f"{cdn.url}/{name}"

    # chunk 0 read through the CDN before the rewrite, under both URLs
    assert get(cdn, f"/{name}/t/c/0/0").status_code == 200
    assert get(cdn, f"/{name}@{v1}/t/c/0/0").status_code == 200
    cached_at = time.monotonic()

    # the file is rewritten in place: same size, other numbers
    rewritten = original * 10 + 1
    with open(path, "r+b") as f:
        f.seek(4)
        f.write(rewritten.astype("<f4").tobytes())
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))

    # zarr-python raises (chunk 1 is not cached: zarrgate says 502 source-modified)
    with pytest.raises(aiohttp.ClientResponseError) as raised:
        zarr.open_group(url, mode="r", zarr_format=3)["t"][...]
    assert raised.value.status == 502
    resp = get(cdn, f"/{name}/t/c/1/0")
    assert resp.status_code == 502 and "source-modified" in resp.text
    # never cached: every request goes to a replica and gets the error again
    before = cdn.upstream_requests(f"/{name}/t/c/1/0")
    for _ in range(3):
        again = get(cdn, f"/{name}/t/c/1/0")
        assert again.status_code == 502 and cache_status(again) != "HIT"
    assert cdn.upstream_requests(f"/{name}/t/c/1/0") == before + 3
    assert get(cdn, f"/{name}@{v1}/t/c/1/0").status_code == 502

    # the pinned chunk cached before the rewrite keeps the bytes that were verified then
    pinned = get(cdn, f"/{name}@{v1}/t/c/0/0")
    assert cache_status(pinned) == "HIT"
    np.testing.assert_array_equal(np.frombuffer(pinned.content, "<f4"), original[:2].ravel())

    # once max-age has passed, the cached current-URL chunk is revalidated: zarrgate answers
    # If-None-Match from the manifest (its ETag names the source's recorded ETag, not the file
    # as it is now), so the CDN may keep the bytes verified at registration; what it must
    # never serve are the rewritten numbers
    time.sleep(max(0.0, EXPIRED - (time.monotonic() - cached_at)))
    expired = get(cdn, f"/{name}/t/c/0/0")
    assert expired.status_code in (200, 502), (expired.status_code, expired.text[:300])
    if expired.status_code == 200:
        np.testing.assert_array_equal(np.frombuffer(expired.content, "<f4"),
                                      original[:2].ravel())
    else:
        assert "source-modified" in expired.text
    with pytest.raises(aiohttp.ClientResponseError) as raised:
        xr.open_zarr(url, zarr_format=3).load()
    assert raised.value.status == 502

    # registering the file as it is now makes the new numbers readable: no error stuck
    put_store(cdn.url, name, doc)

    def readable():
        try:
            return np.array_equal(zarr.open_group(url, mode="r", zarr_format=3)["t"][...],
                                  rewritten)
        except aiohttp.ClientResponseError:
            return False

    wait_until(readable, NEW_VERSION_DEADLINE, "the re-registered store reads through the CDN")


# ---------------------------------------------------------------------------------------------
# (g) missing chunks as fill values


def test_missing_chunks_fill_reads_like_404_and_is_cached(cdn, name):
    fill = -7.5
    present = np.linspace(0, 1, 8, dtype="<f4").reshape(2, 4)
    codecs = [{"name": "bytes", "configuration": {"endian": "little"}},
              {"name": "gzip", "configuration": {"level": 5}}]
    manifest = {"0.0": inline(gzip.compress(present.tobytes()))}  # chunk 1.0 is missing
    doc = {"nodes": {"": {"zarr_format": 3, "node_type": "group", "attributes": {}},
                     "g": array_node((4, 4), (2, 4), dtype="<f4", fill_value=fill,
                                     codecs=codecs, manifest=manifest)}}
    as_404, as_fill = f"{name}-404", f"{name}-fill"
    put_store(cdn.url, as_404, doc)
    put_store(cdn.url, as_fill, doc, params={"missing_chunks": "fill"})

    expected = np.concatenate([present, np.full((2, 4), fill, dtype="<f4")])
    for store in (as_404, as_fill):
        got = zarr.open_group(f"{cdn.url}/{store}", mode="r", zarr_format=3)["g"][...]
        np.testing.assert_array_equal(got, expected, err_msg=store)
        http = HTTPStore.from_url(f"{cdn.url}/{store}", client_options={"allow_http": True})
        got = zarr.open_group(ObjectStore(http, read_only=True), mode="r",
                              zarr_format=3)["g"][...]
        np.testing.assert_array_equal(got, expected, err_msg=f"{store} (obstore)")

    # the fill chunk: a 200 that decodes to the fill value, cached like any chunk
    first = get(cdn, f"/{as_fill}/g/c/1/0")
    assert first.status_code == 200
    np.testing.assert_array_equal(np.frombuffer(gzip.decompress(first.content), "<f4"),
                                  np.full(8, fill, dtype="<f4"))
    again = get(cdn, f"/{as_fill}/g/c/1/0")
    assert (again.status_code, cache_status(again), again.content) == (200, "HIT", first.content)
    assert cdn.upstream_requests(f"/{as_fill}/g/c/1/0") == 1
    # the 404 of the other store is cached too
    missing = get(cdn, f"/{as_404}/g/c/1/0")
    assert (missing.status_code, cache_status(missing)) == (404, "HIT")
    assert cdn.upstream_requests(f"/{as_404}/g/c/1/0") == 1
