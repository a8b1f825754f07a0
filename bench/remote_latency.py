#!/usr/bin/env python3
"""Reads from an object store far away: zarrgate against direct reads with obstore.

Two object stores, each `LATENCY_MS` (20) away, every GET counted; `BACKENDS` picks them
(default `http,s3`, both, one after the other within each run):

- `http`: a threaded HTTP/1.1 server in this process (ranges, ETags, `LATENCY_MS` before every
  response head);
- `s3`: `moto_server` (moto's S3, in its own process), behind a latency-adding HTTP/1.1 proxy in
  this process that sleeps `LATENCY_MS` before forwarding each request (so before each response
  head) and counts the GETs; zarrgate's object store and the direct `S3Store` both have the
  proxy as their endpoint. Objects are uploaded to moto directly (not counted).
  `S3_SERVER=s3s-fs=PATH` runs s3s-fs (`cargo install s3s-fs@0.14.1 --features binary`) in
  moto's place: an S3 whose pages of a listing are built on every core.

Each run reads fresh objects (new names, so every run starts cold). A store of 16 KiB chunks over
an object is registered in zarrgate, and each case reads the same chunks twice: through zarrgate
(obstore's HTTPStore on the store's URL, whole chunk GETs) and directly (obstore's HTTPStore or
S3Store on the object store, ranged GETs), with the same client library both ways:

- sequential: one reader, `SEQ_CHUNKS` (256) consecutive chunks in order;
- random: one reader, `RANDOM_CHUNKS` (128) chunks at random over a 64 MiB object, each alone;
  the p50 of zarrgate's latency minus the direct one is the latency zarrgate adds;
- storm: 64 readers at once, each reading the same 8 cold chunks (8 blocks apart).

Figures are medians over `RUNS` runs (default 5); ratios are zarrgate's time over the direct
time of the same run. Results go to `results/remote-latency.json`, or
`results/remote-latency-<backend>.json` when `BACKENDS` names one, or `results/<RESULT_NAME>.json`;
every row says its backend.
Needs obstore and moto (the test venv: `scripts/python-env.sh`) and the release binary
(`ZARRGATE_BIN`, or `cargo build --release`).

    "$(scripts/python-env.sh | tail -1)/bin/python" bench/remote_latency.py
    BACKENDS=s3 "$(scripts/python-env.sh | tail -1)/bin/python" bench/remote_latency.py
"""

import asyncio
import hashlib
import http.client
import http.server
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Bench, Server, fmt, free_port, log, median, runs, table  # noqa: E402

import obstore  # noqa: E402
from obstore.store import HTTPStore, S3Store  # noqa: E402

LATENCY_MS = int(os.environ.get("LATENCY_MS", "20"))
BACKENDS = [b.strip() for b in os.environ.get("BACKENDS", "http,s3").split(",") if b.strip()]
CHUNK = 16 << 10
SEQ_CHUNKS = int(os.environ.get("SEQ_CHUNKS", "256"))
RANDOM_CHUNKS = int(os.environ.get("RANDOM_CHUNKS", "128"))
OBJECT_BYTES = 64 << 20
STORM_CLIENTS = 64
STORM_CHUNKS = 8
KINDS = ("sequential", "random", "storm")
CLIENT = {"allow_http": True, "pool_max_idle_per_host": "128"}
DATA = random.Random(7).randbytes(OBJECT_BYTES)


class Counter:
    """GETs by object name, counted where the latency is added, and (S3) the time moto took to
    answer each of them and the body bytes sent."""

    def __init__(self):
        self.lock = threading.Lock()
        self.gets = {}
        self.origin = {}
        self.sent = {}

    def add_bytes(self, name, n):
        with self.lock:
            self.sent[name] = self.sent.get(name, 0) + n

    def bytes(self, name):
        with self.lock:
            return self.sent.get(name, 0)

    def add(self, name):
        with self.lock:
            self.gets[name] = self.gets.get(name, 0) + 1

    def took(self, name, seconds):
        with self.lock:
            self.origin.setdefault(name, []).append(seconds)

    def count(self, name):
        with self.lock:
            return self.gets.get(name, 0)

    def origin_ms(self, name):
        """The median time the origin took per GET of `name` (ms), or None if not measured."""
        with self.lock:
            xs = self.origin.get(name)
        return median(xs) * 1000 if xs else None


class Listener(http.server.ThreadingHTTPServer):
    # 64 readers x 8 chunks connect at once to the direct upstream: a backlog of 5 (the
    # default) would drop SYNs and add seconds of retransmission.
    request_queue_size = 1024
    daemon_threads = True


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        # The head and the body are two writes: without this, Nagle's algorithm and the
        # client's delayed ACK add 40 ms to every answer.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def serve(handler):
    server = Listener(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


class HttpUpstream:
    """The HTTP object store: `DATA` under every path, ETag by path."""

    backend = "http"
    object_store = "far"

    def __init__(self, latency_ms):
        self.latency = latency_ms / 1000
        self.counter = Counter()
        upstream = self

        class Answer(Handler):
            def do_HEAD(self):
                self.answer(body=False)

            def do_GET(self):
                upstream.counter.add(self.path.lstrip("/"))
                self.answer(body=True)

            def answer(self, body):
                time.sleep(upstream.latency)
                etag = upstream.etag(self.path.lstrip("/"))
                size = len(DATA)
                m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("range", ""))
                a, b = (int(m.group(1)), min(int(m.group(2)) + 1, size)) if m else (0, size)
                if_match = self.headers.get("if-match")
                if if_match and if_match != etag:
                    self.send_response(412)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                self.send_response(206 if m else 200)
                if m:
                    self.send_header("content-range", f"bytes {a}-{b - 1}/{size}")
                self.send_header("content-length", str(b - a))
                self.send_header("etag", etag)
                self.send_header("last-modified", "Wed, 25 Nov 2026 12:00:00 GMT")
                self.end_headers()
                if body:
                    self.wfile.write(DATA[a:b])

        self.server, self.base = serve(Answer)

    def registration(self):
        return {"url": f"{self.base}/"}

    def direct_store(self):
        return HTTPStore.from_url(self.base, client_options=CLIENT)

    def put(self, name, size):
        """Every path is an object of OBJECT_BYTES: (its size)."""
        return OBJECT_BYTES

    def delete(self, name):
        pass

    def url(self, name):
        return f"{self.base}/{name}"

    def etag(self, name):
        return '"' + hashlib.md5(f"/{name}".encode()).hexdigest() + '"'

    def count(self, name):
        return self.counter.count(name)

    def sent_bytes(self, name):
        """Body bytes of the GETs of `name` sent through the proxy."""
        return self.counter.bytes(name)

    def close(self):
        self.server.shutdown()


class S3Upstream:
    """moto_server's S3, behind a proxy in this process that adds the latency and counts GETs.

    The proxy keeps one connection to moto per client connection (HTTP/1.1 keep-alive both
    ways), sleeps `latency_ms` before forwarding a request, and forwards GET and HEAD only;
    objects are written to moto directly."""

    backend = "s3"
    object_store = "far-s3"
    bucket = "bench"
    credentials = {"region": "us-east-1", "access_key_id": "test", "secret_access_key": "test"}

    def __init__(self, latency_ms, work):
        self.latency = latency_ms / 1000
        self.counter = Counter()
        self.etags = {}
        port = free_port()
        self.moto_log = open(os.path.join(work, "moto.log"), "wb")
        # `S3_SERVER=s3s-fs=PATH`: s3s-fs (Rust, objects as files under the work directory, its
        # listing a directory walk) in moto's place, for an S3 whose listing costs a round trip
        # rather than moto's Python building each page.
        server = os.environ.get("S3_SERVER", "moto")
        if server.startswith("s3s-fs="):
            root = os.path.join(work, "s3s-fs")
            os.makedirs(os.path.join(root, self.bucket), exist_ok=True)
            command = [server.split("=", 1)[1], "--host", "127.0.0.1", "--port", str(port),
                       "--access-key", "test", "--secret-key", "test", root]
            env = dict(os.environ)
        else:
            command = [os.path.join(os.path.dirname(sys.executable), "moto_server"), "-H", "127.0.0.1", "-p", str(port)]
            # Objects stay in memory (moto spools those larger than 8 MiB to temporary files).
            env = {**os.environ, "MOTO_S3_DEFAULT_KEY_BUFFER_SIZE": str(2 * OBJECT_BYTES)}
        self.moto = subprocess.Popen(command, stdout=self.moto_log, stderr=subprocess.STDOUT, env=env)
        self.moto_address = ("127.0.0.1", port)
        self.moto_base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                c = http.client.HTTPConnection(*self.moto_address, timeout=5)
                if server == "moto":
                    c.request("PUT", f"/{self.bucket}")
                    status = c.getresponse().status
                else:
                    c.connect()
                    status = 200
                c.close()
                if status == 200:
                    break
                raise SystemExit(f"{server}: creating the bucket: HTTP {status}")
            except OSError:
                if self.moto.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{command[0]} did not start: {open(self.moto_log.name).read()[-2000:]}")
                time.sleep(0.2)
        upstream = self
        hop = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}

        class Proxy(Handler):
            def setup(self):
                super().setup()
                self.moto = None

            def finish(self):
                super().finish()
                if self.moto is not None:
                    self.moto.close()

            def do_HEAD(self):
                self.forward()

            def do_GET(self):
                path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
                name = path.removeprefix(f"/{upstream.bucket}/")
                upstream.counter.add(name)
                upstream.counter.took(name, self.forward(name))

            def forward(self, name=None):
                """Forwards the request after the latency: the seconds moto took to answer."""
                time.sleep(upstream.latency)
                started = time.perf_counter()
                headers = {k: v for k, v in self.headers.items() if k.lower() not in hop}
                for attempt in (0, 1):
                    if self.moto is None:
                        self.moto = http.client.HTTPConnection(*upstream.moto_address, timeout=60)
                        self.moto.connect()
                        self.moto.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    try:
                        self.moto.request(self.command, self.path, headers=headers)
                        resp = self.moto.getresponse()
                        body = resp.read()
                        took = time.perf_counter() - started
                        break
                    except (OSError, http.client.HTTPException):
                        # moto closed an idle connection: once more on a new one.
                        self.moto.close()
                        self.moto = None
                        if attempt:
                            raise
                if resp.will_close:
                    self.moto.close()
                    self.moto = None
                self.send_response_only(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in hop and k.lower() != "content-length":
                        self.send_header(k, v)
                length = resp.getheader("content-length") if self.command == "HEAD" else str(len(body))
                self.send_header("content-length", length or "0")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                    if name is not None:
                        upstream.counter.add_bytes(name, len(body))
                return took

        self.server, self.base = serve(Proxy)
        self.writer = S3Store(self.bucket, endpoint=self.moto_base, client_options={"allow_http": True},
                              **self.credentials)

    def registration(self):
        return {"url": f"s3://{self.bucket}/",
                "options": {"endpoint": self.base, "allow_http": "true", **self.credentials}}

    def direct_store(self):
        return S3Store(self.bucket, endpoint=self.base, client_options=CLIENT, **self.credentials)

    def put(self, name, size):
        """Writes the first `size` bytes of DATA as object `name`: (its size). moto copies a
        whole object on every GET, ranged or not, so each case's objects are only as large as
        its reads need (the random case's, 64 MiB)."""
        obstore.put(self.writer, name, DATA[:size])
        self.etags[name] = obstore.head(self.writer, name)["e_tag"]
        return size

    def delete(self, name):
        obstore.delete(self.writer, name)

    def url(self, name):
        return f"s3://{self.bucket}/{name}"

    def etag(self, name):
        return self.etags[name]

    def count(self, name):
        return self.counter.count(name)

    def sent_bytes(self, name):
        """Body bytes of the GETs of `name` sent through the proxy."""
        return self.counter.bytes(name)

    def close(self):
        self.server.shutdown()
        self.moto.terminate()
        self.moto.wait(timeout=30)
        self.moto_log.close()


def register(server, upstream, store, name, offsets, size):
    """A one-array store whose chunk i is CHUNK bytes at offsets[i] of object `name`."""
    url = upstream.url(name)
    n = len(offsets)
    manifest = {str(i): {"path": url, "offset": o, "length": CHUNK} for i, o in enumerate(offsets)}
    node = {
        "zarr_format": 3, "node_type": "array", "shape": [n * CHUNK], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [CHUNK]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": [{"name": "bytes"}], "manifest": manifest,
    }
    doc = {"nodes": {"x": node}, "sources": {url: {"etag": upstream.etag(name), "size": size}}}
    server.put_json(f"/api/v1/stores/{store}?verify=false", doc)


async def timed(coro):
    t = time.perf_counter()
    data = await coro
    return time.perf_counter() - t, bytes(data)


async def read_one_by_one(getters):
    """Awaits each getter in turn: (total seconds, per-read seconds, bytes)."""
    t0 = time.perf_counter()
    each, got = [], []
    for get in getters:
        s, data = await timed(get())
        each.append(s)
        got.append(data)
    return time.perf_counter() - t0, each, got


async def storm(getters):
    """Runs every getter at once: (seconds to the last answer, bytes)."""
    t0 = time.perf_counter()
    got = await asyncio.gather(*(g() for g in getters))
    return time.perf_counter() - t0, [bytes(g) for g in got]


async def one_run(server, upstream, run):
    """The three cases on one backend; the same offsets and reads for every backend of a run."""
    rng = random.Random(1000 + run)
    direct = upstream.direct_store()
    out = {"backend": upstream.backend, "run": run}
    for kind in KINDS:
        name = f"{kind}-{run}-{os.getpid()}.bin"
        if kind == "sequential":
            offsets = [i * CHUNK for i in range(SEQ_CHUNKS)]
            reads = list(range(SEQ_CHUNKS))
        elif kind == "random":
            offsets = sorted(rng.sample(range(OBJECT_BYTES // CHUNK), RANDOM_CHUNKS))
            offsets = [o * CHUNK for o in offsets]
            reads = rng.sample(range(RANDOM_CHUNKS), RANDOM_CHUNKS)
        else:
            offsets = [i * 8 * (64 << 10) for i in range(STORM_CHUNKS)]
            reads = [c % STORM_CHUNKS for c in range(STORM_CLIENTS * STORM_CHUNKS)]
        direct_name = f"direct-{name}"
        need = OBJECT_BYTES if kind == "random" else -(-(max(offsets) + CHUNK) // (1 << 20)) << 20
        size = upstream.put(name, need)
        upstream.put(direct_name, need)
        store = f"rl-{upstream.backend}-{kind}-{run}"
        register(server, upstream, store, name, offsets, size)
        gate = HTTPStore.from_url(f"{server.base}/{store}/x/c", client_options=CLIENT)
        gate_get = [lambda i=i: _bytes(obstore.get_async(gate, str(i))) for i in reads]
        direct_get = [lambda o=offsets[i]: obstore.get_range_async(direct, direct_name, start=o, end=o + CHUNK)
                      for i in reads]
        before = upstream.count(name)
        if kind == "storm":
            gate_s, gate_bytes = await storm(gate_get)
            direct_s, direct_bytes = await storm(direct_get)
            gate_each = direct_each = []
        else:
            gate_s, gate_each, gate_bytes = await read_one_by_one(gate_get)
            direct_s, direct_each, direct_bytes = await read_one_by_one(direct_get)
        want = [DATA[offsets[i]:offsets[i] + CHUNK] for i in reads]
        if gate_bytes != want or direct_bytes != want:
            raise SystemExit(f"{upstream.backend} {kind}: bytes differ from the source")
        gets = upstream.count(name) - before
        out[kind] = {
            "backend": upstream.backend, "reads": len(reads), "gate_seconds": gate_s, "direct_seconds": direct_s,
            "upstream_gets": gets, "direct_gets": upstream.count(direct_name),
            "gate_p50_ms": median(gate_each) * 1000 if gate_each else None,
            "direct_p50_ms": median(direct_each) * 1000 if direct_each else None,
            "object_bytes": size, "origin_ms_per_get": upstream.counter.origin_ms(name),
            "direct_origin_ms_per_get": upstream.counter.origin_ms(direct_name),
        }
        upstream.delete(name)
        upstream.delete(direct_name)
        log(f"run {run} {upstream.backend} {kind}: zarrgate {gate_s:.3f} s, {gets} upstream GETs; "
            f"direct {direct_s:.3f} s")
    return out


async def _bytes(result):
    r = await result
    return await r.bytes_async()


def render(data):
    rows = []
    backends = []
    for r in data["results"]["runs"]:
        if r["backend"] not in backends:
            backends.append(r["backend"])
    for backend in backends:
        for kind in KINDS:
            rs = [r[kind] for r in data["results"]["runs"] if r["backend"] == backend]
            reads = rs[0]["reads"]
            ratio = median([r["gate_seconds"] / r["direct_seconds"] for r in rs])
            gets = median([r["upstream_gets"] for r in rs])
            added = None
            if rs[0]["gate_p50_ms"] is not None:
                added = median([r["gate_p50_ms"] - r["direct_p50_ms"] for r in rs])
            rows.append([backend, kind, str(reads), fmt(ratio) + "x", f"{gets:g} ({gets / reads:.3f}/read)",
                         f"{median([r['direct_gets'] for r in rs]):g}",
                         "" if added is None else f"{added:+.2f} ms"])
    return table(["backend", "case", "reads", "time vs direct", "upstream GETs", "direct GETs", "added p50"], rows)


def main():
    unknown = set(BACKENDS) - {"http", "s3"}
    if unknown or not BACKENDS:
        raise SystemExit(f"BACKENDS: http, s3 or both, not {os.environ.get('BACKENDS')!r}")
    bench = Bench()
    upstreams = []
    results = []
    try:
        for backend in BACKENDS:
            upstreams.append(HttpUpstream(LATENCY_MS) if backend == "http" else S3Upstream(LATENCY_MS, bench.work))
        with Server(bench, f"sqlite://{bench.work}/catalog.db") as server:
            for upstream in upstreams:
                server.put_json(f"/api/v1/object-stores/{upstream.object_store}", upstream.registration())
            for run in range(runs(5)):
                for upstream in upstreams:
                    results.append(asyncio.run(one_run(server, upstream, run)))
            metrics = {u.backend: {"object_store": u.object_store, **{
                k: server.metric(f"zarrgate_{k}", object_store=u.object_store) for k in (
                    "upstream_bytes_total", "upstream_served_bytes_total", "upstream_joins_total",
                    "readahead_hits_total", "readahead_wasted_bytes_total")}} for u in upstreams}
    finally:
        for upstream in upstreams:
            upstream.close()
    name = "remote-latency" if len(BACKENDS) > 1 else f"remote-latency-{BACKENDS[0]}"
    name = os.environ.get("RESULT_NAME", name)
    bench.publish(name, {"runs": results, "metrics": metrics}, render,
                  latency_ms=LATENCY_MS, chunk_bytes=CHUNK, backends=BACKENDS)
    bench.cleanup()


if __name__ == "__main__":
    main()
