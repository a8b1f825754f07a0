"""The ``zarrgate`` command line, end to end: the real binary against a real server.

* The server's flags work on ``zarrgate`` as on ``zarrgate serve``.
* ``zarrgate config`` prints TOML without its secrets, which ``--config`` reads back: the same
  configuration printed again, and a server that starts from it.
* The operator's commands (``stores``, ``object-stores``) against the ``server`` fixture: a
  manifest put with its progress bar drawn on a terminal (a pseudo-terminal here) and nothing
  on stderr when it is a file; list, show, ``--json``, export (registered again, same bytes),
  verify (exit 1 once a source changed), patch, delete; a refused put's exit status and every
  problem on its own line; a server with admin tokens (``ZARRGATE_TOKEN``), and no server.
* Several data files as one store: a glob put with ``--join existing:time`` reads back as the
  joined files; a malformed ``--join`` exits non-zero naming it, and registers nothing.
* A glob put with ``--follow 10m`` is rescanned: ``stores sync`` says which files were added;
  ``--follow`` with a list of files is refused before any request.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import termios
import time
import tomllib
import uuid
from pathlib import Path

import pytest
import requests

from conftest import LISTENING, STARTUP_TIMEOUT, Server, _binary, private_server

TOKEN = "cli-test-admin-token-0123"


def env_without_zarrgate(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRGATE_") and k != "DATABASE_URL"}
    env.update(NO_COLOR="1", **extra)
    return env


def zarrgate(*args: str, server: str | None = None, token: str | None = None,
             stderr=subprocess.PIPE, **extra: str) -> subprocess.CompletedProcess:
    env = env_without_zarrgate(**extra)
    if server:
        env["ZARRGATE_SERVER"] = server
    if token:
        env["ZARRGATE_TOKEN"] = token
    return subprocess.run([str(_binary()), *args], env=env, stdout=subprocess.PIPE, stderr=stderr,
                          stdin=subprocess.DEVNULL, text=True, timeout=120)


def ok(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == 0, f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    return run.stdout


# --------------------------------------------------------------------------
# the server's flags, and `zarrgate config`
# --------------------------------------------------------------------------

def started(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    """``zarrgate ARGS``, once it logs that it listens (it is killed if it never does)."""
    with open(log, "wb") as sink:
        proc = subprocess.Popen([str(_binary()), *args], env=env, stdout=sink, stderr=sink,
                                stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not LISTENING.search(log.read_text(errors="replace")):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"zarrgate {' '.join(args)} did not start:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=30)


@pytest.mark.parametrize("command", [[], ["serve"]], ids=["zarrgate", "zarrgate-serve"])
def test_the_server_flags_work_with_and_without_serve(tmp_path: Path, command: list[str]):
    args = [*command, "--listen", "127.0.0.1:0", "--database-url", f"sqlite://{tmp_path / 'c.db'}"]
    proc = started(args, env_without_zarrgate(), tmp_path / "log")
    try:
        url = LISTENING.search((tmp_path / "log").read_text()).group(1)
        assert requests.get(f"{url}/readyz", timeout=10).json() == {"status": "ready", "catalog": "sqlite"}
    finally:
        stop(proc)
    assert (tmp_path / "c.db").exists()


def test_the_help_says_both_ways_of_serving():
    text = ok(zarrgate("--help"))
    assert "`zarrgate --listen 0.0.0.0:8080` and `zarrgate serve --listen 0.0.0.0:8080` are one command" in text
    assert "--listen <LISTEN>" in text and "stores" in text and "object-stores" in text


def test_config_prints_toml_without_secrets_that_the_server_reads_back(tmp_path: Path):
    given = tmp_path / "given.toml"
    given.write_text('[cache]\nblocks_bytes = 12345\n\n[[object_stores]]\nname = "bucket"\n'
                     'url = "s3://bucket/prefix/"\n'
                     'options = {region = "eu-west-1", secret_access_key = "s3-secret-value", '
                     'access_key_id = "AKIAEXAMPLE"}\n')
    env = dict(ZARRGATE_ADMIN_TOKENS=TOKEN, ZARRGATE_READ_TOKENS="cli-test-read-token-0123",
               DATABASE_URL=f"sqlite://{tmp_path / 'catalog.db'}", ZARRGATE_HTTP_MAX_AGE_SECONDS="7")
    printed = ok(zarrgate("config", "--config", str(given), "--listen", "127.0.0.1:0", **env))
    for secret in (TOKEN, "cli-test-read-token-0123", "s3-secret-value"):
        assert secret not in printed, printed
    assert "admin_tokens: 1 token(s) left out; give them in ZARRGATE_ADMIN_TOKENS" in printed, printed
    parsed = tomllib.loads(printed)
    assert parsed["listen"] == "127.0.0.1:0"
    assert parsed["cache"]["blocks_bytes"] == 12345 and parsed["http"]["max_age_seconds"] == 7
    assert parsed["object_stores"][0]["options"] == {
        # as the API shows it: an access key id is not a secret, its secret key is
        "region": "eu-west-1", "secret_access_key": "***", "access_key_id": "AKIAEXAMPLE"}

    # Fed back with the same environment: the same configuration, and a server that serves it.
    again = tmp_path / "printed.toml"
    again.write_text(printed)
    assert ok(zarrgate("config", "--config", str(again), **env)) == printed
    proc = started(["--config", str(again)], env_without_zarrgate(**env), tmp_path / "log")
    try:
        url = LISTENING.search((tmp_path / "log").read_text()).group(1)
        assert requests.get(f"{url}/api/v1/object-stores", timeout=10).status_code == 401
        listed = requests.get(f"{url}/api/v1/object-stores", headers={"Authorization": f"Bearer {TOKEN}"},
                              timeout=10).json()["object_stores"]
        assert [(o["name"], o["url"], o["origin"]) for o in listed] == [
            ("bucket", "s3://bucket/prefix/", "config")]
    finally:
        stop(proc)


# --------------------------------------------------------------------------
# the operator's commands
# --------------------------------------------------------------------------

CHUNKS = 64                    # chunks of 16 KiB (4096 float32) in one source file: 1 MiB
CHUNK_VALUES = 4096


def write_source(directory: Path) -> Path:
    data = directory / "values.bin"
    data.write_bytes(b"".join(struct.pack(f"<{CHUNK_VALUES}f", *[float(c)] * CHUNK_VALUES)
                              for c in range(CHUNKS)))
    return data


def manifest(data: Path, extra_keys: dict | None = None, extra_codecs: tuple = ()) -> dict:
    refs = {f"{c}": {"path": str(data), "offset": c * CHUNK_VALUES * 4, "length": CHUNK_VALUES * 4}
            for c in range(CHUNKS)}
    refs.update(extra_keys or {})
    return {"nodes": {
        "": {"zarr_format": 3, "node_type": "group", "attributes": {"title": "cli"}},
        "values": {"zarr_format": 3, "node_type": "array", "shape": [CHUNKS * CHUNK_VALUES],
                   "data_type": "float32",
                   "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [CHUNK_VALUES]}},
                   "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                   "fill_value": 0.0,
                   "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                              *({"name": name} for name in extra_codecs)],
                   "dimension_names": ["x"], "manifest": refs}}}


def put_with_a_terminal(args: list[str], env: dict) -> tuple[int, str, str]:
    """Runs ``zarrgate ARGS`` with stderr on a pseudo-terminal: the exit status, stdout, and
    what the terminal showed."""
    leader, follower = pty.openpty()
    # a terminal of 40 lines and 200 columns: the bar is drawn whole
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
    proc = subprocess.Popen([str(_binary()), *args], env=env, stdout=subprocess.PIPE,
                            stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    shown = b""
    while True:
        try:
            piece = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process is done with it
            break
        if not piece:
            break
        shown += piece
    stdout = proc.stdout.read().decode()
    os.close(leader)
    return proc.wait(timeout=60), stdout, shown.decode(errors="replace")


def test_the_operator_commands_end_to_end(server: Server, tmp_path: Path):
    sources = (tmp_path / "sources").resolve()
    sources.mkdir()
    data = write_source(sources)
    files = f"cli-files-{uuid.uuid4().hex[:8]}"
    store = f"cli-store-{uuid.uuid4().hex[:8]}"
    at = dict(server=server.url)

    # object stores: put, list, show
    out = ok(zarrgate("object-stores", "put", files, f"file://{sources}/", **at))
    assert out.startswith(f"registered object store {files} (new): file://{sources}/ (api)"), out
    listed = ok(zarrgate("object-stores", "list", **at))
    assert re.search(rf"^{files}\s+file://{sources}/\s+api$", listed, re.M), listed
    shown = json.loads(ok(zarrgate("object-stores", "show", files, "--json", **at)))
    assert shown == {"name": files, "url": f"file://{sources}/", "options": {}, "origin": "api"}

    # put, with the progress bar on a terminal
    document = tmp_path / "manifest.json"
    document.write_text(json.dumps(manifest(data), indent=1))
    size = document.stat().st_size
    status, stdout, terminal = put_with_a_terminal(
        ["stores", "put", store, str(document)], env_without_zarrgate(ZARRGATE_SERVER=server.url))
    assert status == 0, (stdout, terminal)
    assert "manifest.json" in terminal and "KiB" in terminal and "left" in terminal, terminal
    total = f"{size / 1024:.2f} KiB"
    assert f"{total}/{total}" in terminal, (total, terminal)
    assert stdout.startswith(f"registered {store} (new store), version "), stdout
    assert f"1 array, 1 group; chunks: {CHUNKS} virtual, 0 inline, 0 missing" in stdout, stdout
    assert "1 source, 1.00 MiB referenced, 0 B inline; missing chunks answer 404" in stdout, stdout

    # put again, stderr to a file: no progress bar in it, the summary on stdout
    with open(tmp_path / "stderr.txt", "w") as log:
        again = zarrgate("stores", "put", store, str(document), stderr=log, **at)
    assert again.returncode == 0 and f"registered {store} (replaced), version" in again.stdout
    assert (tmp_path / "stderr.txt").read_text() == ""

    # list and show, as text and as JSON
    listed = ok(zarrgate("stores", "list", **at))
    assert listed.splitlines()[0].split() == ["NAME", "VERSION", "ARRAYS", "CHUNKS", "REFERENCED", "UPDATED"]
    row = next(line.split() for line in listed.splitlines() if line.startswith(store + " "))
    assert row[2:6] == ["1", str(CHUNKS), "1.00", "MiB"], row
    summary = json.loads(ok(zarrgate("stores", "show", store, "--json", **at)))
    assert summary == requests.get(f"{server.url}/api/v1/stores/{store}", timeout=10).json()
    assert summary["chunks"] == {"virtual": CHUNKS, "inline": 0, "assembled": 0, "missing": 0}
    text = ok(zarrgate("stores", "show", store, **at))
    assert text.startswith(f"store {store}, version {summary['version']}: {server.url}/{store}\n"), text

    # export, and the export registered again serves the same bytes
    exported = tmp_path / "exported.json"
    ok(zarrgate("stores", "export", store, "-o", str(exported), **at))
    copy = f"{store}-copy"
    ok(zarrgate("stores", "put", copy, str(exported), **at))
    for key in ("zarr.json", "values/zarr.json", "values/c/0", f"values/c/{CHUNKS - 1}"):
        original = requests.get(f"{server.url}/{store}/{key}", timeout=10)
        assert original.status_code == 200
        assert requests.get(f"{server.url}/{copy}/{key}", timeout=10).content == original.content, key
    assert struct.unpack("<f", requests.get(f"{server.url}/{copy}/values/c/5", timeout=10).content[:4]) == (5.0,)
    kerchunk = json.loads(ok(zarrgate("stores", "export", store, "--format", "kerchunk", **at)))
    assert kerchunk["version"] == 1
    assert kerchunk["refs"]["values/5"] == [str(data), 5 * CHUNK_VALUES * 4, CHUNK_VALUES * 4]

    # patch: one chunk inline
    patch = tmp_path / "patch.json"
    inline = struct.pack(f"<{CHUNK_VALUES}f", *[-1.0] * CHUNK_VALUES)
    patch.write_text(json.dumps({"nodes": {"values": {"manifest": {
        "3": {"data": base64.b64encode(inline).decode()}}}}}))
    out = ok(zarrgate("stores", "patch", store, str(patch), **at))
    assert out.startswith(f"patched {store}, version "), out
    assert f"chunks: {CHUNKS - 1} virtual, 1 inline, 0 missing" in out, out
    assert requests.get(f"{server.url}/{store}/values/c/3", timeout=10).content == inline
    # patch --if-match: a stale version is refused (412) and changes nothing; the current one applies
    current = json.loads(ok(zarrgate("stores", "show", store, "--json", **at)))["version"]
    stale = zarrgate("stores", "patch", store, str(patch), "--if-match", str(current - 1), **at)
    assert stale.returncode == 1 and "error: 412 Precondition Failed" in stale.stderr, stale
    assert f"is at version {current}" in stale.stderr, stale.stderr
    assert json.loads(ok(zarrgate("stores", "show", store, "--json", **at)))["version"] == current
    out = ok(zarrgate("stores", "patch", store, str(patch), "--if-match", f'"v{current}"', **at))
    assert out.startswith(f"patched {store}, version "), out

    # verify: all ok, then a rewritten source is named and the exit status is 1
    out = ok(zarrgate("stores", "verify", store, **at))
    assert re.match(rf"{store} version \d+: 1 ok, 0 modified, 0 missing, 0 errors, 0 unverified\n$", out), out
    data.write_bytes(data.read_bytes() + b"more")
    changed = zarrgate("stores", "verify", store, **at)
    assert changed.returncode == 1, changed
    assert "0 ok, 1 modified" in changed.stdout and f"modified   file://{data}" in changed.stdout, changed.stdout

    # the recovery a 502 source-modified names: the export put again, re-recording the source
    read = requests.get(f"{server.url}/{store}/values/c/5", timeout=10)
    assert read.status_code == 502 and "--record-sources" in read.json()["detail"], read.text
    ok(zarrgate("stores", "export", store, "-o", str(exported), **at))
    refused = zarrgate("stores", "put", store, str(exported), **at)
    assert refused.returncode == 1 and "changed since the manifest was made" in refused.stderr, refused
    out = ok(zarrgate("stores", "put", store, str(exported), "--record-sources", **at))
    assert f"registered {store} (replaced), version" in out, out
    assert ok(zarrgate("stores", "verify", store, **at)).count("1 ok, 0 modified") == 1
    assert struct.unpack("<f", requests.get(f"{server.url}/{store}/values/c/5", timeout=10).content[:4]) == (5.0,)

    # delete: gone, and showing it fails naming it
    assert ok(zarrgate("stores", "delete", copy, **at)) == f"deleted store {copy}\n"
    gone = zarrgate("stores", "show", copy, **at)
    assert gone.returncode == 1 and f'error: 404 Not Found: no store is named "{copy}"' in gone.stderr, gone
    ok(zarrgate("stores", "delete", store, **at))
    assert json.loads(ok(zarrgate("object-stores", "delete", files, "--json", **at))) == {"deleted": files}
    assert files not in ok(zarrgate("object-stores", "list", **at))


def test_a_refused_put_exits_1_with_every_problem_and_stores_nothing(server: Server, tmp_path: Path):
    sources = (tmp_path / "sources").resolve()
    sources.mkdir()
    data = write_source(sources)
    files = f"cli-refused-{uuid.uuid4().hex[:8]}"
    store = f"cli-refused-{uuid.uuid4().hex[:8]}"
    ok(zarrgate("object-stores", "put", files, f"file://{sources}/", server=server.url))
    bad = manifest(data, extra_keys={"999": {"path": str(data), "offset": 0, "length": 4}},
                   extra_codecs=("no-such-codec",))
    document = tmp_path / "bad.json"
    document.write_text(json.dumps(bad))
    run = zarrgate("stores", "put", store, str(document), server=server.url)
    assert run.returncode == 1 and run.stdout == "", run
    lines = run.stderr.splitlines()
    assert lines[0].startswith(f'error: 422 Unprocessable Entity: the native manifest for store "{store}" '
                               "has 2 problem(s); nothing was changed"), run.stderr
    problems = [line for line in lines if line.startswith("  - ")]
    assert len(problems) == 2, run.stderr
    assert any("no-such-codec" in p for p in problems), problems
    assert f"  - array values: chunk key \"999\" is outside the chunk grid [{CHUNKS}]" in problems, problems
    # --json: the problem document on stdout, for scripts
    run = zarrgate("stores", "put", store, str(document), "--json", server=server.url)
    assert run.returncode == 1 and json.loads(run.stdout)["status"] == 422
    assert requests.get(f"{server.url}/api/v1/stores/{store}", timeout=10).status_code == 404
    ok(zarrgate("object-stores", "delete", files, server=server.url))


def test_tokens_and_unreachable_servers_are_explained(tmp_path: Path):
    with private_server(tmp_path, ZARRGATE_ADMIN_TOKENS=TOKEN) as (url, _):
        refused = zarrgate("stores", "list", server=url)
        assert refused.returncode == 1
        assert "error: 401 Unauthorized: a valid bearer token is required" in refused.stderr, refused.stderr
        assert "hint: the server has admin tokens: set ZARRGATE_TOKEN to one of them" in refused.stderr
        assert ok(zarrgate("stores", "list", server=url, token=TOKEN)) == "no stores\n"
    nobody = zarrgate("stores", "list", "--server", "http://127.0.0.1:9")
    assert nobody.returncode == 1
    assert nobody.stderr.startswith("error: no answer from http://127.0.0.1:9: "), nobody.stderr
    assert "hint: is the server running there?" in nobody.stderr


# --------------------------------------------------------------------------
# several files as one: a glob and --join
# --------------------------------------------------------------------------

def test_a_glob_put_with_join_existing_reads_back_as_the_joined_files(server: Server, source_dir: Path,
                                                                      store_name: str):
    from test_files import assert_same, open_plain
    from test_files_combine import mfdataset, write_daily

    days = [write_daily(source_dir / f"day_{i:02d}.nc", i) for i in range(3)]
    (source_dir / "notes.txt").write_text("not a data file\n")
    glob = source_dir.as_uri() + "/day_*.nc"
    out = ok(zarrgate("stores", "put", store_name, glob, "--join", "existing:time", "--older-than", "0",
                      server=server.url))
    assert out.startswith(f"registered {store_name} from {glob}"), out
    origin = requests.get(f"{server.url}/api/v1/stores/{store_name}", timeout=30).json()["files"]
    assert [f["url"] for f in origin["files"]] == [p.as_uri() for p in days], origin
    assert origin["combine"] == {"join": "existing", "dim": "time"}, origin
    assert_same(open_plain(f"{server.url}/{store_name}"), mfdataset(days, "time"))

    # the same files listed one by one make the same store
    listed = f"{store_name}-listed"
    ok(zarrgate("stores", "put", listed, *[p.as_uri() for p in days], "--join", "existing:time",
                server=server.url))
    assert_same(open_plain(f"{server.url}/{listed}"), mfdataset(days, "time"))


@pytest.mark.parametrize("join", ["existing", "concat:time", "new:run:fc_(\\d{8})"])
def test_a_malformed_join_exits_non_zero_naming_it_and_registers_nothing(server: Server, source_dir: Path,
                                                                         store_name: str, join: str):
    from test_files_combine import write_daily

    write_daily(source_dir / "day_00.nc", 0)
    run = zarrgate("stores", "put", store_name, source_dir.as_uri() + "/*.nc", "--join", join, server=server.url)
    assert run.returncode != 0 and run.stdout == "", run
    assert "--join" in run.stderr and join in run.stderr, run.stderr
    assert requests.get(f"{server.url}/api/v1/stores/{store_name}", timeout=10).status_code == 404


def test_a_glob_among_urls_or_a_manifest_among_urls_is_refused_before_any_request(tmp_path: Path):
    nobody = dict(server="http://127.0.0.1:9")  # nothing listens: a request would fail otherwise
    run = zarrgate("stores", "put", "s", "s3://b/a.nc", "s3://b/*.nc", **nobody)
    assert run.returncode == 1 and "s3://b/*.nc has a glob" in run.stderr, run.stderr
    run = zarrgate("stores", "put", "s", "s3://b/a.nc", str(tmp_path / "m.json"), **nobody)
    assert run.returncode == 1 and "give data files' URLs, or one manifest file alone" in run.stderr, run.stderr


def test_a_glob_put_with_follow_is_rescanned_and_sync_says_what_was_added(server: Server, source_dir: Path,
                                                                         store_name: str):
    from test_files import assert_same, open_plain
    from test_files_combine import mfdataset, write_daily

    days = [write_daily(source_dir / f"day_{i:02d}.nc", i) for i in range(2)]
    glob = source_dir.as_uri() + "/day_*.nc"
    ok(zarrgate("stores", "put", store_name, glob, "--join", "existing:time", "--follow", "10m", server=server.url))
    origin = requests.get(f"{server.url}/api/v1/stores/{store_name}", timeout=30).json()["files"]
    assert origin["follow_seconds"] == 600 and origin["prefix"] == {"prefix": source_dir.as_uri() + "/",
                                                                     "glob": "day_*.nc"}, origin
    out = ok(zarrgate("stores", "sync", store_name, server=server.url))
    assert out.startswith(f"{store_name}: unchanged"), out
    days.append(write_daily(source_dir / "day_02.nc", 2))
    out = ok(zarrgate("stores", "sync", store_name, server=server.url))
    assert out.startswith(f"{store_name}: new version") and f"added: 1\n    {days[2].as_uri()}\n" in out, out
    assert_same(open_plain(f"{server.url}/{store_name}"), mfdataset(days, "time"))
    ok(zarrgate("stores", "delete", store_name, server=server.url))  # followed no more

    nobody = dict(server="http://127.0.0.1:9")  # nothing listens: a request would fail otherwise
    run = zarrgate("stores", "put", "s", "s3://b/a.nc", "s3://b/c.nc", "--join", "existing:time", "--follow", "1m",
                   **nobody)
    assert run.returncode == 1 and "--follow rescans a prefix" in run.stderr, run.stderr


# --------------------------------------------------------------------------
# the progress bar over the files the server reads
# --------------------------------------------------------------------------

def test_a_put_of_data_files_draws_the_files_read_on_a_terminal(server: Server, tmp_path: Path,
                                                                  store_name: str):
    """The server reads 6 files from an upstream that takes a second a request: meanwhile the
    command's bar shows the files read of those found (``GET .../progress``), and the progress
    of the store is a 404 once the registration is over."""
    import http.server
    import socketserver
    import threading

    import zarrgate_client
    from test_files_combine import write_daily
    from upstream import serve

    files = tmp_path / "slow"
    files.mkdir()
    days = [write_daily(files / f"day_{i:02d}.nc", i) for i in range(6)]
    polled: list[dict] = []

    class Slow(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            time.sleep(1.0)
            body = (files / self.path.lstrip("/")).read_bytes()
            m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("range", ""))
            start, end = (int(m.group(1)), min(int(m.group(2)) + 1, len(body))) if m else (0, len(body))
            self.send_response(206 if m else 200)
            if m:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(body)}")
            self.send_header("Content-Length", str(end - start))
            self.send_header("ETag", f'"{self.path}"')
            self.end_headers()
            self.wfile.write(body[start:end])

    class Threaded(socketserver.ThreadingMixIn, http.server.HTTPServer):
        pass

    with serve(Threaded, Slow) as upstream:
        zarrgate_client.register_object_store(server.url, f"slow-{uuid.uuid4().hex[:8]}", upstream)
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                r = requests.get(f"{server.url}/api/v1/stores/{store_name}/progress", timeout=10)
                if r.status_code == 200:
                    polled.append(r.json())
                time.sleep(0.1)

        poller = threading.Thread(target=poll)
        poller.start()
        try:
            status, stdout, shown = put_with_a_terminal(
                ["stores", "put", "--server", server.url, store_name,
                 *[upstream + p.name for p in days], "--join", "existing:time"],
                env_without_zarrgate())
        finally:
            stop.set()
            poller.join()
    assert status == 0, (stdout, shown)
    assert stdout.startswith(f"registered {store_name} from 6 files"), stdout
    assert re.search(r"\d/6 files read", shown), f"the bar of files read: {shown!r}"
    assert polled and all(p["files"] == 6 and 0 <= p["read"] <= 6 for p in polled), polled
    assert polled[0]["store"] == store_name and polled[0]["elapsed_seconds"] >= 0
    gone = requests.get(f"{server.url}/api/v1/stores/{store_name}/progress", timeout=10)
    assert gone.status_code == 404 and "under way" in gone.json()["detail"], gone.text
