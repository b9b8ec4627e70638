#!/usr/bin/env bash
# Whether this build's `setpoint chaos` behaves exactly as a baseline binary's: the oracle of a
# refactoring that must not change behaviour (issue 21, part 1).
#
# Usage: BASELINE=/path/to/old/setpoint scripts/chaos-same.sh
#
# Compares, byte for byte, the stdout and exit status of both binaries on
# - every shipped model (scenarios/chaos/*.toml and scenarios/chaos/regressions/*.toml):
#   `chaos MODEL --seeds $SEEDS --threads 1 --shrink 0 --format csv` (one line per seed: faults,
#   events, verdict, violations) and the same as a table (the verdicts and event totals);
# - every replay file among them (the regressions): `chaos --replay FILE`, the run's whole trace;
# - `chaos --lesson`: the lesson's cells run by the runtime beside the lab's prediction.
# The timing line on stderr ("chaos: N seeds in … s") is not compared; other stderr is.
#
# Environment:
#   BASELINE   the baseline `setpoint` binary (required)
#   CANDIDATE  the binary under test (default: target/debug/setpoint; build it first)
#   SEEDS      seeds per model (default: 20)
#   CACHE      where outputs are kept (default: target/chaos-same); the baseline's are reused
#              while its binary is unchanged (keyed by its sha256 and SEEDS)
#
# Exit status: 0 all identical, 1 a difference (the first lines of each diff are printed),
# 2 bad usage.
set -euo pipefail

cd "$(dirname "$0")/.."
if [[ -z "${BASELINE:-}" ]]; then
    echo "chaos-same: set BASELINE to the baseline setpoint binary (e.g. BASELINE=/work/main/target/release/setpoint)" >&2
    exit 2
fi
CANDIDATE=${CANDIDATE:-target/debug/setpoint}
SEEDS=${SEEDS:-20}
CACHE=${CACHE:-target/chaos-same}
for bin in "$BASELINE" "$CANDIDATE"; do
    if [[ ! -x "$bin" ]]; then
        echo "chaos-same: $bin is not an executable file" >&2
        exit 2
    fi
done
if ! [[ "$SEEDS" =~ ^[1-9][0-9]*$ ]]; then
    echo "chaos-same: SEEDS must be a positive whole number, not '$SEEDS'" >&2
    exit 2
fi

models=(scenarios/chaos/*.toml scenarios/chaos/regressions/*.toml)

# Runs one case: `record BIN OUTFILE ARGS...` writes stdout, filtered stderr and the exit status.
record() {
    local bin=$1 out=$2
    shift 2
    local status=0
    nice "$bin" "$@" >"$out.stdout" 2>"$out.stderr" || status=$?
    grep -v '^chaos: [0-9]* seeds in ' "$out.stderr" >"$out.err" || true
    rm -f "$out.stderr"
    echo "exit $status" >>"$out.err"
}

# Writes every case's output of binary $1 under directory $2.
run_all() {
    local bin=$1 dir=$2
    mkdir -p "$dir"
    local m name
    for m in "${models[@]}"; do
        name=${m//\//_}
        record "$bin" "$dir/$name.csv" chaos "$m" --seeds "$SEEDS" --threads 1 --shrink 0 --format csv
        record "$bin" "$dir/$name.table" chaos "$m" --seeds "$SEEDS" --threads 1 --shrink 0
        if grep -q '^\[\[event\]\]\|^event = \[\]' "$m"; then
            record "$bin" "$dir/$name.replay" chaos --replay "$m"
        fi
    done
    record "$bin" "$dir/lesson" chaos --lesson
}

key=$(sha256sum "$BASELINE" | cut -c1-16)
base="$CACHE/baseline-$key-s$SEEDS"
if [[ ! -e "$base/complete" ]]; then
    rm -rf "$base"
    echo "chaos-same: recording the baseline ($BASELINE) in $base"
    run_all "$BASELINE" "$base"
    touch "$base/complete"
fi
cand="$CACHE/candidate"
rm -rf "$cand"
run_all "$CANDIDATE" "$cand"

different=0
cases=0
for f in "$base"/*; do
    name=$(basename "$f")
    [[ $name == complete ]] && continue
    cases=$((cases + 1))
    if ! cmp -s "$f" "$cand/$name"; then
        different=$((different + 1))
        echo "DIFFERENT: $name"
        diff "$f" "$cand/$name" | head -20 || true
    fi
done
if [[ $different -ne 0 ]]; then
    echo "chaos-same: $different of $cases outputs differ from the baseline's ($SEEDS seeds, ${#models[@]} models)"
    exit 1
fi
echo "chaos-same: all $cases outputs identical to the baseline's ($SEEDS seeds, ${#models[@]} models)"
