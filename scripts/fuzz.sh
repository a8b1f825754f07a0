#!/usr/bin/env bash
# A short run of every cargo-fuzz target in fuzz/ (fuzz/README.md has longer runs): builds the
# targets, then runs each for FUZZ_SECONDS (default 5) from its corpus (fuzz/corpus/<target>,
# kept between runs, not in git) and its seeds (fuzz/seeds/<target>). The first crash fails the
# run; libFuzzer prints the input and cargo fuzz saves it under fuzz/artifacts/<target>/.
#
#   scripts/fuzz.sh                  # every target, 5 s each
#   FUZZ_SECONDS=600 scripts/fuzz.sh native_manifest
#
# cargo fuzz needs nightly compiler flags (sanitizer coverage); RUSTC_BOOTSTRAP=1 lets the
# stable toolchain accept them. cargo-fuzz is installed from crates.io if it is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"

seconds=${FUZZ_SECONDS:-5}
# The instrumented build lives outside the checkout, so that a fresh clone (CI) on a machine
# that fuzzed before starts warm: only zarrgate and the targets are rebuilt.
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$HOME/.cache/zarrgate/fuzz-target}
export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz from crates.io"
    cargo install cargo-fuzz --locked --version 0.13.2
fi
# No AddressSanitizer by default: zarrgate forbids unsafe code, and instrumenting every C
# dependency for it doubles the build. FUZZ_SANITIZER=address for a long run.
sanitizer=${FUZZ_SANITIZER:-none}
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || mapfile -t targets < <(cargo fuzz list)

started=$SECONDS
# The build is bounded so that CI stays within its budget: the first build instruments every
# dependency (C libraries included) and takes far longer than a run (measured: fuzz/README.md).
# Past FUZZ_BUILD_SECONDS the build stops, says so and the step passes: $CARGO_TARGET_DIR keeps every
# crate built, so the next run goes on from there, and once it is warm only zarrgate is rebuilt.
# FUZZ_BUILD_SECONDS=0 waits for the whole build.
budget=${FUZZ_BUILD_SECONDS:-300}
build() {
    local left=$((budget - (SECONDS - started)))
    if [[ $budget -gt 0 ]]; then
        [[ $left -gt 0 ]] || return 124
        timeout --signal=INT --kill-after=30 "$left" cargo fuzz build --sanitizer "$sanitizer" --debug-assertions "$@"
    else
        cargo fuzz build --sanitizer "$sanitizer" --debug-assertions "$@"
    fi
}
status=0
if [[ $# -eq 0 ]]; then
    build || status=$?
else
    for target in "${targets[@]}"; do build "$target" || { status=$?; break; }; done
fi
if [[ $status -eq 124 || $status -eq 130 || ($budget -gt 0 && $((SECONDS - started)) -ge $budget && $status -ne 0) ]]; then
    echo "fuzz: SKIPPED: the instrumented build did not finish within FUZZ_BUILD_SECONDS=$budget s (a cold" \
        "build; what was built is kept in $CARGO_TARGET_DIR and the next run goes on from there). The proptest" \
        "properties of the normal tests (src/zarr/robustness.rs) covered the parsers meanwhile."
    exit 0
fi
[[ $status -eq 0 ]] || exit "$status"
echo "fuzz: built in $((SECONDS - started)) s"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target" "seeds/$target"
    if ! cargo fuzz run --sanitizer "$sanitizer" --debug-assertions "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
        tail -n 60 "$log" >&2
        echo "fuzz: $target crashed (the input is under fuzz/artifacts/$target/)" >&2
        exit 1
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz: $target: ${runs:-?} inputs in $seconds s, corpus $(find "corpus/$target" -type f | wc -l) files"
done
echo "fuzz: ${#targets[@]} targets, ${seconds} s each, $((SECONDS - started)) s in all"
