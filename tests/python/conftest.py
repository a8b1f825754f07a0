"""The real zarrgate binary for the Python client tests.

``server`` starts ``$ZARRGATE_BIN`` (default ``target/debug/zarrgate``) once per
catalog and test session, on port 0, with a fresh catalog: a SQLite file in a
temporary directory, and a fresh PostgreSQL database created through the admin
URL ``$ZARRGATE_TEST_POSTGRES_URL`` (default
``postgres://postgres@127.0.0.1:5432/test``) and dropped at the end. Every test
that uses it runs once per catalog.

An unreachable PostgreSQL makes the PostgreSQL variants fail (setup error with
the reason); they are skipped only when ``ZARRGATE_TEST_POSTGRES=skip`` says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import requests

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "clients" / "python"))

import zarrgate_client  # noqa: E402

STARTUP_TIMEOUT = 60.0
LISTENING = re.compile(r"zarrgate listening on (http://[0-9.]+:\d+)")


def pytest_configure(config: pytest.Config) -> None:
    # zarr warns on every numcodecs.* codec (zlib, shuffle) that HDF5 files use
    config.addinivalue_line(
        "filterwarnings", "ignore:Numcodecs codecs are not in the Zarr version 3:UserWarning"
    )


@dataclass
class Server:
    """A running zarrgate: ``url`` is ``http://127.0.0.1:PORT``."""

    url: str
    catalog: str
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


# --------------------------------------------------------------------------
# catalogs
# --------------------------------------------------------------------------

def _psql(admin_url: str, sql: str) -> subprocess.CompletedProcess:
    psql = shutil.which("psql")
    if psql is None:
        pytest.fail("psql is not on PATH: the PostgreSQL variant needs it to create its "
                    "database (or set ZARRGATE_TEST_POSTGRES=skip)", pytrace=False)
    env = dict(os.environ, PGCONNECT_TIMEOUT="5")
    return subprocess.run([psql, admin_url, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql],
                          env=env, capture_output=True, text=True, timeout=60)


class PostgresDatabase:
    """A database created on the admin server for one session."""

    def __init__(self, admin_url: str):
        self.admin_url = admin_url
        self.name = f"zgpy_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        done = _psql(admin_url, f"create database {self.name}")
        if done.returncode != 0:
            pytest.fail(
                f"PostgreSQL at {admin_url} is unreachable or refused to create database "
                f"{self.name}: {done.stderr.strip()}\nStart PostgreSQL, point "
                "ZARRGATE_TEST_POSTGRES_URL at one, or set ZARRGATE_TEST_POSTGRES=skip "
                "to skip the PostgreSQL variants explicitly.",
                pytrace=False,
            )
        parts = urlsplit(admin_url)
        self.url = urlunsplit(parts._replace(path=f"/{self.name}"))

    def drop(self) -> None:
        done = _psql(self.admin_url, f"drop database if exists {self.name} with (force)")
        if done.returncode != 0:
            print(f"warning: could not drop {self.name}: {done.stderr}", file=sys.stderr)


# --------------------------------------------------------------------------
# the server process
# --------------------------------------------------------------------------

def _binary() -> Path:
    path = Path(os.environ.get("ZARRGATE_BIN", "target/debug/zarrgate"))
    if not path.is_absolute():
        path = REPO / path
    if not os.access(path, os.X_OK):
        pytest.fail(f"zarrgate binary {path} is missing: run `cargo build --bin zarrgate` "
                    "or set ZARRGATE_BIN", pytrace=False)
    return path


def _start(binary: Path, database_url: str, workdir: Path, catalog: str) -> tuple:
    # Only the variables set here configure the server: a ZARRGATE_CONFIG or
    # ZARRGATE_ADMIN_TOKENS of the caller's shell must not change the tests.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ZARRGATE_") and k != "DATABASE_URL"}
    env.update(ZARRGATE_LISTEN="127.0.0.1:0", DATABASE_URL=database_url,
               ZARRGATE_LOG="info", NO_COLOR="1")
    log = workdir / f"zarrgate-{catalog}.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen([str(binary)], env=env, stdout=sink, stderr=sink,
                                stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        found = LISTENING.search(log.read_text(errors="replace"))
        if found:
            return proc, Server(url=found.group(1), catalog=catalog, log=log)
        if proc.poll() is not None:
            pytest.fail(f"zarrgate ({catalog}) exited with status {proc.returncode} before "
                        f"listening; its stderr:\n{log.read_text(errors='replace')}",
                        pytrace=False)
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail(f"zarrgate ({catalog}) did not log 'zarrgate listening on' within "
                        f"{STARTUP_TIMEOUT:.0f} s; its stderr:\n{log.read_text(errors='replace')}",
                        pytrace=False)
        time.sleep(0.05)


def _stop(proc: subprocess.Popen, server: Server) -> None:
    if proc.poll() is not None:
        pytest.fail(f"zarrgate ({server.catalog}) died during the tests with status "
                    f"{proc.returncode}; its stderr:\n{server.log_text()}", pytrace=False)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"zarrgate ({server.catalog}) ignored SIGTERM for 30 s", pytrace=False)


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest):
    """A zarrgate process with a fresh catalog of the parametrized kind."""
    catalog = request.param
    binary = _binary()
    workdir = Path(tempfile.mkdtemp(prefix=f"zarrgate-{catalog}-"))
    db = None
    if catalog == "sqlite":
        database_url = f"sqlite://{workdir / 'catalog.db'}"
    else:
        if os.environ.get("ZARRGATE_TEST_POSTGRES") == "skip":
            pytest.skip("ZARRGATE_TEST_POSTGRES=skip: PostgreSQL variant not run")
        db = PostgresDatabase(os.environ.get("ZARRGATE_TEST_POSTGRES_URL",
                                             "postgres://postgres@127.0.0.1:5432/test"))
        database_url = db.url
    try:
        proc, srv = _start(binary, database_url, workdir, catalog)
        try:
            yield srv
        finally:
            _stop(proc, srv)
    finally:
        if db is not None:
            db.drop()
    shutil.rmtree(workdir, ignore_errors=True)


# --------------------------------------------------------------------------
# helpers for tests
# --------------------------------------------------------------------------

def register(server: Server, store: str, doc: dict, status: int = 201) -> dict:
    """PUT ``doc`` as store ``store``; assert the answer's status; return its JSON."""
    resp = requests.put(f"{server.url}/api/v1/stores/{store}",
                        data=json.dumps(doc, allow_nan=False),
                        headers={"Content-Type": "application/json"}, timeout=60)
    assert resp.status_code == status, (
        f"PUT /api/v1/stores/{store}: expected {status}, got {resp.status_code}: {resp.text[:2000]}"
    )
    return resp.json() if resp.content else {}


@pytest.fixture
def store_name(request: pytest.FixtureRequest) -> str:
    """A store name unique to this test (and catalog)."""
    base = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:80]
    return f"{base}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def source_dir(server: Server, tmp_path: Path) -> Path:
    """A fresh directory registered as a ``file://`` object store: chunk paths
    under it are readable by the server. Write the test's files here."""
    directory = (tmp_path / "sources").resolve()
    directory.mkdir()
    name = f"src-{uuid.uuid4().hex[:12]}"
    answer = zarrgate_client.register_object_store(server.url, name, directory.as_uri() + "/")
    assert answer["url"] == directory.as_uri() + "/", answer
    return directory


@contextlib.contextmanager
def moto_s3(workdir: Path):
    """A real S3-compatible server (``moto_server`` from the venv) on a free port, with a fresh
    bucket: yields ``(endpoint, bucket)``. Its log goes to ``workdir/moto.log``."""
    venv_moto = Path(sys.executable).parent / "moto_server"
    exe = str(venv_moto) if venv_moto.exists() else (shutil.which("moto_server") or "moto_server")
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log_path = workdir / "moto.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if requests.get(endpoint, timeout=2).ok:
                    break
            # Not listening yet, or listening but too busy starting to answer (a loaded machine:
            # seen in CI as a read timeout).
            except (requests.ConnectionError, requests.Timeout):
                pass
            assert time.monotonic() < deadline and proc.poll() is None, log_path.read_text()
            time.sleep(0.1)
        bucket = f"b-{uuid.uuid4().hex[:8]}"
        assert requests.put(f"{endpoint}/{bucket}", timeout=10).ok
        yield endpoint, bucket
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def register_s3_store(server: Server, endpoint: str, bucket: str) -> str:
    """Registers ``s3://bucket/`` on moto at ``endpoint`` as an object store; returns its name."""
    name = f"s3-{bucket}"
    zarrgate_client.register_object_store(
        server.url, name, f"s3://{bucket}/",
        {"endpoint": endpoint, "region": "us-east-1", "access_key_id": "test", "secret_access_key": "test",
         "allow_http": "true"})
    return name


@contextlib.contextmanager
def private_server(workdir: Path, **env: str):
    """A zarrgate of its own (SQLite catalog in ``workdir``), for a configuration the shared
    ``server`` fixture does not have, or a request that may kill it. Its address space is
    capped at 8 GiB, so that a runaway allocation fails at once on any machine."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ZARRGATE_") and k != "DATABASE_URL"}
    clean.update(ZARRGATE_LISTEN="127.0.0.1:0", DATABASE_URL=f"sqlite://{workdir / 'catalog.db'}",
                 NO_COLOR="1", **env)
    log = workdir / "zarrgate.log"
    cap = 8 << 30

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    with open(log, "wb") as sink:
        proc = subprocess.Popen([str(_binary())], env=clean, stdout=sink, stderr=sink,
                                stdin=subprocess.DEVNULL, preexec_fn=limit_memory)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not (found := LISTENING.search(log.read_text(errors="replace"))):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.05)
        yield found.group(1), log
    finally:
        proc.terminate()
        proc.wait(timeout=30)
