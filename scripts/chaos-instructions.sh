#!/usr/bin/env bash
# Instructions a chaos seed costs, this build beside a baseline build (docs/performance.md,
# "Chaos"): a count that does not move with the machine's load, where CPU time under load moves
# by a third. Needs valgrind (Debian's `valgrind`); not run by the tests.
# Usage: BASELINE=/path/to/old/setpoint scripts/chaos-instructions.sh [MODEL] [SEEDS]
#   MODEL defaults to scenarios/chaos/partitions-controller-pauses.toml, SEEDS to 5. Each binary
#   runs the same seeds on one thread under callgrind; its total instruction count (which
#   includes the start-up: parsing the command line and the model, about 1% of one seed) is
#   printed, per seed, and the ratio to the first binary.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "chaos-instructions: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -p setpoint-cli >/dev/null
model=${1:-scenarios/chaos/partitions-controller-pauses.toml}
seeds=${2:-5}
bins=(target/release/setpoint)
[ -n "${BASELINE:-}" ] && bins+=("$BASELINE")
first=
for b in "${bins[@]}"; do
  n=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$b" chaos "$model" --runs "$seeds" \
      --jobs 1 --shrink 0 --format csv 2>&1 >/dev/null | sed -n 's/.*Collected : //p')
  first=${first:-$n}
  printf '%s: %s instructions for %s seeds, %.1f M a seed, %.2f× the first\n' "$b" "$n" "$seeds" \
    "$(echo "$n / $seeds / 1000000" | bc -l)" "$(echo "$n / $first" | bc -l)"
done
