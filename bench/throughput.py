#!/usr/bin/env python3
"""Warm throughput against nginx serving the same bytes from the same files, in the same run.

Three comparisons, RUNS (5) times each, wrk with WRK_THREADS (2) threads and CONNECTIONS (32)
connections for SECONDS (10) after a warm-up, zarrgate and nginx alternating (which goes first
alternates too); the ratio is taken within each run, and the median ratio reported:
  inline 1 KiB  GET /inline1k/data/c/I/J, random chunks of the 1 KiB inline-chunk store (one
                cached block) vs nginx serving the same 10,000 chunks as 1 KiB static files at
                the same paths (bench/gen_native.py writes them)
  zarr.json     GET /inline1k/zarr.json (the root group with its consolidated metadata) vs nginx
                serving the same bytes as a static file
  1 MiB virtual GET /big1m/data/c/I, random 1 MiB virtual chunks read from data/src-*.bin (in the page
                cache) vs nginx serving the same byte ranges of the same files (Range: bytes=a-b)
nginx: bench/nginx.conf (2 workers, sendfile, open_file_cache, no access log). Both run on this
machine with wrk, so all three share its 2 cores: the comparison is what matters, not the
absolute figures. The catalog is PostgreSQL (a fresh database). PERF=1 records a perf profile of
zarrgate during one more inline and zarr.json run (bench/results/throughput-perf-*.txt). Also checks that HEAD of a virtual
chunk makes no upstream request.

  python3 bench/throughput.py
  RUNS=3 SECONDS=5 ONLY=inline python3 bench/throughput.py
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

TARGETS = {"inline 1 KiB": 0.5, "zarr.json": 0.5, "1 MiB virtual": 0.9}


def cases(bench):
    big = h.json.load(open(os.path.join(bench.dir, "big1m.meta.json")))
    return {
        "inline 1 KiB": (("zarr", ["/inline1k/data", 100, 100]), ("zarr", ["/inline1k/data", 100, 100])),
        "zarr.json": (("fixed", ["/inline1k/zarr.json"]), ("fixed", ["/inline1k/zarr.json"])),
        "1 MiB virtual": (("zarr", ["/big1m/data", big["chunks"]]),
                          ("range", [big["chunks"], big["per_file"], h.MIB])),
    }


def main():
    runs = h.runs(5)
    seconds = h.env_int("SECONDS", 10)
    connections = h.env_int("CONNECTIONS", 32)
    threads = h.env_int("WRK_THREADS", 2)
    only = os.environ.get("ONLY")
    bench = h.Bench()
    quiet = h.Quiet()
    results = []
    try:
        bench.generate([], extras=True)
        with h.Postgres("throughput") as db, h.Server(bench, db.url) as server:
            server.object_store(bench.data)
            server.register("inline1k", os.path.join(bench.dir, "inline1k.json"))
            server.register("big1m", os.path.join(bench.dir, "big1m.json"))
            status, body, _ = server.get("/inline1k/zarr.json")
            assert status == 200
            with open(os.path.join(bench.dir, "inline1k", "zarr.json"), "wb") as f:
                f.write(body)
            head_check = check_head(server)
            subprocess.run(f"cat {bench.data}/*.bin > /dev/null", shell=True, check=True)
            quiet.wait("throughput")
            with h.Nginx(bench, bench.dir) as nginx, h.Nginx(bench, bench.dir, sendfile=False) as copying:
                targets = {"zarrgate": server.base, "nginx": nginx.base, "nginx_copy": copying.base}
                for name, (zg, ng) in cases(bench).items():
                    if only and only not in name:
                        continue
                    modes = {"zarrgate": zg, "nginx": ng, "nginx_copy": ng}
                    # Large chunks: also nginx copying the bytes through its own memory, as any
                    # server that reads from an object store must (no sendfile).
                    who_all = ("zarrgate", "nginx", "nginx_copy") if name == "1 MiB virtual" else ("zarrgate", "nginx")
                    for who in who_all:  # warm-up: blocks, page cache, nginx file cache
                        h.wrk(targets[who], *modes[who], connections=connections, threads=threads, seconds=3)
                    for r in range(runs):
                        order = who_all if r % 2 == 0 else tuple(reversed(who_all))
                        run = {"case": name, "run": r}
                        for who in order:
                            what = f"{name} {who} run {r + 1}/{runs}"

                            def measure():
                                rss0 = server.rss_kib()
                                res = h.wrk(targets[who], *modes[who], connections=connections, threads=threads,
                                            seconds=seconds)
                                h.check_wrk(res, what)
                                if who == "zarrgate":
                                    res["rss_mib"] = max(rss0, server.rss_kib()) / 1024
                                return res
                            res = h.repeat_quietly(quiet, what, measure)
                            h.log(f"{what}: {res['rps']:,.0f} req/s, {res['mb_per_s']:,.0f} MiB/s")
                            run[who] = res
                        run["ratio"] = run["zarrgate"]["rps"] / run["nginx"]["rps"]
                        if "nginx_copy" in run:
                            run["ratio_copy"] = run["zarrgate"]["rps"] / run["nginx_copy"]["rps"]
                        results.append(run)
                    if os.environ.get("PERF") == "1" and name != "1 MiB virtual":
                        out = os.path.join(h.RESULTS, f"throughput-perf-{name.split()[0].replace('.', '_')}.txt")
                        quiet.wait_idle("perf")
                        rec, perf_data = h.perf_record(server.pid, seconds, out)
                        h.wrk(server.base, *zg, connections=connections, threads=threads, seconds=seconds)
                        rec.wait()
                        h.perf_report(perf_data, out, limit=0.8)
                        h.log(f"{name}: perf profile of zarrgate in {out}")
            hits, misses, _, _ = server.cache()
        bench.publish(os.environ.get("RESULT_NAME", "throughput"), results, render, seconds=seconds,
                      connections=connections, threads=threads, head_check=head_check,
                      block_cache={"hits": hits, "misses": misses})
    finally:
        bench.cleanup()


def check_head(server):
    """HEAD of a virtual chunk: its answer, and the upstream requests it made (must be 0)."""
    before = server.metric("zarrgate_upstream_requests_total")
    status, _, headers = server.request("HEAD", "/big1m/data/c/3")
    after = server.metric("zarrgate_upstream_requests_total")
    return {"status": status, "content_length": headers.get("content-length"), "upstream_requests": after - before}


def render(data):
    rows = []
    verdicts = []
    groups = {}
    for r in data["results"]:
        groups.setdefault(r["case"], []).append(r)
    for name, rs in groups.items():
        zg = [r["zarrgate"] for r in rs]
        ng = [r["nginx"] for r in rs]
        ratios = [r["ratio"] for r in rs]
        rows.append([name, len(rs), h.fmt_spread([x["rps"] for x in zg], 0), h.fmt_spread([x["rps"] for x in ng], 0),
                     h.fmt_spread(ratios), h.fmt(h.median([x["mb_per_s"] for x in zg]), 0),
                     h.fmt(h.median([x["mb_per_s"] for x in ng]), 0),
                     h.fmt(h.median([x["latency_us"]["p50"] / 1000 for x in zg])),
                     h.fmt(h.median([x["latency_us"]["p50"] / 1000 for x in ng])),
                     h.fmt(h.median([x["latency_us"]["p99"] / 1000 for x in zg])),
                     h.fmt(h.median([x["latency_us"]["p99"] / 1000 for x in ng]))])
        target = TARGETS[name]
        m = h.median(ratios)
        verdict = "met" if m >= target else f"missed: {m:.2f}x is {m / target:.2f} of the target"
        verdicts.append(f"- {name}: {m:.2f}x nginx (target >= {target}x): {verdict}")
        copies = [r["ratio_copy"] for r in rs if "ratio_copy" in r]
        if copies:
            nc = [r["nginx_copy"] for r in rs]
            verdicts.append(f"- {name}: {h.median(copies):.2f}x nginx with `sendfile off` "
                            f"({h.fmt_spread([x['rps'] for x in nc], 0)} req/s, "
                            f"{h.fmt(h.median([x['mb_per_s'] for x in nc]), 0)} MiB/s), which copies "
                            "the bytes through user space as zarrgate must")
        if name == "inline 1 KiB":
            rps = h.median([x["rps"] for x in zg])
            verdicts.append(f"- inline 1 KiB absolute: {rps:,.0f} req/s (target >= 20,000 req/s): "
                            + ("met" if rps >= 20000 else f"missed by {20000 / rps:.2f}x"))
    hc = data["head_check"]
    verdicts.append(f"- HEAD of a virtual chunk: HTTP {hc['status']}, Content-Length {hc['content_length']}, "
                    f"{hc['upstream_requests']:.0f} upstream requests: " + ("met" if hc["upstream_requests"] == 0 else "MISSED"))
    out = h.table(["case", "runs", "zarrgate req/s", "nginx req/s", "ratio", "zarrgate MiB/s", "nginx MiB/s",
                   "zarrgate p50 ms", "nginx p50 ms", "zarrgate p99 ms", "nginx p99 ms"], rows)
    return (f"wrk -t{data['threads']} -c{data['connections']} -d{data['seconds']}s\n\n" + out + "\n\n"
            + "\n".join(verdicts))


if __name__ == "__main__":
    main()
