#!/usr/bin/env bash
# Chaos runs per CPU-second, this build beside a baseline build, in one run (docs/performance.md,
# "Chaos"). Usage: BASELINE=/path/to/old/setpoint scripts/chaos-speed.sh [MODEL] [SEEDS]
#   MODEL defaults to scenarios/chaos/partitions-controller-pauses.toml (it passes on old builds
#   too, so no run shrinks), SEEDS to 20. Each binary runs the same seeds on one thread, REPS
#   times (default 3), alternating; the CPU time (user + sys) of each is printed, and the median.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -p setpoint-cli >/dev/null
model=${1:-scenarios/chaos/partitions-controller-pauses.toml}
seeds=${2:-20}
reps=${REPS:-3}
bins=(target/release/setpoint)
[ -n "${BASELINE:-}" ] && bins+=("$BASELINE")
echo "machine: $(nproc) cores; load: $(uptime | sed 's/.*load average: //')"
for b in "${bins[@]}"; do : > "/tmp/chaos-speed.$(echo "$b" | tr / _)"; done
for r in $(seq "$reps"); do
  for b in "${bins[@]}"; do
    # Builds before the `--runs`/`--jobs` flags (416de92, where issue 21 part 8 starts) take
    # `--seeds` and run on rayon's pool: one thread through RAYON_NUM_THREADS.
    if "$b" chaos --help 2>/dev/null | grep -q -- '--runs'; then
      how=(--runs "$seeds" --jobs 1)
    else
      how=(--seeds "$seeds")
    fi
    RAYON_NUM_THREADS=1 /usr/bin/time -f '%U %S' -o /tmp/chaos-speed.time "$b" chaos "$model" \
      "${how[@]}" --shrink 0 --format csv >/dev/null 2>/dev/null || true
    awk '{print $1 + $2}' /tmp/chaos-speed.time >> "/tmp/chaos-speed.$(echo "$b" | tr / _)"
  done
done
for b in "${bins[@]}"; do
  f="/tmp/chaos-speed.$(echo "$b" | tr / _)"
  med=$(sort -n "$f" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  printf '%s: CPU s per %s seeds: %s; median %s s = %.1f ms a seed, %.0f seeds per CPU-second\n' \
    "$b" "$seeds" "$(tr '\n' ' ' < "$f")" "$med" "$(echo "$med * 1000 / $seeds" | bc -l)" \
    "$(echo "$seeds / $med" | bc -l)"
done
echo "load after: $(uptime | sed 's/.*load average: //')"
