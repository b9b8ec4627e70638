#!/usr/bin/env bash
# The million-seed run across the shipped fault models (docs/performance.md, "Chaos").
# Usage: scripts/chaos-million.sh [MODEL:SEEDS[:FROM] ...]
#   default: 2,500 seeds of each ten-minute model, then 990,000 seeds of checker.toml (one
#   simulated minute each) in chunks of 45,000: 1,000,000 in all. A ten-minute model costs about
#   ten times as much a seed, so an even split would take hours on this machine. Each entry runs
#   seeds FROM .. FROM+SEEDS-1 (FROM defaults to 1) and is reported as soon as it ends.
# Prints, per model, the seeds run, the failures and the wall time, and keeps shrunk replay files
# of the first failures under target/chaos-million/<model>/.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -p setpoint-cli >/dev/null
bin=${SETPOINT:-target/release/setpoint}
plan=("$@")
if [ ${#plan[@]} -eq 0 ]; then
  plan=(partitions:2500 partitions-controller-pauses:2500 agent-restarts:2500
        agent-pauses-and-redeclarations:2500)
  for i in $(seq 0 21); do plan+=("checker:45000:$((i * 45000 + 1))"); done
fi
echo "machine: $(nproc) cores; load: $(uptime | sed 's/.*load average: //')"
for p in "${plan[@]}"; do
  IFS=: read -r name seeds from <<<"$p"
  from=${from:-1}
  m=scenarios/chaos/$name.toml
  out=target/chaos-million/$name-$from
  mkdir -p "$out"
  start=$(date +%s.%N)
  set +e
  /usr/bin/time -f '%U user %S sys' -o "$out/time.txt" \
    "$bin" chaos "$m" --runs "$seeds" --seed "$from" --out-dir "$out" --shrink 3 >"$out/result.txt" 2>"$out/stderr.txt"
  rc=$?
  set -e
  end=$(date +%s.%N)
  printf '%s from %s: %s seeds, exit %s, %.1f s wall, %s; load %s; %s\n' "$name" "$from" "$seeds" "$rc" \
    "$(echo "$end - $start" | bc)" "$(cat "$out/time.txt")" "$(uptime | sed 's/.*load average: //')" \
    "$(grep -E 'seeds from' "$out/result.txt" || tail -1 "$out/stderr.txt")"
done
