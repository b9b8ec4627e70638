#!/usr/bin/env bash
# The million-seed run across the shipped fault models (docs/performance.md, "Chaos").
# Usage: scripts/chaos-million.sh [MODEL:SEEDS ...]
#   default: 960,000 seeds of checker.toml (one simulated minute each) and 10,000 of each
#   ten-minute model: 1,000,000 in all. The ten-minute models cost about ten times as much a
#   seed, so an even split would take hours on this machine.
# Prints, per model, the seeds run, the failures and the wall time, and keeps shrunk replay files
# of the first failures under target/chaos-million/<model>/.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -p setpoint-cli >/dev/null
bin=${SETPOINT:-target/release/setpoint}
plan=("$@")
if [ ${#plan[@]} -eq 0 ]; then
  plan=(checker:960000 partitions:10000 partitions-controller-pauses:10000
        agent-restarts:10000 agent-pauses-and-redeclarations:10000)
fi
echo "machine: $(nproc) cores; load: $(uptime | sed 's/.*load average: //')"
for p in "${plan[@]}"; do
  name=${p%%:*}
  seeds=${p##*:}
  m=scenarios/chaos/$name.toml
  out=target/chaos-million/$name
  mkdir -p "$out"
  start=$(date +%s.%N)
  set +e
  /usr/bin/time -f '%U user %S sys' -o "$out/time.txt" \
    "$bin" chaos "$m" --seeds "$seeds" --out "$out" --shrink 3 >"$out/result.txt" 2>"$out/stderr.txt"
  rc=$?
  set -e
  end=$(date +%s.%N)
  printf '%s: %s seeds, exit %s, %.1f s wall, %s; load %s; %s\n' "$name" "$seeds" "$rc" \
    "$(echo "$end - $start" | bc)" "$(cat "$out/time.txt")" "$(uptime | sed 's/.*load average: //')" \
    "$(grep -E 'seeds from' "$out/result.txt" || tail -1 "$out/stderr.txt")"
done
