"""The README's netCDF-to-xarray example runs as written (only the server URL and the
folder are pointed at this test's server and temporary directory)."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def readme_example() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("## From a netCDF file to `xr.open_zarr`", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README lost its Python example"
    return match.group(1)


def test_readme_example_runs(server, tmp_path):
    code = readme_example()
    assert 'server = "http://127.0.0.1:8080"' in code
    assert 'folder = pathlib.Path("/tmp/zarrgate-demo")' in code
    code = code.replace('server = "http://127.0.0.1:8080"', f'server = "{server.url}"')
    code = code.replace('pathlib.Path("/tmp/zarrgate-demo")', f'pathlib.Path("{tmp_path}")')
    # Each catalog gets its own object store and store name.
    suffix = server.url.rsplit(":", 1)[1]
    for before, after in [('"demo-files"', f'"demo-files-{suffix}"'),
                          ('register(server, "air", vds)', f'register(server, "air-{suffix}", vds)'),
                          ('f"{server}/air"', f'f"{{server}}/air-{suffix}"')]:
        assert before in code, before
        code = code.replace(before, after)
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "air      (time, lat, lon) float32" in run.stdout, run.stdout
