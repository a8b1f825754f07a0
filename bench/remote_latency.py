#!/usr/bin/env python3
"""Reads from an object store far away: zarrgate against direct reads with obstore.

An HTTP object store with injected latency (a threaded HTTP/1.1 server in this process: ranges,
ETags, `LATENCY_MS` before every response head, every GET counted) serves one object per run
(a fresh name, so every run starts cold). A store of 16 KiB chunks over that object is registered
in zarrgate, and each case reads the same chunks twice: through zarrgate (obstore's HTTPStore on
the store's URL, whole chunk GETs) and directly (obstore's HTTPStore on the object store, ranged
GETs), with the same client library both ways:

- sequential: one reader, `SEQ_CHUNKS` (256) consecutive chunks in order;
- random: one reader, `RANDOM_CHUNKS` (128) chunks at random over a 64 MiB object, each alone;
  the p50 of zarrgate's latency minus the direct one is the latency zarrgate adds;
- storm: 64 readers at once, each reading the same 8 cold chunks (8 blocks apart).

Figures are medians over `RUNS` runs (default 5); ratios are zarrgate's time over the direct
time of the same run. Needs obstore (the test venv: `scripts/python-env.sh`) and the release
binary (`ZARRGATE_BIN`, or `cargo build --release`).

    "$(scripts/python-env.sh | tail -1)/bin/python" bench/remote_latency.py
"""

import asyncio
import hashlib
import http.server
import os
import random
import re
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Bench, Server, fmt, log, median, runs, table  # noqa: E402

import obstore  # noqa: E402
from obstore.store import HTTPStore  # noqa: E402

LATENCY_MS = int(os.environ.get("LATENCY_MS", "20"))
CHUNK = 16 << 10
SEQ_CHUNKS = int(os.environ.get("SEQ_CHUNKS", "256"))
RANDOM_CHUNKS = int(os.environ.get("RANDOM_CHUNKS", "128"))
OBJECT_BYTES = 64 << 20
STORM_CLIENTS = 64
STORM_CHUNKS = 8


class Upstream:
    """The object store: `OBJECT_BYTES` of pseudo-random bytes under every path, ETag by path."""

    def __init__(self, latency_ms):
        self.data = random.Random(7).randbytes(OBJECT_BYTES)
        self.latency = latency_ms / 1000
        self.lock = threading.Lock()
        self.gets = {}
        upstream = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def setup(self):
                super().setup()
                # The head and the body are two writes: without this, Nagle's algorithm and the
                # client's delayed ACK add 40 ms to every answer.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_HEAD(self):
                self.answer(body=False)

            def do_GET(self):
                with upstream.lock:
                    upstream.gets[self.path] = upstream.gets.get(self.path, 0) + 1
                self.answer(body=True)

            def answer(self, body):
                time.sleep(upstream.latency)
                etag = '"' + hashlib.md5(self.path.encode()).hexdigest() + '"'
                size = len(upstream.data)
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
                    self.wfile.write(upstream.data[a:b])

        class Listener(http.server.ThreadingHTTPServer):
            # 64 readers x 8 chunks connect at once to the direct upstream: a backlog of 5
            # (the default) would drop SYNs and add seconds of retransmission.
            request_queue_size = 1024

        self.server = Listener(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def etag(self, name):
        return '"' + hashlib.md5(f"/{name}".encode()).hexdigest() + '"'

    def count(self, name):
        with self.lock:
            return self.gets.get(f"/{name}", 0)


def register(server, upstream, store, name, offsets):
    """A one-array store whose chunk i is CHUNK bytes at offsets[i] of object `name`."""
    url = f"{upstream.base}/{name}"
    n = len(offsets)
    manifest = {str(i): {"path": url, "offset": o, "length": CHUNK} for i, o in enumerate(offsets)}
    node = {
        "zarr_format": 3, "node_type": "array", "shape": [n * CHUNK], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [CHUNK]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": [{"name": "bytes"}], "manifest": manifest,
    }
    doc = {"nodes": {"x": node}, "sources": {url: {"etag": upstream.etag(name), "size": OBJECT_BYTES}}}
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


async def one_run(server, upstream, run, rng):
    direct = HTTPStore.from_url(upstream.base, client_options={"allow_http": True, "pool_max_idle_per_host": "128"})
    out = {}
    for kind in ("sequential", "random", "storm"):
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
        store = f"rl-{kind}-{run}"
        register(server, upstream, store, name, offsets)
        gate = HTTPStore.from_url(f"{server.base}/{store}/x/c",
                                  client_options={"allow_http": True, "pool_max_idle_per_host": "128"})
        gate_get = [lambda i=i: _bytes(obstore.get_async(gate, str(i))) for i in reads]
        direct_name = f"direct-{name}"
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
        want = [upstream.data[offsets[i]:offsets[i] + CHUNK] for i in reads]
        if gate_bytes != want or direct_bytes != want:
            raise SystemExit(f"{kind}: bytes differ from the source")
        gets = upstream.count(name) - before
        out[kind] = {
            "reads": len(reads), "gate_seconds": gate_s, "direct_seconds": direct_s,
            "upstream_gets": gets, "direct_gets": upstream.count(direct_name),
            "gate_p50_ms": median(gate_each) * 1000 if gate_each else None,
            "direct_p50_ms": median(direct_each) * 1000 if direct_each else None,
        }
        log(f"run {run} {kind}: zarrgate {gate_s:.3f} s, {gets} upstream GETs; direct {direct_s:.3f} s")
    return out


async def _bytes(result):
    r = await result
    return await r.bytes_async()


def render(data):
    rows = []
    for kind in ("sequential", "random", "storm"):
        rs = [r[kind] for r in data["results"]["runs"]]
        reads = rs[0]["reads"]
        ratio = median([r["gate_seconds"] / r["direct_seconds"] for r in rs])
        gets = median([r["upstream_gets"] for r in rs])
        added = None
        if rs[0]["gate_p50_ms"] is not None:
            added = median([r["gate_p50_ms"] - r["direct_p50_ms"] for r in rs])
        rows.append([kind, str(reads), fmt(ratio) + "x", f"{gets:g} ({gets / reads:.3f}/read)",
                     str(median([r["direct_gets"] for r in rs])),
                     "" if added is None else f"{added:+.2f} ms"])
    return table(["case", "reads", "time vs direct", "upstream GETs", "direct GETs", "added p50"], rows)


def main():
    bench = Bench()
    upstream = Upstream(LATENCY_MS)
    rng = random.Random(11)
    results = []
    with Server(bench, f"sqlite://{bench.work}/catalog.db") as server:
        server.put_json("/api/v1/object-stores/far", {"url": f"{upstream.base}/"})
        for run in range(runs(5)):
            results.append(asyncio.run(one_run(server, upstream, run, rng)))
        readahead = {k: server.metric(f"zarrgate_{k}", object_store="far") for k in (
            "upstream_bytes_total", "upstream_served_bytes_total", "upstream_joins_total", "readahead_hits_total",
            "readahead_wasted_bytes_total")}
    bench.publish("remote-latency", {"runs": results, "metrics": readahead}, render,
                  latency_ms=LATENCY_MS, chunk_bytes=CHUNK)
    bench.cleanup()


if __name__ == "__main__":
    main()
