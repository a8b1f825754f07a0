"""The store browser in a real browser: Debian's Chromium, driven by Playwright (launched from
/usr/bin/chromium; no browser is downloaded). The tree renders, an array's details and its
quick-look image load, the store's versions are listed with links to their pinned pages, a
store attribute that looks like a script stays text, and the
zarr-python and xarray snippets copied from the page run here and read the file's numbers.
"""

from __future__ import annotations

import base64
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
    assert page.locator(f"a[href='./{store_name}/']").count() == 1, "the root page lists the store"
    page.click(f"a[href='./{store_name}/']")
    page.wait_for_url(f"{server.url}/{store_name}/")

    # the tree, and the attribute that looks like a script shown as text
    tree = page.locator("nav")
    for name in ("air", "lat", "lon", "time"):
        assert tree.locator(f"a[href='./{name}/']").count() == 1, name
    assert "<script>alert(1)</script>" in page.locator("section").inner_text()
    assert dialogs == []

    # the store's versions, newest first, the current one marked, each a link to its pinned page
    rows = page.locator("#versions tr").all_inner_texts()[1:]
    assert [r.split("\t")[0] for r in rows] == [f"{store_name}@{current}", f"{store_name}@{first}"], rows
    assert "current" in rows[0] and "current" not in rows[1], rows
    page.click(f"a[href='./../{store_name}@{first}/']")
    page.wait_for_url(f"{server.url}/{store_name}@{first}/")
    assert "shown here" in page.locator("#versions tr").nth(2).inner_text()
    page.go_back()

    # an array's details and its quick look
    tree.locator("a[href='./air/']").click()
    page.wait_for_url(f"{server.url}/{store_name}/air/")
    details = page.locator("table").first.inner_text()
    for fact in ("[4, 5, 6]", "float32", "[2, 3, 4]", '["time","lat","lon"]', "zlib"):
        assert fact in details, (fact, details)
    assert "virtual" in details and "missing" in details
    page.wait_for_function("() => { const i = document.querySelector('figure img');"
                           " return i && i.complete && i.naturalWidth > 0 }")
    # an overview of the whole first 2-D slice (lat 5 x lon 6, from all 4 of its chunks), 42 px a
    # value, with the 12-px colour bar under it
    assert page.locator("figure img").evaluate("i => [i.naturalWidth, i.naturalHeight]") == [6 * 42, 5 * 42 + 12]
    page.wait_for_function("() => document.getElementById('scale').textContent.includes('\u2013')")
    caption = page.locator("#scale").inner_text()
    low, rest = caption.split(" \u2013 ", 1)
    high = rest.split()[0].rstrip(";")
    with h5py.File(path) as f:
        raw = f["air"][...]
    first = raw[0]
    shown = first[first != -9999.0]
    # to four significant digits, as a person reads them
    assert float(low) == pytest.approx(shown.min(), rel=1e-3) and float(high) == pytest.approx(shown.max(), rel=1e-3), caption
    assert "rows: lat" in caption and "columns: lon" in caption, caption

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


# Names any HDF5 or netCDF file can give its groups; each would run script on a page that wrote
# it raw (the first as a link's scheme, the others as markup or in a quoted attribute).
HOSTILE = [
    "javascript:alert(document.domain)<!--",
    '"><img src=x onerror=alert(1)>',
    "'><svg onload=alert(2)>",
    "a b?c#d%e&f",
    "\u00e9t\u00e9 \u6570\u636e",
]

# Runs before each document's own scripts (Playwright injects it whatever the page's policy):
# records every policy violation, and whether anything set the flag an injected script would.
WATCH = """
window.__violations = [];
document.addEventListener('securitypolicyviolation',
    e => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI + ' ' + (e.sample || '')));
"""


def test_hostile_node_names_run_no_script(server, store_name, browser):
    inline = base64.b64encode(np.arange(12, dtype="<f4").tobytes()).decode()
    nodes = {"": {"zarr_format": 3, "node_type": "group",
                  "attributes": {"note": "<script>window.__pwned = 1</script>"}}}
    for name in HOSTILE:
        nodes[name] = {"zarr_format": 3, "node_type": "group",
                       "attributes": {"title": f"<img src=x onerror=alert(3)> {name}"}}
        nodes[f"{name}/t"] = {
            "zarr_format": 3, "node_type": "array", "shape": [3, 4], "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3, 4]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": "NaN",
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "dimension_names": ["y", "x"], "manifest": {"0.0": {"data": inline}}}
    register(server, store_name, {"nodes": nodes})

    context = browser.new_context()
    context.add_init_script(WATCH)
    page = context.new_page()
    dialogs, errors = [], []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    def visit(url: str, status: int = 200) -> None:
        response = page.goto(url)
        assert response.status == status, url
        headers = response.headers
        policy = headers.get("content-security-policy", "")
        for part in ("default-src 'none'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'"):
            assert part in policy, (url, policy)
        assert "unsafe" not in policy, policy
        assert headers.get("x-content-type-options") == "nosniff", url
        settle(url)

    def settle(url: str) -> None:
        page.wait_for_load_state("load")
        assert dialogs == [], (url, dialogs)
        assert page.evaluate("() => window.__violations") == [], (url, page.evaluate("() => window.__violations"))
        assert page.evaluate("() => window.__pwned") is None, url
        assert [e for e in errors if "Content Security Policy" in e or "Refused" in e] == [], (url, errors)

    store = f"{server.url}/{store_name}/"
    visit(store)
    # the tree names every group as text
    tree = page.locator("nav").inner_text()
    for name in HOSTILE:
        assert name in tree, (name, tree)
    assert page.locator("nav img, section img, svg").count() == 0, "a name became an element"
    # every link of the store's page, clicked: each lands on a page of this server, and no
    # script of a name runs there
    hrefs = page.eval_on_selector_all("a[href]", "as => as.map(a => a.getAttribute('href'))")
    assert len(hrefs) >= 2 * len(HOSTILE), hrefs
    for href in hrefs:
        visit(store)
        link = page.locator(f'a[href="{href}"]').first
        with page.expect_navigation():
            link.click()
        assert page.url.startswith(server.url + "/"), (href, page.url)
        settle(page.url)

    # a group named like a javascript: link, and its array: the page renders under the policy,
    # the quick look loads and the page's script fills in its scale
    group = page.locator("nav a", has_text=HOSTILE[0]).first
    visit(store)
    with page.expect_navigation():
        group.click()
    assert page.locator("h2").inner_text() == f"Group {HOSTILE[0]}"
    with page.expect_navigation():
        page.locator("section a", has_text="t/").first.click()
    assert page.locator("h2").inner_text() == f"Array {HOSTILE[0]}/t"
    page.wait_for_function("() => { const i = document.querySelector('figure img');"
                           " return i && i.complete && i.naturalWidth > 0 }")
    page.wait_for_function("() => document.getElementById('scale').textContent.includes('\u2013')")
    assert page.locator("#scale").inner_text() == "0 \u2013 11"
    assert page.locator("nav li.here").count() == 1
    settle(page.url)

    # an error page: the problem as text, its link back to the store works
    visit(f"{store}{HOSTILE[1].replace('<', '%3C').replace('>', '%3E')}/nothing/", status=404)
    assert "no group or array at" in page.locator("#detail").inner_text()
    with page.expect_navigation():
        page.click("#store")
    assert page.url == store
    settle(page.url)
    context.close()
