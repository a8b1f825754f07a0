#!/usr/bin/env python3
"""Instructions per request of one kind of read, counted by callgrind: repeatable where wrk's
req/s are not (bench/README.md, Stops 16 to 19).

The release binary runs under `valgrind --tool=callgrind --instr-atstart=no` on an SQLite catalog
with the two stores of bench/gen_native.py --extras (inline1k, big1m); one kept-alive connection
sends 200 requests to warm up, then N (2,000) are counted, and the total of the dump divided by N
is printed. The requests counted are the bytes wrk sends (`GET <path> HTTP/1.1` and `Host`, nothing
else), so that the count is that of bench/throughput.py's requests; until Stop 20 they were
http.client's (with `Accept-Encoding: identity` and `Content-Type`: about 900 instructions more).
`callgrind_annotate --inclusive=yes` on the dump (kept in $OUT, default /tmp/zarrgate-callgrind)
names where they go. MINIMAL=<path of bench/minimal_server.rs's binary> counts the floor instead,
answering with the bytes the zarrgate under test answers `path` with.

  python3 bench/callgrind.py target/release/zarrgate /inline1k/zarr.json
  python3 bench/callgrind.py target/release/zarrgate /inline1k/data/c/5/7 2000
"""

import glob
import http.client
import os
import socket
import subprocess
import sys
import time


def wrk_request(path, port):
    """The bytes wrk sends for `path`."""
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()


def read_answer(sock, buffer):
    """One answer off `sock` (a Content-Length body): its status and body, and what follows it."""
    while b"\r\n\r\n" not in buffer:
        buffer += sock.recv(65536)
    head, rest = buffer.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = next((int(v) for k, v in (line.split(":", 1) for line in lines[1:]) if k.lower() == "content-length"), 0)
    while len(rest) < length:
        rest += sock.recv(65536)
    return status, rest[:length], rest[length:]


def count(command, out, port, path, n, setup=None):
    """Instructions per request of `path` from the server that `command` starts on `port`, under
    callgrind: `setup(port)` first, 200 requests to warm up, then `n` counted. Returns the count
    and the answer's body."""
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}", *command],
        env=dict(os.environ, ZARRGATE_LOG="info", ZARRGATE_LOG_FORMAT="text", NO_COLOR="1"),
        stdout=open(out + ".log", "w"), stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        if setup:
            setup(port)
        sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        request, buffer, body = wrk_request(path, port), b"", b""
        for _ in range(200):
            sock.sendall(request)
            status, body, buffer = read_answer(sock, buffer)
            assert status == 200, f"GET {path}: HTTP {status}"
        subprocess.run(["callgrind_control", "-i", "on", str(server.pid)], check=True, capture_output=True)
        for _ in range(n):
            sock.sendall(request)
            _, _, buffer = read_answer(sock, buffer)
        subprocess.run(["callgrind_control", "-d", str(server.pid)], check=True, capture_output=True)
    finally:
        server.terminate()
        server.wait()
    total = 0
    for f in glob.glob(out + ".*"):
        if f.endswith(".log"):
            continue
        for line in open(f):
            if line.startswith("totals:"):
                total += int(line.split()[1])
    return total / n, body


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    binary, path = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    bench = os.environ.get("ZARRGATE_BENCH_DIR", "/tmp/zarrgate-bench")
    out_dir = os.environ.get("OUT", "/tmp/zarrgate-callgrind")
    os.makedirs(out_dir, exist_ok=True)
    for f in glob.glob(os.path.join(out_dir, "*")):
        os.remove(f)

    def register(port):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

        def send(method, url, body=None):
            c.request(method, url, body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            return r.status

        assert send("PUT", "/api/v1/object-stores/bench", f'{{"url": "file://{bench}/data/"}}'.encode()) < 300
        for store in ("inline1k", "big1m"):
            with open(os.path.join(bench, f"{store}.json"), "rb") as f:
                status = send("PUT", f"/api/v1/stores/{store}", f.read())
            assert status < 300, f"registering {store}: HTTP {status} (python3 bench/gen_native.py --extras first)"

    port = 18500
    command = [binary, "--listen", f"127.0.0.1:{port}", "--database-url", f"sqlite://{out_dir}/catalog.db"]
    per_request, body = count(command, os.path.join(out_dir, "callgrind.out"), port, path, n, register)
    print(f"{path}: {per_request:,.0f} instructions per request (dumps in {out_dir})")
    minimal = os.environ.get("MINIMAL")
    if minimal:
        answer = os.path.join(out_dir, "answer")
        with open(answer, "wb") as f:
            f.write(body)
        command = [minimal, f"127.0.0.1:{port + 1}", answer, "zarrgate"]
        floor, _ = count(command, os.path.join(out_dir, "minimal.out"), port + 1, path, n)
        print(f"the floor (minimal_server, the same {len(body):,} bytes): {floor:,.0f} instructions per request; "
              f"zarrgate's own work {per_request - floor:,.0f}")


if __name__ == "__main__":
    main()
