"""A CDN in front of zarrgate replicas, for test_cdn.py.

``CdnStack`` starts a fresh PostgreSQL database (created through the admin URL of
conftest.py), ``REPLICAS`` zarrgate processes on it (each on its own port, with the
environment the test asks for) and a real nginx whose configuration is deploy/cdn's,
rendered by deploy/cdn/render.py with the replicas as upstreams and a private cache
directory. nginx is ``$ZARRGATE_TEST_NGINX``, else ``nginx`` on PATH, else /usr/sbin/nginx;
if none exists the tests fail (install it: ``apt-get install -y nginx-light``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import requests

from conftest import LISTENING, REPO, STARTUP_TIMEOUT, PostgresDatabase, Server, _binary

REPLICAS = 3


def _render_module():
    spec = importlib.util.spec_from_file_location("zarrgate_cdn_render",
                                                  REPO / "deploy" / "cdn" / "render.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nginx_binary() -> str:
    for candidate in (os.environ.get("ZARRGATE_TEST_NGINX"), shutil.which("nginx"),
                      "/usr/sbin/nginx"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail("nginx is not installed: the CDN tests run a real nginx in front of zarrgate. "
                "Install it with `apt-get update && apt-get install -y nginx-light`, or set "
                "ZARRGATE_TEST_NGINX to an nginx binary.", pytrace=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    def __init__(self, binary: Path, database_url: str, workdir: Path, index: int, env: dict):
        clean = {k: v for k, v in os.environ.items()
                 if not k.startswith("ZARRGATE_") and k != "DATABASE_URL"}
        clean.update(ZARRGATE_LISTEN="127.0.0.1:0", DATABASE_URL=database_url, NO_COLOR="1",
                     ZARRGATE_LOG="info,zarrgate=debug", **env)
        self.log = workdir / f"zarrgate-{index}.log"
        self.name = f"replica {index}"
        with open(self.log, "wb") as sink:
            self.proc = subprocess.Popen([str(binary)], env=clean, stdout=sink, stderr=sink,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            found = LISTENING.search(self.log_text())
            if found:
                self.url = found.group(1)
                break
            if self.proc.poll() is not None:
                pytest.fail(f"zarrgate {self.name} exited with {self.proc.returncode} before "
                            f"listening:\n{self.log_text()}", pytrace=False)
            if time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"zarrgate {self.name} did not listen within {STARTUP_TIMEOUT} s:\n"
                            f"{self.log_text()}", pytrace=False)
            time.sleep(0.05)
        self.server = Server(url=self.url, catalog="postgres", log=self.log)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def requests_for(self, path: str) -> int:
        """How many data-plane requests for ``path`` this replica answered (its debug log)."""
        return len(re.findall(rf"\bpath={re.escape(path)}(?=\s|$)", self.log_text(), flags=re.M))

    def stop(self) -> str | None:
        """SIGTERM; the reason it misbehaved, if it did."""
        if self.proc.poll() is not None:
            return f"zarrgate {self.name} died during the tests with {self.proc.returncode}"
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return f"zarrgate {self.name} ignored SIGTERM for 30 s"
        return None


class Nginx:
    def __init__(self, workdir: Path, upstreams: list[str]):
        render = _render_module()
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = workdir / "nginx"
        main = render.render(self.dir, f"127.0.0.1:{self.port}", upstreams)
        binary = nginx_binary()
        checked = subprocess.run([binary, "-t", "-p", str(self.dir), "-c", str(main)],
                                 capture_output=True, text=True)
        if checked.returncode != 0:
            pytest.fail(f"nginx -t refuses the rendered deploy/cdn configuration:\n"
                        f"{checked.stderr}", pytrace=False)
        self.log = self.dir / "nginx.out"
        with open(self.log, "wb") as sink:
            self.proc = subprocess.Popen([binary, "-p", str(self.dir), "-c", str(main),
                                          "-g", "daemon off;"],
                                         stdout=sink, stderr=sink, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                if requests.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"nginx did not serve /readyz on port {self.port}:\n"
                            f"{self.log.read_text(errors='replace')}\n"
                            f"{(self.dir / 'logs' / 'error.log').read_text(errors='replace')}",
                            pytrace=False)
            time.sleep(0.1)

    def access_log(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class CdnStack:
    """PostgreSQL database + zarrgate replicas + nginx; ``url`` is nginx's."""

    def __init__(self, workdir: Path, env: dict, replicas: int = REPLICAS):
        self.workdir = workdir
        self.env = env
        self.db = PostgresDatabase(os.environ.get("ZARRGATE_TEST_POSTGRES_URL",
                                                  "postgres://postgres@127.0.0.1:5432/test"))
        self.replicas: list[Replica] = []
        self.nginx = None
        try:
            binary = _binary()
            for i in range(replicas):
                self.replicas.append(Replica(binary, self.db.url, workdir, i, env))
            self.nginx = Nginx(workdir, [r.url.removeprefix("http://") for r in self.replicas])
        except BaseException:
            self.close()
            raise
        self.url = self.nginx.url
        # upstream_requests() counts the replicas' debug lines `request status=... path=...`:
        # make sure they still look like that
        probe = f"/zarrgate-cdn-probe-{os.getpid()}/zarr.json"
        requests.get(f"{self.replicas[0].url}{probe}", timeout=10)
        if self.replicas[0].requests_for(probe) != 1:
            self.close()
            pytest.fail("zarrgate's debug log no longer shows data-plane requests as "
                        f"`path={probe}`: update cdn.Replica.requests_for", pytrace=False)

    def upstream_requests(self, path: str) -> int:
        """Requests for ``path`` that reached any replica."""
        return sum(r.requests_for(path) for r in self.replicas)

    def close(self) -> list[str]:
        if self.nginx is not None:
            self.nginx.stop()
        troubles = [t for t in (r.stop() for r in self.replicas) if t]
        self.db.drop()
        return troubles
