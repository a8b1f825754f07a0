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
nginx: bench/nginx.conf (2 workers, sendfile, open_file_cache, no access log), twice: as configured,
and with `sendfile off` (nginx copying the bytes through its own memory, as a proxy must): the
targets of issue 17 are ratios to the latter, >= 0.9x in all three cases. BASELINE_BIN=<path> also
measures another zarrgate binary (main's release build, say) in the same runs, on the same catalog.
All run on this machine with wrk, so they share its 2 cores: the comparison is what matters, not
the absolute figures. The catalog is PostgreSQL (a fresh database). PERF=1 records a perf profile of
zarrgate during one more inline and zarr.json run (bench/results/throughput-perf-*.txt). MINIMAL=1 also
measures bench/minimal_server.rs on zarr.json: zarrgate's own stack (tokio, hyper, mimalloc) answering with the
same bytes and headers and doing nothing else, the floor under zarrgate's small answers (MINIMAL_BIN=<path>, or
built unless BUILD=0). Each run records the CPU per request of the server and of wrk, which share the cores. Also
checks that HEAD of a virtual chunk makes no upstream request.

  python3 bench/throughput.py
  RUNS=3 SECONDS=5 ONLY=inline python3 bench/throughput.py
  BASELINE_BIN=/path/to/main/zarrgate RUNS=5 python3 bench/throughput.py
  MINIMAL=1 RUNS=11 SECONDS=4 ONLY=zarr.json python3 bench/throughput.py
"""

import contextlib
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

# Ratios to nginx with `sendfile off` (issue 17).
TARGETS = {"inline 1 KiB": 0.9, "zarr.json": 0.9, "1 MiB virtual": 0.9}


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
        baseline_bin = os.environ.get("BASELINE_BIN")
        with h.Postgres("throughput") as db, h.Server(bench, db.url) as server, contextlib.ExitStack() as stack:
            server.object_store(bench.data)
            server.register("inline1k", os.path.join(bench.dir, "inline1k.json"))
            server.register("big1m", os.path.join(bench.dir, "big1m.json"))
            status, body, _ = server.get("/inline1k/zarr.json")
            assert status == 200
            with open(os.path.join(bench.dir, "inline1k", "zarr.json"), "wb") as f:
                f.write(body)
            head_check = check_head(server)
            baseline = None
            if baseline_bin:
                copy = bench.private_copy(baseline_bin, "zarrgate-baseline")
                baseline = stack.enter_context(h.Server(bench, db.url, name="baseline", binary=copy))
            minimal = None
            if os.environ.get("MINIMAL") == "1":
                minimal = stack.enter_context(h.Minimal(bench, minimal_binary(bench),
                                                        os.path.join(bench.dir, "inline1k", "zarr.json")))
            subprocess.run(f"cat {bench.data}/*.bin > /dev/null", shell=True, check=True)
            quiet.wait("throughput")
            with h.Nginx(bench, bench.dir) as nginx, h.Nginx(bench, bench.dir, sendfile=False) as copying:
                targets = {"zarrgate": server.base, "nginx": nginx.base, "nginx_copy": copying.base}
                processes = {"zarrgate": server, "nginx": nginx, "nginx_copy": copying}
                if minimal:
                    targets["minimal"] = minimal.base
                    processes["minimal"] = minimal
                if baseline:
                    targets["baseline"] = baseline.base
                    processes["baseline"] = baseline
                for name, (zg, ng) in cases(bench).items():
                    if only and only not in name:
                        continue
                    modes = {"zarrgate": zg, "baseline": zg, "nginx": ng, "nginx_copy": ng, "minimal": zg}
                    # The pairs compared are measured one right after the other (in both orders,
                    # alternately): the baseline, zarrgate, nginx copying, the minimal server (it
                    # serves one file: zarr.json only); nginx with sendfile last.
                    floor = ("minimal",) if minimal and name == "zarr.json" else ()
                    who_all = (("baseline",) if baseline else ()) + ("zarrgate", "nginx_copy") + floor + ("nginx",)
                    for who in who_all:  # warm-up: blocks, page cache, nginx file cache
                        h.wrk(targets[who], *modes[who], connections=connections, threads=threads, seconds=3)
                    for r in range(runs):
                        order = who_all if r % 2 == 0 else tuple(reversed(who_all))
                        run = {"case": name, "run": r}
                        for who in order:
                            what = f"{name} {who} run {r + 1}/{runs}"

                            def measure():
                                rss0 = server.rss_kib()
                                cpu0 = processes[who].cpu()
                                res = h.wrk(targets[who], *modes[who], connections=connections, threads=threads,
                                            seconds=seconds)
                                h.check_wrk(res, what)
                                res["server_us_per_request"] = (processes[who].cpu() - cpu0) / max(res["requests"], 1) * 1e6
                                if who == "zarrgate":
                                    res["rss_mib"] = max(rss0, server.rss_kib()) / 1024
                                return res
                            res = h.repeat_quietly(quiet, what, measure)
                            h.log(f"{what}: {res['rps']:,.0f} req/s, {res['mb_per_s']:,.0f} MiB/s")
                            run[who] = res
                        run["ratio"] = run["zarrgate"]["rps"] / run["nginx"]["rps"]
                        run["ratio_copy"] = run["zarrgate"]["rps"] / run["nginx_copy"]["rps"]
                        if "minimal" in run:
                            run["minimal_ratio_copy"] = run["minimal"]["rps"] / run["nginx_copy"]["rps"]
                            run["over_minimal"] = run["zarrgate"]["rps"] / run["minimal"]["rps"]
                        if "baseline" in run:
                            run["baseline_ratio_copy"] = run["baseline"]["rps"] / run["nginx_copy"]["rps"]
                            run["speedup"] = run["zarrgate"]["rps"] / run["baseline"]["rps"]
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
                      connections=connections, threads=threads, head_check=head_check, baseline_bin=baseline_bin,
                      block_cache={"hits": hits, "misses": misses})
    finally:
        bench.cleanup()


def minimal_binary(bench):
    """bench/minimal_server.rs, built (unless BUILD=0) and copied like the binary under test."""
    built = h.cargo_built("MINIMAL_BIN", ["--example", "minimal_server"], os.path.join("examples", "minimal_server"))
    copy = os.path.join(bench.work, "minimal_server")
    shutil.copy2(built, copy)
    return copy


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
    with_baseline = any("baseline" in r for r in data["results"])
    for name, rs in groups.items():
        zg = [r["zarrgate"] for r in rs]
        ng = [r["nginx"] for r in rs]
        nc = [r["nginx_copy"] for r in rs if "nginx_copy" in r]
        copies = [r["ratio_copy"] for r in rs if "ratio_copy" in r]
        row = [name, len(rs), h.fmt_spread([x["rps"] for x in zg], 0), h.fmt_spread([x["rps"] for x in nc], 0),
               h.fmt_spread(copies), h.fmt_spread([x["rps"] for x in ng], 0), h.fmt_spread([r["ratio"] for r in rs])]
        if with_baseline:
            bl = [r["baseline"] for r in rs if "baseline" in r]
            row += [h.fmt_spread([x["rps"] for x in bl], 0),
                    h.fmt_spread([r["baseline_ratio_copy"] for r in rs if "baseline" in r]),
                    h.fmt_spread([r["speedup"] for r in rs if "baseline" in r])]
        row += [h.fmt(h.median([x["latency_us"]["p50"] / 1000 for x in zg])),
                h.fmt(h.median([x["latency_us"]["p50"] / 1000 for x in nc])),
                h.fmt(h.median([x["latency_us"]["p99"] / 1000 for x in zg])),
                h.fmt(h.median([x["latency_us"]["p99"] / 1000 for x in nc]))]
        rows.append(row)
        target = TARGETS[name]
        m = h.median(copies) if copies else float("nan")
        verdict = "met" if m >= target else f"missed by {target - m:.2f} ({m / target:.0%} of the target)"
        verdicts.append(f"- {name}: {m:.2f}x nginx with `sendfile off` (target >= {target}x): {verdict}")
        floors = [r["minimal_ratio_copy"] for r in rs if "minimal_ratio_copy" in r]
        if floors:
            verdicts.append(f"  - the floor (bench/minimal_server.rs: the same stack and headers, no work): "
                            f"{h.fmt_spread(floors)}x nginx with `sendfile off`; zarrgate "
                            f"{h.fmt_spread([r['over_minimal'] for r in rs if 'over_minimal' in r])}x the floor")
        if name == "inline 1 KiB":
            rps = h.median([x["rps"] for x in zg])
            verdicts.append(f"- inline 1 KiB absolute: {rps:,.0f} req/s (target >= 20,000 req/s): "
                            + ("met" if rps >= 20000 else f"missed by {20000 / rps:.2f}x"))
    hc = data["head_check"]
    verdicts.append(f"- HEAD of a virtual chunk: HTTP {hc['status']}, Content-Length {hc['content_length']}, "
                    f"{hc['upstream_requests']:.0f} upstream requests: " + ("met" if hc["upstream_requests"] == 0 else "MISSED"))
    headers = ["case", "runs", "zarrgate req/s", "nginx copying req/s", "ratio (copying)", "nginx sendfile req/s",
               "ratio (sendfile)"]
    if with_baseline:
        headers += ["baseline req/s", "baseline ratio (copying)", "zarrgate / baseline"]
    headers += ["zarrgate p50 ms", "nginx copying p50 ms", "zarrgate p99 ms", "nginx copying p99 ms"]
    out = h.table(headers, rows)
    return (f"wrk -t{data['threads']} -c{data['connections']} -d{data['seconds']}s\n\n" + out + "\n\n"
            + cpu_table(groups) + "\n\n" + "\n".join(verdicts))


def cpu_table(groups):
    """CPU per request (medians over the runs, in microseconds) of the server and of wrk: the two
    share the machine's cores, so a server whose answers cost its client more is slower too."""
    rows = []
    for name, rs in groups.items():
        def us(who, key):
            values = [r[who][key] for r in rs if who in r and key in r[who]]
            return h.median(values) if values else float("nan")
        zg, nc = us("zarrgate", "server_us_per_request"), us("nginx_copy", "server_us_per_request")
        wz, wn = us("zarrgate", "client_us_per_request"), us("nginx_copy", "client_us_per_request")
        rows.append([name, h.fmt(zg), h.fmt(nc), h.fmt(zg / nc), h.fmt(wz), h.fmt(wn), h.fmt((zg + wz) / (nc + wn)),
                     h.fmt(us("minimal", "server_us_per_request")), h.fmt(us("minimal", "client_us_per_request"))])
    return "CPU per request, microseconds (median of the runs):\n\n" + h.table(
        ["case", "zarrgate", "nginx copying", "ratio", "wrk, against zarrgate", "wrk, against nginx copying",
         "ratio, server + wrk", "minimal server", "wrk, against it"], rows)


if __name__ == "__main__":
    main()
