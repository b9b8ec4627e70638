#!/usr/bin/env bash
# engine-counts.sh: the engines' work in instructions (callgrind), which the load of a shared
# machine does not move (issue 24). Wall times on this 2-core machine shared with other builds
# move by 2x from run to run; instruction counts repeat to a few parts in a million.
#
# usage: scripts/engine-counts.sh
# environment:
#   BASELINE      another setpoint binary (an older build) to count on the same sweeps
#   SKIP_BUILD=1  use the release build as it is
#   CARGO_TARGET_DIR  where the release build is (default target), as for cargo
#
# It prints, in a markdown table:
#   - instructions per run of the lesson's world at G = 60 (ledger) on the fast engine and on
#     the general engine, and their ratio; per run of `named` with the lesson's chain (seed 7):
#     the difference of `engine_counts ENGINE 200` and `engine_counts ENGINE 0`, over 200;
#   - instructions per run of a Monte Carlo sweep on the general engine (`--delay-model
#     lesson-chain -U 1..=100:9 -B 0..=33:3 --controller ledger,intent,named --runs 100
#     --summary`: 432 cells, 43,200 runs), one thread;
#   - instructions per cell of a tenth of the million-cell lesson sweep (`--delay 0..=199
#     --period 1..=100 --startup 0..=4 --summary`), one thread.
# needs: valgrind.
set -euo pipefail

cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || {
    echo "error: valgrind is missing (apt-get install valgrind)" >&2
    exit 1
}
if [ "${SKIP_BUILD:-}" != 1 ]; then
    cargo build --release --quiet --bin setpoint
    cargo build --release --quiet -p setpoint-sim --example engine_counts
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export RAYON_NUM_THREADS=1

# ir COMMAND...: the instructions callgrind counts for COMMAND (stdout discarded).
ir() {
    valgrind --tool=callgrind --callgrind-out-file="$TMP/out" "$@" >/dev/null 2>"$TMP/err"
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$TMP/err"
}
per() { awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN {printf "%.0f", (a - b) / n}'; }

REL=${CARGO_TARGET_DIR:-target}/release
EX=$REL/examples/engine_counts
N=200
echo "| work | instructions | per |"
echo "| --- | --- | --- |"
base=$(ir "$EX" fast 0)
events=$("$EX" fast 1)
for e in fast general chain; do
    total=$(ir "$EX" "$e" "$N")
    p=$(per "$total" "$base" "$N")
    eval "per_$e=$p"
    echo "| \`$e\` run (lesson G = 60 ledger; \`chain\`: named, lesson-chain, seed 7) | $p a run | $(per "$p" 0 "$events") a copy-event of the G = 60 run ($events) |"
done
echo "| general / fast, lesson G = 60 | $(awk -v a="$per_general" -v b="$per_fast" 'BEGIN {printf "%.2f", a / b}')x | |"

MC=(sweep --delay-model lesson-chain -U 1..=100:9 -B 0..=33:3 --controller ledger,intent,named --runs 100 --summary)
LESSON=(sweep --delay 0..=199 --period 1..=100 --startup 0..=4 --summary)
for bin in "$REL/setpoint" ${BASELINE:+"$BASELINE"}; do
    mc=$(ir "$bin" "${MC[@]}")
    ls=$(ir "$bin" "${LESSON[@]}")
    echo "| Monte Carlo sweep, 43,200 runs ($bin) | $mc | $(per "$mc" 0 43200) a run |"
    echo "| lesson sweep, 100,000 cells ($bin) | $ls | $(per "$ls" 0 100000) a cell |"
done
