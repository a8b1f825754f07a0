#!/usr/bin/env python3
"""Renders every bench/results/*.json as markdown tables (each benchmark's own `render`), and with
--readme writes them into bench/README.md between the "results:begin" and "results:end" markers.

  python3 bench/report.py            # print
  python3 bench/report.py --readme   # and update bench/README.md
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

SECTIONS = [
    ("ingest", "Ingest", "ingest"),
    ("cold_read", "Cold reads", "cold_read"),
    ("throughput", "Warm throughput against nginx", "throughput"),
    ("footprint", "Cached footprint", "footprint"),
    ("rss_load", "RSS under random-read load", "rss_load"),
    ("block_size", "Block size and TOAST", "block_size"),
    ("kerchunk", "Kerchunk JSON and parquet registration", "kerchunk_registration"),
]


def render_block_encoding():
    """bench/results/block_encoding.json, written by `cargo run --release --example block_encoding`."""
    path = os.path.join(h.RESULTS, "block_encoding.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        rows = json.load(f)
    table = h.table(["layout", "references", "encoding", "stored bytes", "stored B/ref", "memory B/ref", "encode us",
                     "decode us"],
                    [[r["layout"], f"{r['refs']:,}", r["encoding"], f"{r['bytes']:,}", h.fmt(r["bytes_per_ref"]),
                      h.fmt(r.get("memory_bytes_per_ref")), h.fmt(r["encode_us"], 1), h.fmt(r["decode_us"], 1)]
                     for r in rows])
    when = __import__("datetime").datetime.fromtimestamp(os.path.getmtime(path), __import__("datetime").timezone.utc)
    return (f"### Block encodings\n\n`bench/block_encoding.rs` (`cargo run --release --example block_encoding`), "
            f"{when.isoformat(timespec='seconds')}, median of 7 runs\n\n{table}\n")


def render_all():
    parts = []
    for name, title, module in SECTIONS:
        path = os.path.join(h.RESULTS, f"{name}.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            data = json.load(f)
        mod = __import__(module)
        m = data["machine"]
        parts.append(f"### {title}\n\n`bench/{module}.py`, {m['date']}, commit {data['commit']}\n\n{mod.render(data)}\n")
    encodings = render_block_encoding()
    if encodings:
        parts.append(encodings)
    return "\n".join(parts)


def main():
    text = render_all()
    print(text)
    if "--readme" in sys.argv:
        readme = os.path.join(h.BENCH, "README.md")
        content = open(readme).read()
        begin, end = "<!-- results:begin -->", "<!-- results:end -->"
        head, rest = content.split(begin, 1)
        _, tail = rest.split(end, 1)
        with open(readme, "w") as f:
            f.write(f"{head}{begin}\n\n{text}\n{end}{tail}")
        h.log(f"updated {readme}")


if __name__ == "__main__":
    main()
