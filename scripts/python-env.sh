#!/usr/bin/env bash
# Create (or reuse) the Python venv for tests/python and print its path as the last line
# of stdout. Everything pip says goes to stderr.
#
#   VENV=$(scripts/python-env.sh) && "$VENV/bin/pytest" tests/python
#
# The venv lives at $ZARRGATE_VENV, or by default at
# ~/.cache/zarrgate/venv-<first 12 hex of sha256(requirements.txt)>, so a change to the
# requirements gets a new venv and an unchanged file reuses the old one. A marker file
# written after a successful install makes the second run a no-op. PYTHON picks the
# interpreter (default python3, which must be 3.11+). Another environment (the zarr-2 one,
# scripts/python-env-zarr2.sh) sets PYTHON_ENV_REQUIREMENTS and PYTHON_ENV_NAME (the default
# directory's prefix, `venv`).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
requirements=${PYTHON_ENV_REQUIREMENTS:-$repo/tests/python/requirements.txt}
python=${PYTHON:-python3}

[[ -f $requirements ]] || { echo "python-env: $requirements not found" >&2; exit 1; }
hash=$(sha256sum "$requirements" | cut -c1-12)
venv=${ZARRGATE_VENV:-${HOME}/.cache/zarrgate/${PYTHON_ENV_NAME:-venv}-$hash}
marker="$venv/.zarrgate-installed"
mkdir -p "$(dirname "$venv")"
# Two runs at once (two checkouts testing side by side) take turns: the second finds the marker.
exec 9>"$venv.lock"
flock 9

# The marker records which requirements were installed, so a reused $ZARRGATE_VENV
# is brought up to date when the file changes.
if [[ -f $marker && $(cat "$marker") == "$hash" && -x $venv/bin/python ]]; then
    echo "$venv"
    exit 0
fi

"$python" - <<'EOF' >&2 || { echo "python-env: need Python >= 3.11" >&2; exit 1; }
import sys
sys.exit(0 if sys.version_info >= (3, 11) else 1)
EOF

if [[ ! -x $venv/bin/python ]]; then
    echo "python-env: creating $venv" >&2
    "$python" -m venv "$venv" >&2
fi
rm -f "$marker"
echo "python-env: installing $requirements" >&2
"$venv/bin/python" -m pip install --disable-pip-version-check --quiet \
    -r "$requirements" >&2
printf '%s\n' "$hash" >"$marker"
echo "$venv"
