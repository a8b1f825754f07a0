#!/usr/bin/env bash
# Create (or reuse) the Zarr v2 client venv (zarr-python 2, xarray) for the tests of the v2 view,
# and print its path as the last line of stdout. Everything pip says goes to stderr.
#
#   VENV2=$(scripts/python-env-zarr2.sh | tail -n 1) && "$VENV2/bin/python" tests/python/zarr2_reader.py ...
#
# zarr 2 cannot share a venv with zarr 3, so this one is separate from scripts/python-env.sh's:
# it lives at $ZARRGATE_ZARR2_VENV, or by default at
# ~/.cache/zarrgate/venv-zarr2-<first 12 hex of sha256(requirements-zarr2.txt)>; a marker file
# written after a successful install makes the second run a no-op. PYTHON picks the
# interpreter (default python3, 3.11+).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
requirements="$repo/tests/python/requirements-zarr2.txt"
python=${PYTHON:-python3}

[[ -f $requirements ]] || { echo "python-env-zarr2: $requirements not found" >&2; exit 1; }
hash=$(sha256sum "$requirements" | cut -c1-12)
venv=${ZARRGATE_ZARR2_VENV:-${HOME}/.cache/zarrgate/venv-zarr2-$hash}
marker="$venv/.zarrgate-installed"

if [[ -f $marker && $(cat "$marker") == "$hash" && -x $venv/bin/python ]]; then
    echo "$venv"
    exit 0
fi

mkdir -p "$(dirname "$venv")"
if [[ ! -x $venv/bin/python ]]; then
    echo "python-env-zarr2: creating $venv" >&2
    "$python" -m venv "$venv" >&2
fi
rm -f "$marker"
echo "python-env-zarr2: installing $requirements" >&2
"$venv/bin/python" -m pip install --disable-pip-version-check --quiet -r "$requirements" >&2
printf '%s\n' "$hash" >"$marker"
echo "$venv"
