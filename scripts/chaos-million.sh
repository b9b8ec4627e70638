#!/usr/bin/env bash
# The million-seed run across the shipped fault models (docs/performance.md, "Chaos").
# Usage: scripts/chaos-million.sh [SEEDS_PER_MODEL]   (default: 1,000,000 split over the models)
# Prints, per model, the seeds run, the failures and the wall time, and keeps shrunk replay files
# of the first failures under target/chaos-million/<model>/.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p setpoint-cli >/dev/null
bin=target/release/setpoint
models=(scenarios/chaos/*.toml)
total=${1:-1000000}
per=$(( (total + ${#models[@]} - 1) / ${#models[@]} ))
echo "machine: $(nproc) cores; load: $(uptime | sed 's/.*load average: //')"
for m in "${models[@]}"; do
  name=$(basename "$m" .toml)
  out=target/chaos-million/$name
  mkdir -p "$out"
  start=$(date +%s.%N)
  set +e
  "$bin" chaos "$m" --seeds "$per" --out "$out" --shrink 3 >"$out/result.txt" 2>"$out/stderr.txt"
  rc=$?
  set -e
  end=$(date +%s.%N)
  printf '%s: %s seeds, exit %s, %.1f s; %s\n' "$name" "$per" "$rc" "$(echo "$end - $start" | bc)" \
    "$(grep -E 'seeds from' "$out/result.txt" || cat "$out/stderr.txt")"
done
