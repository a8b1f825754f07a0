"""zarrita.js, the JavaScript Zarr reader of web viewers, from npm (tests/js, pinned by its
package-lock.json, installed by scripts/js-env.sh) in Node: it reads a slice of a netCDF4 file's
store as Zarr v3 and as the Zarr v2 view (at its own URL, ``/v2/<store>``), and the zarrita.js snippet of the store browser's
page, run as it is shown, reads the whole array (with read tokens too, the token where the
snippet puts it). Every number is compared with h5py's. zarrita sends plain GETs of
``zarr.json``, ``.zarray``/``.zattrs`` and chunk keys: nothing more is asked of the server.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest
import requests

import fixtures
import zarrgate_client
from conftest import REPO, private_server, register
from virtual import virtual_dataset

NODE = shutil.which("node")
READER = REPO / "tests" / "js" / "read.mjs"
HTML = "text/html,application/xhtml+xml,*/*;q=0.8"


@pytest.fixture(scope="session")
def js_env() -> Path:
    """The directory whose node_modules holds zarrita: $ZARRGATE_JS_ENV when scripts/test-python.sh
    made it, else scripts/js-env.sh (cached in ~/.cache/zarrgate)."""
    if NODE is None:
        pytest.fail("node is not installed: the zarrita.js tests need Node 20 or newer", pytrace=False)
    if os.environ.get("ZARRGATE_JS_ENV"):
        return Path(os.environ["ZARRGATE_JS_ENV"])
    done = subprocess.run([str(REPO / "scripts" / "js-env.sh")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"scripts/js-env.sh failed:\n{done.stderr[-5000:]}"
    return Path(done.stdout.strip().splitlines()[-1])


def node(js_env: Path, workdir: Path, script: str, *args: str) -> dict:
    """Runs ``script`` (module text) with Node beside zarrita's node_modules; its last line of
    output, parsed as JSON."""
    workdir.mkdir(exist_ok=True)
    if not (workdir / "node_modules").exists():
        (workdir / "node_modules").symlink_to(js_env / "node_modules")
    path = workdir / f"script-{len(list(workdir.glob('script-*')))}.mjs"
    path.write_text(script)
    done = subprocess.run([NODE, str(path), *args], capture_output=True, text=True, timeout=120, cwd=workdir)
    assert done.returncode == 0, f"node {path.name} failed ({done.returncode}):\n{script}\n{done.stderr[-5000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def read(js_env: Path, workdir: Path, url: str, array: str, fmt: str, selection: list) -> dict:
    return node(js_env, workdir, READER.read_text(), url, array, fmt, json.dumps(selection))


@pytest.fixture
def air(server, source_dir, store_name):
    """A netCDF4 file (zlib + shuffle, -9999 fill values) virtualized by VirtualiZarr and
    registered: its store URL and h5py's values of ``air``."""
    path = fixtures.make_netcdf4_air(source_dir)
    register(server, store_name, zarrgate_client.manifeststore_to_native(virtual_dataset(path)))
    with h5py.File(path) as f:
        return f"{server.url}/{store_name}", f["air"][...]


@pytest.mark.parametrize("fmt", ["v3", "v2"])
def test_zarrita_reads_a_slice_as_the_file_holds_it(air, js_env, tmp_path, fmt):
    url, raw = air
    if fmt == "v2":
        origin, store = url.rsplit("/", 1)
        url = f"{origin}/v2/{store}"
    got = read(js_env, tmp_path, url, "air", fmt, [[1, 3], None, [2, 6]])
    assert got["dtype"] == "float32"
    assert got["array_shape"] == list(raw.shape) and got["chunks"] == [2, 3, 4]
    expected = raw[1:3, :, 2:6]
    assert got["shape"] == list(expected.shape)
    np.testing.assert_array_equal(np.array(got["data"], dtype=np.float32).reshape(got["shape"]), expected)
    # a slice across chunk edges that holds the fill values (-9999 at [0, 0, :3])
    edge = read(js_env, tmp_path, url, "air", fmt, [[0, 1], [0, 1], None])
    np.testing.assert_array_equal(np.array(edge["data"], dtype=np.float32), raw[0, 0, :])
    assert -9999.0 in edge["data"]


def snippet(page: str, name: str) -> str:
    found = re.search(rf'<pre id="snippet-{name}"[^>]*>(.*?)</pre>', page, re.S)
    assert found, f"no {name} snippet on the page"
    return html.unescape(found.group(1))


def test_the_pages_zarrita_snippet_runs_as_shown(air, js_env, tmp_path):
    url, raw = air
    page = requests.get(f"{url}/air/", headers={"Accept": HTML}, timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    code = snippet(page.text, "zarrita")
    assert f'new zarr.FetchStore("{url}")' in code, code
    got = node(js_env, tmp_path, code + "console.log(JSON.stringify({ shape, data: Array.from(data) }));\n")
    assert got["shape"] == list(raw.shape)
    np.testing.assert_array_equal(np.array(got["data"], dtype=np.float32).reshape(raw.shape), raw)

    # the group's snippet opens the root group
    root = requests.get(f"{url}/", headers={"Accept": HTML}, timeout=30)
    code = snippet(root.text, "zarrita")
    got = node(js_env, tmp_path, code + "console.log(JSON.stringify({ attrs: node.attrs, kind: node.kind }));\n")
    assert got["attrs"]["title"] == "zarrgate test: air temperature", got


def test_the_snippet_with_a_read_token_reads_what_needs_one(tmp_path, js_env):
    """With read tokens, the page's snippet says where the token goes; with the token put there,
    it reads the data, and without, zarrita fails (401), never reads fill values."""
    (tmp_path / "src").mkdir()
    path = fixtures.make_netcdf4_air(tmp_path / "src")
    token = "reader-token-for-zarrita-0123456789"
    with private_server(tmp_path, ZARRGATE_READ_TOKENS=token) as (url, _log):
        zarrgate_client.register_object_store(url, "src", (tmp_path / "src").as_uri() + "/")
        doc = zarrgate_client.manifeststore_to_native(virtual_dataset(path))
        assert requests.put(f"{url}/api/v1/stores/air", data=json.dumps(doc), timeout=60).status_code == 201
        auth = {"Authorization": f"Bearer {token}"}
        page = requests.get(f"{url}/air/air/", headers={"Accept": HTML, **auth}, timeout=30)
        code = snippet(page.text, "zarrita")
        assert "Bearer <read token>" in code, code
        show = "console.log(JSON.stringify({ shape, data: Array.from(data) }));\n"
        got = node(js_env, tmp_path / "js", code.replace("<read token>", token) + show)
        with h5py.File(path) as f:
            raw = f["air"][...]
        np.testing.assert_array_equal(np.array(got["data"], dtype=np.float32).reshape(got["shape"]), raw)
        script = tmp_path / "js" / "no-token.mjs"
        script.write_text(code.replace("<read token>", "wrong") + show)
        done = subprocess.run([NODE, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path / "js")
        assert done.returncode != 0 and "401" in done.stderr, done.stderr[-2000:]
