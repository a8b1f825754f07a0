#!/usr/bin/env bash
# Create (or reuse) the Python venv for the bench/ plots (matplotlib) and print its path as the
# last line of stdout; pip's output goes to stderr. The same scheme as scripts/python-env.sh:
# ~/.cache/zarrgate/bench-venv-<first 12 hex of sha256(bench/requirements.txt)>, or $ZARRGATE_BENCH_VENV.
#
#   "$(bench/python-env.sh | tail -1)/bin/python" bench/plot_cold.py
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
requirements="$repo/bench/requirements.txt"
hash=$(sha256sum "$requirements" | cut -c1-12)
venv=${ZARRGATE_BENCH_VENV:-${HOME}/.cache/zarrgate/bench-venv-$hash}
marker="$venv/.zarrgate-installed"
if [[ -f $marker && $(cat "$marker") == "$hash" && -x $venv/bin/python ]]; then
    echo "$venv"
    exit 0
fi
mkdir -p "$(dirname "$venv")"
[[ -x $venv/bin/python ]] || ${PYTHON:-python3} -m venv "$venv" >&2
"$venv/bin/python" -m pip install --quiet --upgrade pip >&2
"$venv/bin/python" -m pip install --quiet -r "$requirements" >&2
echo "$hash" > "$marker"
echo "$venv"
