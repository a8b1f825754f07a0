#!/usr/bin/env bash
# Registration time and peak server memory for the same references uploaded as kerchunk JSON and
# as a tar of kerchunk parquet files (default 1,000,000 references, see bench/gen_kerchunk.py).
#
#   bench/kerchunk_registration.sh            # SQLite, and PostgreSQL when reachable
#   SIDE=500 BACKENDS=sqlite bench/kerchunk_registration.sh
#   BUILD=0 bench/kerchunk_registration.sh    # use target/release/zarrgate as it is
#
# Each registration runs against a fresh release server, so that its VmHWM (peak resident set,
# from /proc/<pid>/status) is that registration's peak; "idle" is the server's VmRSS before it.
# PostgreSQL comes from ZARRGATE_BENCH_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test,
# as the tests use); a database is created for each run and dropped after it.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-/tmp/zarrgate-bench-kerchunk}
side=${SIDE:-1000}
backends=${BACKENDS:-sqlite postgres}
export PGOPTIONS="--client-min-messages=warning"
admin=${ZARRGATE_BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
port=${PORT:-18787}
base="http://127.0.0.1:$port"

cd "$repo"
if [[ ! -f $out/refs.parq.tar || $(cat "$out/side" 2>/dev/null) != "$side" ]]; then
    venv=$(scripts/python-env.sh | tail -1)
    "$venv/bin/python" bench/gen_kerchunk.py --out "$out" --side "$side"
    echo "$side" > "$out/side"
fi
[[ ${BUILD:-1} == 0 ]] || cargo build --release --quiet
work=$(mktemp -d)
bin=$work/zarrgate
cp "$repo/target/release/zarrgate" "$bin"
server=
cleanup() {
    [[ -n $server ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

kib() { awk -v k="$1" '/^'"$1"':/ {print $2}' "/proc/$server/status"; }

run() { # backend format file content-type
    local backend=$1 format=$2 file=$3 type=$4 db url
    case $backend in
        sqlite) url="sqlite://$work/$format.db" ;;
        postgres)
            db="zgbench_$$_${format//-/_}"
            psql -q "$admin" -c "drop database if exists $db" -c "create database $db" >/dev/null
            url="${admin%/*}/$db" ;;
    esac
    ZARRGATE_LOG=warn "$bin" serve --listen "127.0.0.1:$port" --database-url "$url" 2>"$work/server.log" &
    server=$!
    for _ in $(seq 100); do curl -fsS "$base/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
    curl -fsS -X PUT -H 'content-type: application/json' --data "{\"url\": \"file://$out/\"}" \
        "$base/api/v1/object-stores/bench" >/dev/null
    local idle; idle=$(kib VmRSS)
    local result; result=$(curl -sS -X PUT -H "content-type: $type" --data-binary "@$file" \
        -o "$work/answer.json" -w '%{http_code} %{time_total}' "$base/api/v1/stores/bench")
    local peak; peak=$(kib VmHWM)
    local chunks; chunks=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("chunks"))' "$work/answer.json")
    printf '%-9s %-17s %11s bytes  HTTP %s  %7.2f s  idle %4d MiB  peak %4d MiB  %s\n' "$backend" "$format" \
        "$(stat -c %s "$file")" "${result% *}" "${result#* }" $((idle / 1024)) $((peak / 1024)) "$chunks"
    kill "$server"; wait "$server" 2>/dev/null || true; server=
    [[ $backend == postgres ]] && psql -q "$admin" -c "drop database if exists $db" >/dev/null
    return 0
}

echo "$((side * side)) references; $(nproc) cores"
for backend in $backends; do
    if [[ $backend == postgres ]] && ! psql -q "$admin" -c 'select 1' >/dev/null 2>&1; then
        echo "postgres  skipped: $admin is unreachable"
        continue
    fi
    run "$backend" kerchunk-json "$out/refs.json" application/json
    run "$backend" kerchunk-parquet "$out/refs.parq.tar" application/x-tar
done
