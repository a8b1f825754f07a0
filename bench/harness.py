"""Shared machinery of the bench/ scripts (Python 3.11 standard library only).

- `Bench`: the bench directory (generated data), the copied release binary, results files.
- `Server`: one zarrgate process with its environment, log, RSS and metrics.
- `Postgres`: a fresh database per benchmark run (created, dropped after).
- `Nginx`: the static-file baseline, on the same files.
- `wrk()`: runs wrk with bench/wrk/random.lua, returns its JSON summary.
- `Quiet`: waits for a quiet machine and tells whether a run was disturbed by other work.
- statistics, tables, the tile layout of an array (`default_tile`, as src/zarr/grid.rs computes it).
"""

import contextlib
import datetime
import http.client
import json
import os
import platform
import random
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "bench")
RESULTS = os.path.join(BENCH, "results")
LUA = os.path.join(BENCH, "wrk", "random.lua")
MIB = 1 << 20


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def env_int(name, default):
    return int(os.environ.get(name, default))


# ---------------------------------------------------------------------------------------------
# Data and binary


class Bench:
    """Where the generated data lives, and the binary under test."""

    def __init__(self):
        self.dir = os.path.abspath(os.environ.get("ZARRGATE_BENCH_DIR", "/tmp/zarrgate-bench"))
        os.makedirs(self.dir, exist_ok=True)
        self.data = os.path.join(self.dir, "data")
        self.work = tempfile.mkdtemp(prefix="zgbench-")
        self.binary = self._binary()

    def _binary(self):
        """A private copy of the release binary (ZARRGATE_BIN, or target/release/zarrgate after
        `cargo build --release` unless BUILD=0): a rebuild by someone else does not change the
        binary under test mid-run."""
        built = cargo_built("ZARRGATE_BIN", ["--bin", "zarrgate"], "zarrgate")
        copy = os.path.join(self.work, "zarrgate")
        for attempt in range(10):
            shutil.copy2(built, copy)
            r = subprocess.run([copy, "--version"], capture_output=True, text=True)
            if r.returncode == 0:
                break
            log(f"{built} does not run (being rewritten?); again in 10 s")
            time.sleep(10)
        else:
            raise SystemExit(f"{built} does not run")
        self.binary_info = subprocess.run(["sha256sum", copy], capture_output=True, text=True).stdout.split()[0][:16]
        if "not stripped" not in subprocess.run(["file", copy], capture_output=True, text=True).stdout:
            log(f"warning: {built} is stripped: perf profiles will lack symbols")
        self.commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                     text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src", "migrations", "Cargo.toml"],
                               cwd=REPO, capture_output=True, text=True).stdout.strip()
        if dirty:
            self.commit += "+dirty"
        self.dirty = [line.split()[-1] for line in dirty.splitlines()]
        return copy

    def provenance(self):
        """What was measured: the commit, the files of src/ that differ from it, the binary's hash."""
        return {"commit": self.commit, "dirty": self.dirty, "binary_sha256": self.binary_info}

    def generate(self, sizes=(), extras=False, per_file_sizes=()):
        """Runs gen_native.py for what is not generated yet."""
        cmd = [sys.executable, os.path.join(BENCH, "gen_native.py"), "--out", self.dir,
               "--sizes", ",".join(sizes), "--per-file-sizes", ",".join(per_file_sizes)]
        if extras:
            cmd.append("--extras")
        subprocess.run(cmd, check=True)

    def manifest(self, size, kind="native"):
        return os.path.join(self.dir, f"{kind}-{size}.json")

    def meta(self, size, kind="native"):
        with open(os.path.join(self.dir, f"{kind}-{size}.meta.json")) as f:
            return json.load(f)

    def private_copy(self, path, name):
        """A copy of another binary (a baseline) in the work directory, as for the one under test."""
        copy = os.path.join(self.work, name)
        shutil.copy2(path, copy)
        subprocess.run([copy, "--version"], check=True, capture_output=True)
        return copy

    def cleanup(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def publish(self, name, results, render, **extra):
        """Saves bench/results/<name>.json (machine, commit, provenance, `extra`, `results`) and
        prints its table."""
        data = {"machine": machine(), "commit": self.commit, "provenance": self.provenance(), **extra,
                "results": results}
        save(name, data)
        print(render(data))


def machine():
    """A one-line description of the machine."""
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = 0
    with contextlib.suppress(OSError):
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) // (1024 * 1024)
    pg = subprocess.run(["psql", "-qAt", Postgres.admin_url(), "-c", "show server_version"],
                        capture_output=True, text=True).stdout.strip()
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem, "kernel": platform.release(),
            "postgres": pg, "nginx": nginx_version(), "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}


def nginx_version():
    r = subprocess.run(["nginx", "-v"], capture_output=True, text=True)
    return (r.stderr or r.stdout).strip().split("/")[-1]


# ---------------------------------------------------------------------------------------------
# Processes, memory, CPU


def proc_status(pid, field):
    """A field of /proc/<pid>/status in KiB (VmRSS, VmHWM...), or 0."""
    with contextlib.suppress(OSError):
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    """User plus system CPU seconds process `pid` has used so far (/proc/<pid>/stat), or 0."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def cargo_built(env_var, target, relative):
    """The path in $env_var, else target/release/<relative>, built first (`cargo build --release
    <target>`) unless BUILD=0."""
    built = os.environ.get(env_var)
    if built:
        return built
    if os.environ.get("BUILD", "1") != "0":
        log("cargo build --release " + " ".join(target))
        subprocess.run(["cargo", "build", "--release", "--quiet", *target], cwd=REPO, check=True)
    return os.path.join(REPO, "target", "release", relative)


def cpu_seconds(pid):
    """utime + stime of a process, in seconds."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def processes():
    """{pid: (comm, ppid, cpu seconds)} of every process."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            raw = open(f"/proc/{name}/stat").read()
            comm = raw[raw.index("(") + 1: raw.rindex(")")]
            fields = raw.rsplit(")", 1)[1].split()
            out[int(name)] = (comm, int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    return out


def postgres_cpu():
    """CPU seconds of every PostgreSQL process (the server is local and shared)."""
    return sum(cpu for comm, _, cpu in processes().values() if comm.startswith("postgres"))


INTRUDERS = ("cargo", "rustc", "pytest", "cc1", "cc1plus", "ld", "clippy-driver", "rustdoc", "docker", "buildkitd")


def load1():
    return float(open("/proc/loadavg").read().split()[0])


def intruders():
    found = []
    for pid, (comm, _, _) in processes().items():
        if comm in INTRUDERS or comm.startswith("pytest") or comm.startswith("rustc"):
            found.append(f"{comm}[{pid}]")
        elif comm.startswith("python"):
            with contextlib.suppress(OSError):
                cmd = open(f"/proc/{pid}/cmdline").read()
                if "pytest" in cmd:
                    found.append(f"pytest[{pid}]")
    return found


class Quiet:
    """Waits for a quiet machine (load < QUIET_LOAD, no build or test processes), and watches a run
    for CPU used by anything but this benchmark (its own processes and PostgreSQL)."""

    def __init__(self):
        self.max_load = float(os.environ.get("QUIET_LOAD", "0.5"))
        self.max_wait = env_int("QUIET_MAX_WAIT", 4 * 3600)
        self.skip = os.environ.get("QUIET", "1") == "0"
        self.ours = set()

    def wait(self, what=""):
        if self.skip:
            return
        started = time.time()
        while True:
            load, found = load1(), intruders()
            if load < self.max_load and not found:
                return
            if time.time() - started > self.max_wait:
                raise SystemExit(f"machine not quiet after {self.max_wait} s (load {load}, {found})")
            log(f"waiting for a quiet machine{' before ' + what if what else ''}: load {load:.2f}, "
                f"{', '.join(found) or 'no build/test processes'}")
            time.sleep(30)

    def wait_idle(self, what="", seconds=3):
        """Between runs: no intruders, and the CPU idle for a few seconds (the load average lags)."""
        if self.skip:
            return
        started = time.time()
        while True:
            found = intruders()
            busy = cpu_busy(seconds)
            if not found and busy < 0.15:
                return
            if time.time() - started > self.max_wait:
                raise SystemExit(f"machine not idle after {self.max_wait} s")
            log(f"waiting for an idle machine{' before ' + what if what else ''}: {busy:.0%} CPU busy, "
                f"{', '.join(found) or 'no build/test processes'}")
            time.sleep(20)

    @contextlib.contextmanager
    def watch(self):
        """Yields a dict; after the block, dict["foreign_cpu"] is the CPU (in cores, averaged)
        used by processes that are neither ours nor PostgreSQL, dict["intruders"] their names."""
        report = {"foreign_cpu": 0.0, "intruders": []}
        stop = threading.Event()
        mine = os.getpid()
        seen = {}
        foreign = {}

        def ours(pid, table):
            # ours: this process and its descendants, and PostgreSQL
            depth = 0
            while pid and depth < 20:
                if pid == mine or pid in self.ours:
                    return True
                entry = table.get(pid)
                if entry is None:
                    return False
                if entry[0].startswith("postgres"):
                    return True
                pid = entry[1]
                depth += 1
            return False

        def sample():
            while True:
                table = processes()
                for pid, (comm, _, cpu) in table.items():
                    if pid in seen and not ours(pid, table):
                        delta = cpu - seen[pid]
                        if delta > 0:
                            foreign[(pid, comm)] = foreign.get((pid, comm), 0) + delta
                    seen[pid] = cpu
                if stop.wait(1.0):
                    return

        started = time.time()
        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            yield report
        finally:
            stop.set()
            thread.join()
            elapsed = max(time.time() - started, 1e-3)
            report["foreign_cpu"] = sum(foreign.values()) / elapsed
            report["intruders"] = sorted({f"{c}[{p}]" for (p, c), v in foreign.items() if v > 0.2})

    def disturbed(self, report, limit=0.10):
        return not self.skip and report["foreign_cpu"] > limit


def cpu_busy(seconds):
    """Fraction of all CPU time that was not idle over `seconds`."""
    def read():
        fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields), idle
    t0, i0 = read()
    time.sleep(seconds)
    t1, i1 = read()
    return 1 - (i1 - i0) / max(t1 - t0, 1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# PostgreSQL


class Catalog:
    """A fresh, empty catalog for one benchmark run: a PostgreSQL database (dropped after) or a
    SQLite file (removed first). `db` is the Postgres or None; `url` goes to the server."""

    def __init__(self, bench, backend, tag):
        self.db = Postgres(tag) if backend == "postgres" else None
        self.path = None if self.db else os.path.join(bench.work, f"{tag}.db")
        self.url = self.db.url if self.db else f"sqlite://{self.path}"

    def __enter__(self):
        if self.db:
            self.db.__enter__()
        else:
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(self.path + suffix):
                    os.remove(self.path + suffix)
        return self

    def __exit__(self, *exc):
        if self.db:
            self.db.drop()

    def size_bytes(self):
        """The catalog's size on disk."""
        if self.db:
            return int(self.db.scalar("select pg_database_size(current_database())"))
        return sum(os.path.getsize(self.path + s) for s in ("", "-wal") if os.path.exists(self.path + s))


class Postgres:
    """A database created for one benchmark run and dropped after it."""

    @staticmethod
    def admin_url():
        return os.environ.get("ZARRGATE_BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")

    def __init__(self, tag):
        self.admin = self.admin_url()
        self.name = f"zgbench_{os.getpid()}_{tag}".replace("-", "_").replace(".", "_").lower()
        self.url = self.admin.rsplit("/", 1)[0] + "/" + self.name

    def __enter__(self):
        self.psql_admin(f"drop database if exists {self.name}", f"create database {self.name}")
        return self

    def __exit__(self, *exc):
        self.drop()

    def drop(self):
        self.psql_admin(f"drop database if exists {self.name} with (force)")

    def psql_admin(self, *statements):
        args = ["psql", "-qAt", "-v", "ON_ERROR_STOP=1", self.admin]
        for s in statements:
            args += ["-c", s]
        subprocess.run(args, check=True, capture_output=True, env=dict(os.environ, PGOPTIONS="--client-min-messages=warning"))

    def query(self, sql):
        """Rows of `sql` in this database, as lists of strings."""
        r = subprocess.run(["psql", "-qAt", "-F", "\t", "-v", "ON_ERROR_STOP=1", self.url, "-c", sql],
                           check=True, capture_output=True, text=True)
        return [line.split("\t") for line in r.stdout.splitlines() if line]

    def scalar(self, sql):
        rows = self.query(sql)
        return rows[0][0] if rows else None


# ---------------------------------------------------------------------------------------------
# zarrgate


class Server:
    """One zarrgate process."""

    def __init__(self, bench, database_url, env=None, name="zarrgate", binary=None):
        self.bench = bench
        self.binary = binary or bench.binary
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(bench.work, f"{name}-{self.port}.log")
        self.env = dict(os.environ)
        self.env.update({"ZARRGATE_LOG": "info", "ZARRGATE_LOG_FORMAT": "text", "NO_COLOR": "1"})
        self.env.pop("DATABASE_URL", None)
        self.env.update(env or {})
        self.database_url = database_url
        self.proc = None
        self.conn = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        logf = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--listen", f"127.0.0.1:{self.port}", "--database-url", self.database_url],
            env=self.env, stdout=logf, stderr=logf)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"zarrgate exited: {open(self.log_path).read()[-2000:]}")
            with contextlib.suppress(OSError, http.client.HTTPException):
                if self.get("/readyz")[0] == 200:
                    return self
            time.sleep(0.05)
        raise RuntimeError("zarrgate did not become ready")

    def stop(self):
        if self.conn:
            self.conn.close()
            self.conn = None
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    @property
    def pid(self):
        return self.proc.pid

    def rss_kib(self):
        return proc_status(self.pid, "VmRSS")

    def hwm_kib(self):
        return proc_status(self.pid, "VmHWM")

    def cpu(self):
        return cpu_seconds(self.pid)

    def request(self, method, path, body=None, headers=None):
        """(status, body bytes, headers) over a kept-alive connection."""
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
            try:
                self.conn.request(method, path, body=body, headers=headers or {})
                r = self.conn.getresponse()
                data = r.read()
                return r.status, data, dict(r.getheaders())
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        raise AssertionError

    def get(self, path, headers=None):
        return self.request("GET", path, headers=headers)

    def put_json(self, path, doc):
        status, body, _ = self.request("PUT", path, json.dumps(doc).encode(), {"content-type": "application/json"})
        if status >= 300:
            raise RuntimeError(f"PUT {path}: {status} {body[:500]!r}")
        return json.loads(body or b"null")

    def object_store(self, root):
        self.put_json("/api/v1/object-stores/bench", {"url": f"file://{root.rstrip('/')}/"})

    def register(self, store, path, query=""):
        """Streams the manifest at `path` (curl -T): (HTTP status, seconds, answer)."""
        out = os.path.join(self.bench.work, "answer.json")
        url = f"{self.base}/api/v1/stores/{store}{query}"
        r = subprocess.run(["curl", "-sS", "-T", path, "-H", "content-type: application/json", "-o", out,
                            "-w", "%{http_code} %{time_total}", url], capture_output=True, text=True, check=True)
        code, seconds = r.stdout.split()
        answer = open(out).read()
        if int(code) >= 300:
            raise RuntimeError(f"registering {store}: HTTP {code}: {answer[:1000]}")
        return int(code), float(seconds), json.loads(answer)

    def metrics(self):
        """{(name, frozenset(labels)): value} from /metrics."""
        _, body, _ = self.get("/metrics")
        out = {}
        for line in body.decode().splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)$", line)
            if not m:
                continue
            labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            out[(m.group(1), labels)] = float(m.group(3))
        return out

    def metric(self, name, **labels):
        want = frozenset(labels.items())
        return sum(v for (n, l), v in self.metrics().items() if n == name and want <= l)

    def cache(self, cache="blocks"):
        """(hits, misses, weighted size, entries) of one cache."""
        m = self.metrics()

        def get(name):
            return sum(v for (n, l), v in m.items() if n == name and ("cache", cache) in l)
        return (get("zarrgate_cache_hits_total"), get("zarrgate_cache_misses_total"),
                get("zarrgate_cache_bytes"), get("zarrgate_cache_entries"))

    def log_text(self):
        return open(self.log_path).read()

    def registered_seconds(self):
        """The `seconds=` of the last "store registered" log line (catalog write and retention)."""
        found = re.findall(r"store registered.*?seconds=([0-9.e-]+)", self.log_text())
        return float(found[-1]) if found else None


# ---------------------------------------------------------------------------------------------
# nginx


def wait_listening(proc, port, what, exited, seconds=10):
    """Returns once `proc` accepts connections on `port`; raises with `exited()` if it exits first."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        if proc.poll() is not None:
            raise RuntimeError(exited())
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not start")


class Nginx:
    """nginx serving `root` as static files: the baseline. Tuned as one would for static files:
    sendfile, open_file_cache, no access log, unlimited keep-alive requests, one worker per core."""

    def __init__(self, bench, root, sendfile=True):
        self.bench = bench
        self.root = root
        self.sendfile = sendfile
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.prefix = os.path.join(bench.work, f"nginx-{self.port}")
        self.proc = None

    def __enter__(self):
        os.makedirs(self.prefix, exist_ok=True)
        conf = os.path.join(self.prefix, "nginx.conf")
        with open(os.path.join(BENCH, "nginx.conf")) as f:
            text = f.read()
        text = text.replace("@PORT@", str(self.port)).replace("@ROOT@", self.root).replace("@PREFIX@", self.prefix)
        if not self.sendfile:
            text = text.replace("sendfile on;", "sendfile off;")
        with open(conf, "w") as f:
            f.write(text)
        self.proc = subprocess.Popen(["nginx", "-p", self.prefix, "-c", conf, "-g", "daemon off;"],
                                     stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.prefix, "stderr"), "w"))
        wait_listening(self.proc, self.port, "nginx",
                       lambda: "nginx exited: " + open(os.path.join(self.prefix, "stderr")).read())
        return self

    def cpu(self):
        """CPU seconds of the master and its workers (the workers answer)."""
        master = self.proc.pid
        return sum(cpu for pid, (_, ppid, cpu) in processes().items() if master in (pid, ppid))

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Minimal:
    """bench/minimal_server.rs: zarrgate's stack answering every request with one file's bytes and
    zarrgate's headers, and nothing else; the floor under zarrgate's small answers."""

    def __init__(self, bench, binary, path, headers="zarrgate"):
        self.bench, self.binary, self.path, self.headers = bench, binary, path, headers
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def __enter__(self):
        self.proc = subprocess.Popen([self.binary, f"127.0.0.1:{self.port}", self.path, self.headers],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_listening(self.proc, self.port, "minimal_server",
                       lambda: f"{self.binary} exited with {self.proc.returncode}")
        return self

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def cpu(self):
        return cpu_seconds(self.proc.pid)


# ---------------------------------------------------------------------------------------------
# wrk


def wrk(base, mode, args=(), connections=32, threads=2, seconds=10, timeout=30):
    """Runs wrk with bench/wrk/random.lua in `mode` (see the script); returns its JSON summary:
    requests, seconds, rps, bytes, errors, latency percentiles in microseconds."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk (bench/README.md, requirements)")
    cmd = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds}s", "--timeout", f"{timeout}s",
           "-s", LUA, base, "--", mode, *map(str, args)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{\"wrk\"")]
    if r.returncode != 0 or not lines:
        raise RuntimeError(f"wrk failed ({r.returncode}): {r.stdout[-2000:]} {r.stderr[-2000:]}")
    out = json.loads(lines[-1])
    out["rps"] = out["requests"] / out["seconds"]
    out["mb_per_s"] = out["bytes"] / out["seconds"] / MIB
    # wrk's own CPU per request (it shares the machine's cores with the server under test).
    client = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out["client_us_per_request"] = client / max(out["requests"], 1) * 1e6
    return out


def check_wrk(result, what):
    errors = result["errors"]
    if any(errors.values()):
        raise RuntimeError(f"{what}: wrk reported errors {errors}")


# ---------------------------------------------------------------------------------------------
# Chunk grids


def default_tile(grid, max_tile):
    """The tile shape src/zarr/grid.rs `default_tile` gives an array with chunk grid `grid`."""
    if not grid:
        return []
    rest = [max(g, 1) for g in grid[1:]]

    def product(xs):
        p = 1
        for x in xs:
            p *= x
        return p
    while product(rest) > max_tile:
        largest = max(range(len(rest)), key=lambda i: (rest[i], i))  # Rust's max_by_key: the last maximum
        rest[largest] = -(-rest[largest] // 2)
    first = max(max_tile // max(product(rest), 1), 1)
    return [first] + rest


def tile_keys(grid, tile, separator="/"):
    """One chunk key per tile of `grid` (its first chunk)."""
    import itertools
    axes = [range(0, g, t) for g, t in zip(grid, tile)]
    for coords in itertools.product(*axes):
        yield "c" + separator + separator.join(map(str, coords))


def random_keys(grid, count, seed=1, separator="/"):
    rng = random.Random(seed)
    return ["c" + separator + separator.join(str(rng.randrange(g)) for g in grid) for _ in range(count)]


# ---------------------------------------------------------------------------------------------
# Statistics and output


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def spread(xs):
    """(median, min, max)."""
    return (median(xs), min(xs), max(xs)) if xs else (float("nan"),) * 3


def percentile(sorted_xs, p):
    if not sorted_xs:
        return float("nan")
    k = (len(sorted_xs) - 1) * p / 100
    f = int(k)
    c = min(f + 1, len(sorted_xs) - 1)
    return sorted_xs[f] + (sorted_xs[c] - sorted_xs[f]) * (k - f)


def fmt(x, digits=2):
    if x is None:
        return "-"
    if isinstance(x, float) and x != x:
        return "-"
    if isinstance(x, int):
        return f"{x:,}"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def fmt_spread(xs, digits=2, scale=1.0):
    """'median (min-max)' of a list."""
    if not xs:
        return "-"
    m, lo, hi = spread([x * scale for x in xs])
    if len(xs) == 1:
        return fmt(m, digits)
    return f"{fmt(m, digits)} ({fmt(lo, digits)}-{fmt(hi, digits)})"


def table(headers, rows):
    """A markdown table."""
    rows = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out)


def save(name, data):
    """Writes bench/results/<name>.json and returns its path."""
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"{name}.json")
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=False, default=str)
    log(f"results written to {os.path.relpath(path, REPO)}")
    return path


def runs(default):
    return env_int("RUNS", default)


def repeat_quietly(quiet, what, fn, attempts=5):
    """Runs fn() until a run is not disturbed by foreign CPU use (at most `attempts` times)."""
    for attempt in range(attempts):
        quiet.wait_idle(what)
        with quiet.watch() as report:
            result = fn()
        if not quiet.disturbed(report):
            if isinstance(result, dict):
                result["foreign_cpu"] = round(report["foreign_cpu"], 3)
            return result
        log(f"{what}: disturbed ({report['foreign_cpu']:.0%} of a core used by {report['intruders']}); again")
    raise SystemExit(f"{what}: disturbed {attempts} times in a row")


def perf_record(pid, seconds, out):
    """`perf record -g` of `pid` for `seconds`, then the top of its report in `out` (text)."""
    data = out + ".data"
    # PERF_CALLGRAPH=dwarf: whole stacks (the release build keeps no frame pointers), larger data.
    graph = ["--call-graph", os.environ["PERF_CALLGRAPH"]] if os.environ.get("PERF_CALLGRAPH") else ["-g"]
    rec = subprocess.Popen(["perf", "record", "-F", "499", *graph, "-p", str(pid), "-o", data, "--", "sleep",
                            str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return rec, data


def perf_report(data, out, limit=1.5):
    r = subprocess.run(["perf", "report", "-i", data, "--no-children", "--percent-limit", str(limit), "--stdio",
                        "-g", "none", "--sort", "dso,symbol"], capture_output=True, text=True)
    lines = [re.sub(r"(\s+-)+\s*$", "", line).rstrip() for line in r.stdout.splitlines()
             if line.strip() and not line.startswith("#")]
    by_dso = subprocess.run(["perf", "report", "-i", data, "--no-children", "--stdio", "-g", "none", "--sort", "dso"],
                            capture_output=True, text=True).stdout
    summary = [re.sub(r"(\s+-)+\s*$", "", line).strip() for line in by_dso.splitlines()
               if line.strip() and not line.startswith("#")][:6]
    lines = ["by object: " + "; ".join(summary), ""] + lines
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    if os.environ.get("PERF_KEEP") != "1":  # PERF_KEEP=1 keeps perf.data for `perf report`
        with contextlib.suppress(OSError):
            os.remove(data)
    return lines
