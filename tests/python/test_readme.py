"""The README's code blocks run as written against a real server: the walkthrough (Python)
and the shell block (the command line and curl), each found by the marker line
``<!-- readme-test: NAME -->`` above it. They run from a directory outside the repository, with
the client installed by pip from ``clients/python`` as the README says, and ``zarrgate`` on
PATH. Only the server's address is pointed at this test's server, and the shell block's demo
folder at the one the walkthrough printed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from conftest import REPO, Server, _binary

README = REPO / "README.md"


def block(name: str) -> tuple[str, str]:
    """The language and the code of the fenced block under ``<!-- readme-test: name -->``."""
    marker = f"<!-- readme-test: {name} -->\n"
    text = README.read_text()
    assert marker in text, f"README.md lost the marker of its {name} block: {marker!r}"
    found = re.match(r"```(\w+)\n(.*?)^```", text.split(marker, 1)[1], re.S | re.M)
    assert found, f"no fenced code block right under {marker!r}"
    return found.group(1), found.group(2)


def replace(code: str, before: str, after: str) -> str:
    assert before in code, f"the README's block no longer has {before!r}"
    return code.replace(before, after)


@pytest.fixture(scope="module")
def installed_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install clients/python`` into a directory of its own (the test environment has
    the client's dependencies already)."""
    target = tmp_path_factory.mktemp("site-packages")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check",
                           "--quiet", "--no-deps", "--target", str(target), str(REPO / "clients" / "python")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"pip install clients/python failed:\n{done.stdout}\n{done.stderr}"
    assert (target / "zarrgate_client.py").exists()
    return target


def python_block(name: str, server: Server, tmp_path: Path, installed_client: Path) -> tuple[str, Path, dict]:
    """The Python block ``name`` pointed at ``server``, a directory outside the repository to
    run it in, and its environment (the installed client, no ZARRGATE_ variables)."""
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRGATE_") and k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(installed_client), TMPDIR=str(tmp_path))
    language, code = block(name)
    assert language == "python"
    return replace(code, 'server = "http://127.0.0.1:8080"', f'server = "{server.url}"'), workdir, env


def walkthrough_python() -> str:
    """The interpreter of the walkthrough's own small environment, as the README makes it
    (scripts/python-env-walkthrough.sh; scripts/test-python.sh passes it)."""
    python = os.environ.get("ZARRGATE_WALKTHROUGH_PYTHON")
    if not python or not os.access(python, os.X_OK):
        pytest.fail("ZARRGATE_WALKTHROUGH_PYTHON names no interpreter: run through scripts/test-python.sh, "
                    "or set it to the python of scripts/python-env-walkthrough.sh", pytrace=False)
    return python


def test_the_readme_blocks_run(server: Server, tmp_path: Path, installed_client: Path):
    code, workdir, env = python_block("walkthrough", server, tmp_path, installed_client)
    # In the README's small environment, without this test's client on the path: what it
    # installed is what runs.
    env.pop("PYTHONPATH", None)
    run = subprocess.run([walkthrough_python(), "-c", code], cwd=workdir, env=env, capture_output=True,
                         text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    assert "air      (time, lat, lon) float32" in run.stdout, run.stdout
    demo = Path(re.search(r"^DEMO=(.+)$", run.stdout, re.M).group(1))
    # a folder of its own for each run, where the system puts temporary files
    assert demo.parent == tmp_path and demo.name.startswith("zarrgate-demo-"), demo
    manifest = json.loads((demo / "manifest.json").read_text())
    assert set(manifest["nodes"]) >= {"", "air", "lat", "lon", "time"}

    language, shell = block("shell")
    assert language == "sh"
    shell = replace(shell, "DEMO=/tmp/zarrgate-demo-xxxxxxxx", f"DEMO={demo}")
    shell = replace(shell, "localhost:8080", urlsplit(server.url).netloc)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "zarrgate").symlink_to(_binary())
    env.update(PATH=f"{bin_dir}:{env['PATH']}", ZARRGATE_SERVER=server.url)
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", shell], cwd=workdir, env=env,
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    out = run.stdout
    assert f"file://{demo}/" in out, out
    assert "registered air-cli (new store), version" in out, out
    assert "4 arrays" in out, out  # air, and the coordinates lat, lon, time
    assert "deleted store air-cli" in out, out
    assert f"registered air-file from file://{demo}/air.nc, version" in out, out
    refs = json.loads((demo / "refs.json").read_text())
    assert refs["version"] == 1 and "air/.zarray" in refs["refs"], sorted(refs["refs"])[:10]
    # curl: the registration's summary, then the store's zarr.json (curl adds no newline)
    tail, decoder, answers = out.split("deleted store air-cli\n", 1)[1], json.JSONDecoder(), []
    while tail.strip():
        answer, end = decoder.raw_decode(tail.strip())
        answers.append(answer)
        tail = tail.strip()[end:]
    summary, zarr_json = answers
    assert summary["name"] == "air-curl" and summary["arrays"] == 4, summary
    assert zarr_json["node_type"] == "group" and "air" in zarr_json["consolidated_metadata"]["metadata"]


def test_the_icechunk_readme_block_runs(server: Server, tmp_path: Path, installed_client: Path):
    """The Icechunk walkthrough, in the Icechunk 2.x environment it names."""
    from test_icechunk import writer_python

    code, workdir, env = python_block("icechunk", server, tmp_path, installed_client)
    run = subprocess.run([writer_python(2), "-c", code], cwd=workdir, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    # Icechunk 2.3 warns (Python DeprecationWarning, and its Rust log) on deprecated calls.
    assert "deprecat" not in run.stderr.lower(), run.stderr
    assert "'branch': 'main'" in run.stdout and "'format_version': 2" in run.stdout, run.stdout
    assert "air      (time, lat) float32" in run.stdout, run.stdout
    assert run.stdout.rstrip().endswith("True"), run.stdout
