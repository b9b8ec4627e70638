#!/usr/bin/env bash
# bench-scale.sh: issue 21 part 7, the runtime at scale as a user runs it (docs/performance-runtime.md,
# "The scale benchmark"). A stock etcd (Debian's defaults, nothing raised) started here on
# loopback, one `setpoint controller` with its metrics endpoint, and two agent processes of
# simulated nodes (kwok-style, `--simulate-nodes --simulate-copies`): nodes 1..NODES-LOSE and
# the last LOSE nodes, so that LOSE nodes can be lost at once by ending one process by its pid.
# Then, timed with the store's own view (`setpoint get --format json`):
#   1. apply WORKLOADS `intent` workloads of COPIES copies (U = 1 s) and wait until all are live;
#   2. a steady window of STEADY s: etcd's put/txn/delete counters before and after;
#   3. scale workload w1 to COPIES/2, then back to COPIES, each until the count holds;
#   4. end the LOSE-node process (SIGKILL, by pid) and wait until every workload is live again
#      on the other nodes (the lost nodes' copies are counted until their node leases end, 10 s).
# Pass durations come from the controller's histogram (setpoint_controller_pass_duration_seconds),
# reported per phase as the bucket bound that holds 50 % and 99 % of the passes. Peak RSS of
# each process from /proc. Every process it starts is ended by its pid.
#
# usage: NODES=1000 WORKLOADS=1 COPIES=100000 scripts/bench-scale.sh
# environment: NODES (1000), LOSE (100), WORKLOADS (1), COPIES (100000), STEADY (30),
#   STORE (etcd; or sqlite), PORT (23890; +10 for peers), TIMEOUT (600 s a phase),
#   SKIP_BUILD, BIN (the setpoint binary; target/release/setpoint), ETCD_DIR (where etcd's data
#   directory goes: a temporary directory on this disk by default; /dev/shm puts it in memory,
#   where a write's fsync costs nothing, to tell the control plane's bounds from the disk's),
#   WRITES (1: also follow every write with `etcdctl watch` (Debian's etcd-client) and print,
#   for each phase, the puts and the bytes of their values by key prefix: what fills etcd),
#   KEEP_LOGS (a directory: the controller's, the agents' and etcd's logs are copied there at
#   the end; otherwise they go with the temporary directory).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -q -p setpoint-cli
bin=${BIN:-$PWD/target/release/setpoint}
nodes=${NODES:-1000} lose=${LOSE:-100} workloads=${WORKLOADS:-1} copies=${COPIES:-100000}
steady=${STEADY:-30} port=${PORT:-23890} timeout=${TIMEOUT:-600} kind=${STORE:-etcd}
[ "$lose" -lt "$nodes" ] || { echo "error: LOSE ($lose) must be below NODES ($nodes)" >&2; exit 2; }
work=$(mktemp -d /tmp/bench-scale.XXXXXX)
. scripts/processes.sh
etcd_dir=${ETCD_DIR:-$work}/bench-scale-etcd.$$
keep() { [ -z "${KEEP_LOGS:-}" ] || { mkdir -p "$KEEP_LOGS" && cp "$work"/*.log "$KEEP_LOGS"/ 2>/dev/null; }; }
trap 'stop_all; keep; rm -rf "$work" "$etcd_dir"' EXIT
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc -l | xargs printf '%.1f'; }
mport=$((port + 20))

echo "# machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo); $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# commit: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)'); binary $bin"
echo "# load before: $(uptime | sed 's/.*load average: //')"
echo "# settings: etcd data in ${ETCD_DIR:-a temporary directory on disk}; store=$kind nodes=$nodes lose=$lose workloads=$workloads copies=$copies steady=${steady}s"

# With WRITES: the watch's lines so far, and the puts and value bytes by key prefix of the
# lines after line $1, largest first (a watch response is one JSON line; a value is base64, 4
# chars a 3 bytes). The watch delivers a little after the commit, so a phase's last writes may
# count in the next phase.
writes_mark() { [ -z "${WRITES:-}" ] || wc -l <"$work/writes.json"; }
writes_since() {
  [ -z "${WRITES:-}" ] && return
  tail -n +$(($1 + 1)) "$work/writes.json" | jq -r '.Events[]? | select(.type == null or .type == 0)
      | "\(.kv.key | @base64d | split("/")[1]) \(.kv.value // "" | length)"' |
    awk '{ n[$1]++; b[$1] += $2 * 3 / 4 } END { for (k in n) printf "%s %d %.1f\n", k, n[k], b[k] / 1e6 }' |
    sort -k3,3nr -k1,1 |
    awk '{ tn += $2; tb += $3; l = l sprintf("; %s %d puts %.1f MB", $1, $2, $3) }
         END { printf "  writes: %d puts, %.1f MB of values%s\n", tn, tb, l }'
}
if [ "$kind" = etcd ]; then
  command -v etcd >/dev/null || { echo "error: etcd is not on PATH (apt-get install etcd-server)" >&2; exit 1; }
  start_etcd "$etcd_dir" "$port" "$work/etcd.log"
  store="etcd://127.0.0.1:$port"
  emetric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
  if [ -n "${WRITES:-}" ]; then
    command -v etcdctl >/dev/null || { echo "error: WRITES needs etcdctl (apt-get install etcd-client)" >&2; exit 1; }
    ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$port" watch --prefix / -w json >"$work/writes.json" 2>/dev/null &
    pids+=("$!")
  fi
else
  [ -z "${WRITES:-}" ] || { echo "error: WRITES follows etcd's writes; it needs STORE=etcd" >&2; exit 2; }
  store="sqlite:$work/store"
  etcd_pid=
fi
"$bin" controller --store "$store" --data-dir "$work/c" --metrics-addr "127.0.0.1:$mport" \
  >"$work/controller.log" 2>&1 &
ctl_pid=$!
pids+=("$ctl_pid")
sleep 1 # the controller creates an embedded store; the agents open it
"$bin" agent --store "$store" --data-dir "$work/a1" --simulate-nodes $((nodes - lose)) \
  --simulate-copies >"$work/agents-kept.log" 2>&1 &
kept_pid=$!
pids+=("$kept_pid")
"$bin" agent --store "$store" --data-dir "$work/a2" --simulate-first $((nodes - lose + 1)) \
  --simulate-nodes "$lose" --simulate-copies >"$work/agents-lost.log" 2>&1 &
lost_pid=$!
pids+=("$lost_pid")

# Waits until `setpoint status` shows $1 live nodes.
live_nodes() {
  "$bin" status --store "$store" --data-dir "$work/c" --format json 2>/dev/null |
    jq '[.nodes[] | select(.live)] | length' 2>/dev/null || echo 0
}
# Total live copies over every workload, and the smallest workload's count.
live_copies() {
  "$bin" get --store "$store" --data-dir "$work/c" --format json 2>/dev/null |
    jq -r '[.workloads[] | .live // 0] | "\(add // 0) \(min // 0)"' 2>/dev/null || echo "? ?"
}
declare_all() { # $1: copies of w1
  : >"$work/w.toml"
  for w in $(seq "$workloads"); do
    local c=$copies
    [ "$w" = 1 ] && c=$1
    printf '[[workload]]\nname = "w%d"\ncommand = ["sleep", "3600"]\ncopies = %d\ncontroller = "intent"\nperiod = "1s"\nstartup = "0s"\ngrace = "1s"\n\n' \
      "$w" "$c" >>"$work/w.toml"
  done
  "$bin" apply --store "$store" --data-dir "$work/c" -q -f "$work/w.toml" >/dev/null
}
# Waits until the live total is $1 (and every workload holds its count); prints the seconds.
wait_live() {
  local want=$1 t0 total seen="none yet" fails=0
  t0=$(now)
  while :; do
    read -r total _ <<<"$(live_copies)"
    # A `get` that fails (the store did not answer in time) is not a count of 0.
    if [ "$total" = "?" ]; then fails=$((fails + 1)); else seen=$total; fi
    [ "$total" = "$want" ] && break
    if [ "$(echo "$(now) - $t0 > $timeout" | bc)" = 1 ]; then
      echo "TIMEOUT (live $seen of $want at the last get that answered; $fails gets failed)"
      return
    fi
    sleep 1
  done
  since "$t0"
}
# The controller's pass histogram, summed over workloads: "le count" lines.
histogram() {
  curl -s "http://127.0.0.1:$mport/metrics" |
    awk '/^setpoint_controller_pass_duration_seconds_bucket/ {
           match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5); n[le] += $NF }
         END { for (le in n) print le, n[le] }' | sort -g
}
# Passes between two histograms ($1 before, $2 after): "n passes, p50 <= … s, p99 <= … s"
# (bucket bounds; the buckets in docs/runtime.md, "Metrics").
passes_between() {
  awk 'NR == FNR { before[$1] = $2; next }
       { le[++n] = $1; d[n] = $2 - before[$1] }
       END {
         total = d[n]; if (total == 0) { print "0 passes"; exit }
         for (i = 1; i <= n; i++) {
           if (p50 == "" && d[i] >= 0.5 * total) p50 = le[i]
           if (p99 == "" && d[i] >= 0.99 * total) p99 = le[i]
         }
         printf "%d passes, p50 <= %s s, p99 <= %s s\n", total, p50, p99 }' <(echo "$1") <(echo "$2")
}
rss() { awk '/VmHWM/ { printf "%.0f MiB", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo "?"; }

t0=$(now)
for _ in $(seq "$timeout"); do [ "$(live_nodes)" -ge "$nodes" ] && break; sleep 1; done
echo "nodes: $(live_nodes) of $nodes live after $(since "$t0") s"

want=$((workloads * copies))
h0=$(histogram)
m=$(writes_mark)
declare_all "$copies"
echo "apply: $want copies all live after $(wait_live "$want") s; $(passes_between "$h0" "$(histogram)")"
writes_since "$m"

if [ -n "$etcd_pid" ]; then
  sleep 5
  h0=$(histogram)
  p0=$(emetric etcd_mvcc_put_total) t0m=$(emetric etcd_mvcc_txn_total) d0=$(emetric etcd_mvcc_delete_total)
  m=$(writes_mark)
  sleep "$steady"
  p1=$(emetric etcd_mvcc_put_total) t1m=$(emetric etcd_mvcc_txn_total) d1=$(emetric etcd_mvcc_delete_total)
  echo "steady ${steady} s: $((p1 - p0)) puts, $((t1m - t0m)) txns, $((d1 - d0)) deletes; $(passes_between "$h0" "$(histogram)"); etcd db $(emetric etcd_mvcc_db_total_size_in_bytes | xargs printf '%.0f') bytes"
  writes_since "$m"
else
  h0=$(histogram)
  sleep "$steady"
  echo "steady ${steady} s: $(passes_between "$h0" "$(histogram)"); store files $(du -sb "$work/store" | cut -f1) bytes"
fi

half=$((copies / 2))
h0=$(histogram) m=$(writes_mark)
declare_all "$half"
echo "scale w1 $copies -> $half: $(wait_live $((want - copies + half))) s; $(passes_between "$h0" "$(histogram)")"
writes_since "$m"
h0=$(histogram) m=$(writes_mark)
declare_all "$copies"
echo "scale w1 $half -> $copies: $(wait_live "$want") s; $(passes_between "$h0" "$(histogram)")"
writes_since "$m"

h0=$(histogram) m=$(writes_mark)
kill -9 "$lost_pid"
t0=$(now)
# First the lost nodes' copies leave the count (their leases end), then they are replaced.
for _ in $(seq "$timeout"); do
  read -r total _ <<<"$(live_copies)"
  [ "$total" != "?" ] && [ "$total" -lt "$want" ] && break
  sleep 0.5
done
if [ "$total" != "?" ] && [ "$total" -lt "$want" ]; then
  fell="live fell to $total after $(since "$t0") s"
else
  fell="live never seen below $want in $(since "$t0") s (replaced between two polls)"
fi
echo "lose $lose nodes: $fell; all $want live again after $(wait_live "$want") more s; $(passes_between "$h0" "$(histogram)")"
writes_since "$m"

echo "peak RSS: controller $(rss "$ctl_pid"), agents $(rss "$kept_pid")${etcd_pid:+, etcd $(rss "$etcd_pid")}"
if [ -n "$etcd_pid" ]; then
  fs=$(emetric etcd_disk_wal_fsync_duration_seconds_sum) fc=$(emetric etcd_disk_wal_fsync_duration_seconds_count)
  echo "etcd: $fc WAL fsyncs, mean $(echo "1000 * $fs / $fc" | bc -l | xargs printf '%.2f') ms; $(emetric etcd_server_slow_apply_total) slow applies; $(emetric etcd_mvcc_put_total) puts in all"
fi
cmetric() { curl -s "http://127.0.0.1:$mport/metrics" | awk -v m="$1" '$1 == m || $1 == m "_total" {print $2}'; }
echo "watch cache: $(cmetric setpoint_controller_watch_cache_served_reads) reads served, $(cmetric setpoint_controller_watch_cache_passed_through_reads) passed through to the store, $(cmetric setpoint_controller_watch_cache_full_reads) full reads"
echo "controller lost the leader lease $(grep -c 'lost the leader lease' "$work/controller.log" || true) times"
echo "fences logged by the agents: $(grep -c 'fenc' "$work/agents-kept.log" || true)"
echo "# load after: $(uptime | sed 's/.*load average: //')"
