#!/usr/bin/env bash
# Create (or reuse) the small Python venv of the README walkthrough (clients/python and what the
# walkthrough imports: VirtualiZarr, xarray, zarr, h5py, netCDF4), with the client installed,
# and print its path as the last line of stdout. Everything pip says goes to stderr.
#
#   VENV=$(scripts/python-env-walkthrough.sh | tail -n 1) && "$VENV/bin/python" walkthrough.py
#
# scripts/python-env.sh with clients/python/requirements-walkthrough.txt, at
# $ZARRGATE_WALKTHROUGH_VENV, or by default at ~/.cache/zarrgate/venv-walkthrough-<hash>.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=$(env PYTHON_ENV_REQUIREMENTS="$here/../clients/python/requirements-walkthrough.txt" \
    PYTHON_ENV_NAME=venv-walkthrough ZARRGATE_VENV="${ZARRGATE_WALKTHROUGH_VENV:-}" \
    "$here/python-env.sh" | tail -n 1)
# The client itself, as it is in this checkout (no dependencies: they are pinned above).
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --upgrade "$here/../clients/python" >&2
echo "$venv"
