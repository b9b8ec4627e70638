#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for a stated time each, one after another (the machine
# has two cores shared with others), and prints each target's executions and findings.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 600 s, every target)
#
# cargo-fuzz needs a nightly toolchain (libFuzzer's instrumentation flags are unstable). Where
# none is installed, or cargo-fuzz is missing, this script says so and stops with status 2:
# it never pretends to have fuzzed. Crashes land in fuzz/artifacts/TARGET/; keep each as a
# regression test (crates/setpoint-sim/tests/model/parsers.rs) once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-600}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(scenario_toml workloads_toml grid_axis duration delay_model calibrate stored_records)
fi

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "fuzz.sh: no nightly toolchain is installed (rustup toolchain list shows: $(rustup toolchain list 2>/dev/null | tr '\n' ' ')); cargo fuzz needs one: rustup toolchain install nightly" >&2
    exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: cargo-fuzz is not installed: cargo install cargo-fuzz" >&2
    exit 2
fi

echo "fuzzing ${#targets[@]} targets, ${seconds} s each, on $(nproc) cores; load: $(uptime)"
status=0
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    log="fuzz/fuzz-$t.log"
    set +e
    cargo +nightly fuzz run "$t" "fuzz/corpus/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 \
        >"$log" 2>&1
    rc=$?
    set -e
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    crashes=$(find "fuzz/artifacts/$t" -type f 2>/dev/null | wc -l)
    echo "$t: exit $rc, $execs executions in ${seconds} s, $crashes artifacts (log: $log)"
    [ "$rc" -eq 0 ] || status=1
done
exit $status
