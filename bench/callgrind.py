#!/usr/bin/env python3
"""Instructions per request of one kind of read, counted by callgrind: repeatable where wrk's
req/s are not (bench/README.md, Stops 16 to 19).

The release binary runs under `valgrind --tool=callgrind --instr-atstart=no` on an SQLite catalog
with the two stores of bench/gen_native.py --extras (inline1k, big1m); one kept-alive connection
sends 200 requests to warm up, then N (2,000) are counted, and the total of the dump divided by N
is printed. The client sends `Accept-Encoding: identity`. `callgrind_annotate --inclusive=yes` on
the dump (kept in $OUT, default /tmp/zarrgate-callgrind) names where they go.

  python3 bench/callgrind.py target/release/zarrgate /inline1k/zarr.json
  python3 bench/callgrind.py target/release/zarrgate /inline1k/data/c/5/7 2000
"""

import glob
import http.client
import os
import subprocess
import sys
import time


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
    port = 18500
    out = os.path.join(out_dir, "callgrind.out")
    env = dict(os.environ, ZARRGATE_LOG="info", ZARRGATE_LOG_FORMAT="text", NO_COLOR="1")
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}", binary, "--listen",
         f"127.0.0.1:{port}", "--database-url", f"sqlite://{out_dir}/catalog.db"],
        env=env, stdout=open(os.path.join(out_dir, "server.log"), "w"), stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                c.request("GET", "/healthz")
                c.getresponse().read()
                break
            except OSError:
                time.sleep(0.2)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

        def send(method, url, body=None):
            c.request(method, url, body=body, headers={"Accept-Encoding": "identity", "Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            return r.status

        assert send("PUT", "/api/v1/object-stores/bench", f'{{"url": "file://{bench}/data/"}}'.encode()) < 300
        for store in ("inline1k", "big1m"):
            with open(os.path.join(bench, f"{store}.json"), "rb") as f:
                status = send("PUT", f"/api/v1/stores/{store}", f.read())
            assert status < 300, f"registering {store}: HTTP {status} (python3 bench/gen_native.py --extras first)"
        for _ in range(200):
            assert send("GET", path) == 200
        subprocess.run(["callgrind_control", "-i", "on", str(server.pid)], check=True, capture_output=True)
        for _ in range(n):
            send("GET", path)
        subprocess.run(["callgrind_control", "-d", str(server.pid)], check=True, capture_output=True)
    finally:
        server.terminate()
        server.wait()
    total = 0
    for f in glob.glob(out + "*"):
        for line in open(f):
            if line.startswith("totals:"):
                total += int(line.split()[1])
    print(f"{path}: {total / n:,.0f} instructions per request (dumps in {out_dir})")


if __name__ == "__main__":
    main()
