#!/usr/bin/env bash
# Every benchmark of bench/README.md, in order, then the plot and the results tables in the README.
#
#   bench/run_all.sh                 # about 45 minutes on a quiet 2-core machine
#   BUILD=0 bench/run_all.sh         # use target/release/zarrgate as it is
#   ONLY="ingest cold_read" bench/run_all.sh
#
# Each script waits for a quiet machine first (load < 0.5, no cargo/rustc/pytest; QUIET=0 skips the
# wait) and repeats a run that other processes disturbed. Data goes to $ZARRGATE_BENCH_DIR
# (default /tmp/zarrgate-bench, about 2.2 GB), results to bench/results/*.json.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
only=${ONLY:-ingest cold_read throughput footprint rss_load block_size kerchunk_registration}

if [[ ${BUILD:-1} != 0 && -z ${ZARRGATE_BIN:-} ]]; then
    cargo build --release --quiet --bin zarrgate
fi
# One copy of the binary for every script, so that a rebuild meanwhile changes nothing.
bin_dir=$(mktemp -d)
trap 'rm -rf "$bin_dir"' EXIT
cp "${ZARRGATE_BIN:-target/release/zarrgate}" "$bin_dir/zarrgate"
export ZARRGATE_BIN=$bin_dir/zarrgate

python3 bench/gen_native.py --sizes 1e4,1e5,1e6,1e7 --extras
for name in $only; do
    echo "== bench/$name.py" >&2
    PERF=${PERF:-1} python3 "bench/$name.py"
done
if [[ " $only " == *" cold_read "* ]]; then
    "$(bench/python-env.sh | tail -1)/bin/python" bench/plot_cold.py
fi
python3 bench/report.py --readme > /dev/null
