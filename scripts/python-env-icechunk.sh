#!/usr/bin/env bash
# Create (or reuse) an Icechunk writer venv for tests/python/test_icechunk.py, and print its
# path as the last line of stdout. Everything pip says goes to stderr.
#
#   IC2=$(scripts/python-env-icechunk.sh 2 | tail -n 1) && "$IC2/bin/python" tests/python/icechunk_writer.py ...
#
# 1: icechunk 1.x (writes format 1) on Python 3.11; 2: icechunk 2.x (writes format 2), whose
# wheels need Python 3.12 or newer: $PYTHON312, else python3.12 on PATH, else pyenv's newest
# 3.12. Each is scripts/python-env.sh with tests/python/requirements-icechunkN.txt, at
# ~/.cache/zarrgate/venv-icechunkN-<first 12 hex of sha256(requirements-icechunkN.txt)>.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
major=${1:?usage: python-env-icechunk.sh 1|2}
case $major in
1) python=${PYTHON:-python3} ;;
2)
    python=${PYTHON312:-}
    if [[ -z $python ]] && command -v python3.12 >/dev/null && python3.12 -c '' 2>/dev/null; then
        python=python3.12
    fi
    if [[ -z $python ]] && command -v pyenv >/dev/null; then
        found=$(ls -d "$(pyenv root)"/versions/3.12.*/bin/python3.12 2>/dev/null | sort -V | tail -n 1 || true)
        python=${found:-}
    fi
    [[ -n $python ]] || { echo "python-env-icechunk: icechunk 2 needs Python 3.12 (set PYTHON312)" >&2; exit 1; }
    ;;
*) echo "python-env-icechunk: major version 1 or 2, not $major" >&2; exit 1 ;;
esac
exec env PYTHON="$python" PYTHON_ENV_REQUIREMENTS="$here/../tests/python/requirements-icechunk$major.txt" \
    PYTHON_ENV_NAME="venv-icechunk$major" ZARRGATE_VENV= "$here/python-env.sh"
