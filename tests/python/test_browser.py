"""The store browser in a real browser: Debian's Chromium, driven by Playwright (launched from
/usr/bin/chromium; no browser is downloaded). The tree renders, an array's details and its
quick-look image load, the store's versions are listed with links to their pinned pages, a
store attribute that looks like a script stays text, and the
zarr-python and xarray snippets copied from the page run here and read the file's numbers.
"""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest
import xarray as xr

import fixtures
import zarrgate_client
from conftest import register
from virtual import virtual_dataset

playwright = pytest.importorskip("playwright.sync_api")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser():
    if not shutil.which(CHROMIUM):
        pytest.fail("chromium is not installed: scripts/test.sh installs it (apt-get install chromium)",
                    pytrace=False)
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def test_a_person_browses_a_store_and_a_snippet_reads_it(server, source_dir, store_name, browser):
    path = fixtures.make_netcdf4_air(source_dir)
    doc = zarrgate_client.manifeststore_to_native(virtual_dataset(path))
    doc["nodes"][""].setdefault("attributes", {})["history"] = "<script>alert(1)</script>"
    first = register(server, store_name, doc)["version"]
    current = register(server, store_name, doc, status=200)["version"]  # a second version

    page = browser.new_page()
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{server.url}/")
    assert page.locator(f"a[href='{store_name}/']").count() == 1, "the root page lists the store"
    page.click(f"a[href='{store_name}/']")
    page.wait_for_url(f"{server.url}/{store_name}/")

    # the tree, and the attribute that looks like a script shown as text
    tree = page.locator("nav")
    for name in ("air", "lat", "lon", "time"):
        assert tree.locator(f"a[href='{name}/']").count() == 1, name
    assert "<script>alert(1)</script>" in page.locator("section").inner_text()
    assert dialogs == []

    # the store's versions, newest first, the current one marked, each a link to its pinned page
    rows = page.locator("#versions tr").all_inner_texts()[1:]
    assert [r.split("\t")[0] for r in rows] == [f"{store_name}@{current}", f"{store_name}@{first}"], rows
    assert "current" in rows[0] and "current" not in rows[1], rows
    page.click(f"a[href='../{store_name}@{first}/']")
    page.wait_for_url(f"{server.url}/{store_name}@{first}/")
    assert "shown here" in page.locator("#versions tr").nth(2).inner_text()
    page.go_back()

    # an array's details and its quick look
    tree.locator("a[href='air/']").click()
    page.wait_for_url(f"{server.url}/{store_name}/air/")
    details = page.locator("table").first.inner_text()
    for fact in ("[4, 5, 6]", "float32", "[2, 3, 4]", '["time","lat","lon"]', "zlib"):
        assert fact in details, (fact, details)
    assert "virtual" in details and "missing" in details
    page.wait_for_function("() => { const i = document.querySelector('figure img');"
                           " return i && i.complete && i.naturalWidth > 0 }")
    assert page.locator("figure img").evaluate("i => [i.naturalWidth, i.naturalHeight]") == [256, 192 + 12]
    page.wait_for_function("() => document.getElementById('scale').textContent.includes('\u2013')")
    low, high = (float(x) for x in page.locator("#scale").inner_text().split("\u2013"))
    with h5py.File(path) as f:
        raw = f["air"][...]
    first = raw[0, :3, :4]
    assert (low, high) == (first[first != -9999.0].min(), first.max())

    # the snippets, copied from the page, run and read the file's numbers
    zarr_code = page.locator("#snippet-zarr").inner_text()
    scope: dict = {}
    exec(zarr_code, scope)
    np.testing.assert_array_equal(scope["values"], raw)
    xarray_code = page.locator("#snippet-xarray").inner_text()
    scope = {}
    exec(xarray_code, scope)
    with xr.open_dataset(path, engine="h5netcdf") as expected:
        np.testing.assert_array_equal(scope["values"], expected["air"].values)
    assert dialogs == []
    page.close()
