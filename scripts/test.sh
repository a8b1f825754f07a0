#!/usr/bin/env bash
# The whole test suite: formatting, lints, Rust unit and integration tests (SQLite and
# PostgreSQL), a short run of every fuzz target (scripts/fuzz.sh), the Python client tests
# (zarr-python, xarray, VirtualiZarr on real files, a real nginx cache in front of several
# replicas, the store browser in Debian's chromium, zarrita.js in Node, GDAL from rasterio's
# wheels), and the deployment checks (scripts/check-deploy.sh).
#
#   scripts/test.sh
#
# Needs PostgreSQL at $ZARRGATE_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test,
# a database the tests use to create and drop their own). Set ZARRGATE_TEST_POSTGRES=skip to
# skip the PostgreSQL variants explicitly; otherwise an unreachable server fails the run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export ZARRGATE_TEST_POSTGRES_URL=${ZARRGATE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
step() { printf '\n== %s\n' "$*"; }

if [[ ${ZARRGATE_TEST_POSTGRES:-} != skip ]]; then
    step "PostgreSQL at ${ZARRGATE_TEST_POSTGRES_URL}"
    if command -v psql >/dev/null; then
        psql "$ZARRGATE_TEST_POSTGRES_URL" -Atc 'select version()' || {
            echo "test: PostgreSQL is unreachable at $ZARRGATE_TEST_POSTGRES_URL (or set ZARRGATE_TEST_POSTGRES=skip)" >&2
            exit 1
        }
    fi
fi

step "nginx (the caching proxy of the CDN tests)"
if ! command -v nginx >/dev/null; then
    echo "installing nginx-light from Debian's packages"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null
fi
nginx -v

step "chromium (the real browser of the store browser's tests)"
if ! command -v chromium >/dev/null; then
    echo "installing chromium from Debian's packages"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
chromium --version

step "node (zarrita.js, the JavaScript client of the tests)"
node --version || { echo "test: Node 20 or newer is needed for tests/python/test_zarrita.py" >&2; exit 1; }
scripts/js-env.sh | tail -n 1

step "Python environment"
ZARRGATE_TEST_VENV=$(scripts/python-env.sh | tail -n 1)
export ZARRGATE_TEST_VENV
echo "$ZARRGATE_TEST_VENV"

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --all-targets --locked -- -D warnings

step "cargo test (unit and integration, SQLite and PostgreSQL)"
cargo test --locked --all-targets

step "Fuzzing: every cargo-fuzz target for a few seconds (fuzz/README.md)"
scripts/fuzz.sh

step "Python client tests"
# cargo test built target/debug/zarrgate for the integration tests; `cargo build --bin` would
# build it again, with the features of a build without dev-dependencies (5 minutes here).
[[ -x target/debug/zarrgate ]] || cargo build --locked --bin zarrgate
ZARRGATE_BIN=${ZARRGATE_BIN:-$PWD/target/debug/zarrgate} scripts/test-python.sh

step "Deployment: Kubernetes manifests, compose file, CDN configuration, Dockerfile build steps"
scripts/check-deploy.sh

step "all tests passed"
