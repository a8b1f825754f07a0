#!/usr/bin/env bash
# Create (or reuse) the Zarr v2 client venv (zarr-python 2, xarray) for the tests of the v2 view,
# and print its path as the last line of stdout. Everything pip says goes to stderr.
#
#   VENV2=$(scripts/python-env-zarr2.sh | tail -n 1) && "$VENV2/bin/python" tests/python/zarr2_reader.py ...
#
# zarr 2 cannot share a venv with zarr 3, so this one is separate: scripts/python-env.sh with
# tests/python/requirements-zarr2.txt, at $ZARRGATE_ZARR2_VENV, or by default at
# ~/.cache/zarrgate/venv-zarr2-<first 12 hex of sha256(requirements-zarr2.txt)>.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec env PYTHON_ENV_REQUIREMENTS="$here/../tests/python/requirements-zarr2.txt" PYTHON_ENV_NAME=venv-zarr2 \
    ZARRGATE_VENV="${ZARRGATE_ZARR2_VENV:-}" "$here/python-env.sh"
