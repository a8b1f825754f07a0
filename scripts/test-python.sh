#!/usr/bin/env bash
# Run the Python client tests (tests/python) against the real zarrgate binary, with SQLite and
# PostgreSQL catalogs. Extra arguments go to pytest:
#
#   scripts/test-python.sh                 # everything
#   scripts/test-python.sh -k netcdf3 -v   # a selection
#
# The venv comes from scripts/python-env.sh (created on first use, then reused); zarr-python 2
# and its xarray, which cannot share it, from scripts/python-env-zarr2.sh (test_reach.py runs
# them as $ZARRGATE_ZARR2_PYTHON), the Icechunk 1.x and 2.x writers from
# scripts/python-env-icechunk.sh (test_icechunk.py runs them as $ZARRGATE_ICECHUNK{1,2}_PYTHON), and zarrita.js (Node) from scripts/js-env.sh (test_zarrita.py
# finds it at $ZARRGATE_JS_ENV). The binary is
# built with `cargo build --bin zarrgate` unless ZARRGATE_BIN names one already built.
# PostgreSQL: ZARRGATE_TEST_POSTGRES_URL (admin connection, default
# postgres://postgres@127.0.0.1:5432/test); ZARRGATE_TEST_POSTGRES=skip skips those variants.
# The exit status is pytest's.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

venv=$(scripts/python-env.sh | tail -n 1)
[[ -x $venv/bin/python ]] || { echo "test-python: no venv at '$venv'" >&2; exit 1; }
venv2=$(scripts/python-env-zarr2.sh | tail -n 1)
[[ -x $venv2/bin/python ]] || { echo "test-python: no zarr-2 venv at '$venv2'" >&2; exit 1; }
export ZARRGATE_ZARR2_PYTHON="$venv2/bin/python"
# The Icechunk 1.x and 2.x writers (test_icechunk.py), each in a venv of its own.
for major in 1 2; do
    ic=$(scripts/python-env-icechunk.sh "$major" | tail -n 1)
    [[ -x $ic/bin/python ]] || { echo "test-python: no icechunk-$major venv at '$ic'" >&2; exit 1; }
    export "ZARRGATE_ICECHUNK${major}_PYTHON=$ic/bin/python"
done
# The README walkthrough's small environment (test_readme.py runs the walkthrough in it).
walkthrough=$(scripts/python-env-walkthrough.sh | tail -n 1)
[[ -x $walkthrough/bin/python ]] || { echo "test-python: no walkthrough venv at '$walkthrough'" >&2; exit 1; }
export ZARRGATE_WALKTHROUGH_PYTHON="$walkthrough/bin/python"
ZARRGATE_JS_ENV=$(scripts/js-env.sh | tail -n 1)
export ZARRGATE_JS_ENV

if [[ -z ${ZARRGATE_BIN:-} ]]; then
    cargo build --bin zarrgate
    export ZARRGATE_BIN="$repo/target/debug/zarrgate"
fi

# GRIB2's tests run in a pytest process of their own: ecCodes (through cfgrib and eccodes,
# which they use to write and read GRIB files) loaded and used in the same process as GDAL
# (rasterio) made later GDAL opens crash it (a segmentation fault in rasterio.open, reproduced);
# they use no GDAL themselves.
"$venv/bin/python" -m pytest -q tests/python --ignore=tests/python/test_files_grib.py "$@" || status=$?
"$venv/bin/python" -m pytest -q tests/python/test_files_grib.py "$@" || status=$?
exit "${status:-0}"
