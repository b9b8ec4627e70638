#!/usr/bin/env bash
# What a steady cluster writes to etcd, from etcd's own counters (issue 21, "the steady state
# writes nothing but resyncs"; docs/performance-runtime.md). For each binary given (this build
# by default; BASELINE=/path/to/old/setpoint adds one, run after it in the same minutes):
# a stock etcd (Debian's defaults, nothing raised) on loopback, one controller, one agent
# process simulating NODES nodes (kwok-style, --simulate-copies), WORKLOADS intent workloads of
# COPIES copies each, U = 1 s, R = 1 s. Once every copy is live it waits SETTLE seconds, then
# reads etcd's etcd_mvcc_put_total / _txn_total / _delete_total, waits SECONDS and reads them
# again. Every process it starts is ended by its pid.
#   NODES (30) WORKLOADS (10) COPIES (300) STEADY (60) SETTLE (10) PORT (23790) EXTRA_AGENT,
#   EXTRA_CONTROLLER: flags added to the agent's and the controller's command lines.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -p setpoint-cli >/dev/null
nodes=${NODES:-30} workloads=${WORKLOADS:-10} copies=${COPIES:-300}
seconds=${STEADY:-60} settle=${SETTLE:-10} port=${PORT:-23790}
bins=("$PWD/target/release/setpoint")
[ -n "${BASELINE:-}" ] && bins+=("$BASELINE")
work=$(mktemp -d /tmp/steady-writes.XXXXXX)
. scripts/processes.sh
cleanup() {
  stop_all
  rm -rf "$work"
}
trap cleanup EXIT
metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
echo "machine: $(nproc) cores; load: $(uptime | sed 's/.*load average: //')"
for bin in "${bins[@]}"; do
  dir="$work/$(basename "$(dirname "$bin")")-$RANDOM"
  mkdir -p "$dir"
  start_etcd "$dir/etcd" "$port" "$dir/etcd.log"
  store="etcd://127.0.0.1:$port"
  "$bin" controller --store "$store" --data-dir "$dir/c" ${EXTRA_CONTROLLER:-} >"$dir/controller.log" 2>&1 &
  pids+=($!)
  "$bin" agent --store "$store" --data-dir "$dir/a" --simulate-nodes "$nodes" --simulate-copies \
    ${EXTRA_AGENT:-} >"$dir/agent.log" 2>&1 &
  pids+=($!)
  : >"$dir/w.toml"
  for w in $(seq "$workloads"); do
    printf '[[workload]]\nname = "w%d"\ncommand = ["sleep", "3600"]\ncopies = %d\ncontroller = "intent"\nperiod = "1s"\nstartup = "0s"\ngrace = "1s"\n\n' \
      "$w" "$copies" >>"$dir/w.toml"
  done
  sleep 3
  "$bin" apply --store "$store" --data-dir "$dir/c" -q -f "$dir/w.toml" >/dev/null
  want=$((workloads * copies))
  start=$(date +%s)
  live=0
  while [ $(( $(date +%s) - start )) -lt 600 ]; do
    live=$("$bin" get --store "$store" --data-dir "$dir/c" --format json 2>/dev/null \
      | jq '[.workloads[] | .live // 0] | add // 0' 2>/dev/null || echo 0)
    [ "$live" -ge "$want" ] && break
    sleep 2
  done
  ready=$(( $(date +%s) - start ))
  sleep "$settle"
  p0=$(metric etcd_mvcc_put_total) t0=$(metric etcd_mvcc_txn_total) d0=$(metric etcd_mvcc_delete_total)
  sleep "$seconds"
  p1=$(metric etcd_mvcc_put_total) t1=$(metric etcd_mvcc_txn_total) d1=$(metric etcd_mvcc_delete_total)
  size=$(metric etcd_mvcc_db_total_size_in_bytes)
  printf '%s: %d of %d copies live after %d s; steady %d s: %d puts (%.2f/s), %d txns (%.2f/s), %d deletes; db %.0f bytes\n' \
    "$bin" "$live" "$want" "$ready" "$seconds" $((p1 - p0)) "$(echo "($p1 - $p0) / $seconds" | bc -l)" \
    $((t1 - t0)) "$(echo "($t1 - $t0) / $seconds" | bc -l)" $((d1 - d0)) "$size"
  stop_all
done
echo "load after: $(uptime | sed 's/.*load average: //')"
