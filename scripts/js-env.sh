#!/usr/bin/env bash
# Install (or reuse) the JavaScript clients of the tests (tests/js: zarrita, pinned by its
# package-lock.json) and print the directory holding their node_modules as the last line of
# stdout. Everything npm says goes to stderr.
#
#   JS=$(scripts/js-env.sh | tail -n 1) && ln -s "$JS/node_modules" somewhere/node_modules
#
# The directory is $ZARRGATE_JS_ENV, or by default ~/.cache/zarrgate/js-<first 12 hex of
# sha256(package-lock.json)>, so a change to the lock file gets a new one and an unchanged file
# reuses the old one (`npm ci`, once; a marker file written after a successful install makes the
# second run a no-op). Needs Node 20 or newer and npm.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
lock=$repo/tests/js/package-lock.json
command -v node >/dev/null || { echo "js-env: node is not installed (Node 20 or newer)" >&2; exit 1; }
command -v npm >/dev/null || { echo "js-env: npm is not installed" >&2; exit 1; }
hash=$(cat "$repo/tests/js/package.json" "$lock" | sha256sum | cut -c1-12)
dir=${ZARRGATE_JS_ENV:-${HOME}/.cache/zarrgate/js-$hash}
marker="$dir/.zarrgate-installed"

if [[ -f $marker && $(cat "$marker") == "$hash" && -d $dir/node_modules ]]; then
    echo "$dir"
    exit 0
fi

mkdir -p "$dir"
rm -f "$marker"
cp "$repo/tests/js/package.json" "$lock" "$dir/"
echo "js-env: npm ci in $dir" >&2
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) >&2
printf '%s\n' "$hash" >"$marker"
echo "$dir"
