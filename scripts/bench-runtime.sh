#!/usr/bin/env bash
# bench-runtime.sh: the runtime's control plane at scale, on etcd and on SQLite, in one run.
# COPIES copies (default 10,000) on AGENTS in-process agents (default 30) that simulate their
# copies (`--simulate-copies`: reports without processes; the control plane's cost is what is
# measured), one `intent` workload at U = 1 s, passes timed one by one
# (crates/setpoint-runtime/examples/load.rs). Prints both results and etcd's own write counters.
#
# usage: scripts/bench-runtime.sh           (about two minutes; release build first)
# environment:
#   COPIES, AGENTS, SECONDS_STEADY (20), PERIOD_MS (1000), ETCD_PORT (23150; +1 for peers)
#
# It starts its own etcd on loopback with a temporary data directory, and kills it by pid at
# the end. It never runs inside `cargo test`.
set -euo pipefail

cd "$(dirname "$0")/.."
COPIES=${COPIES:-10000}
AGENTS=${AGENTS:-30}
SECONDS_STEADY=${SECONDS_STEADY:-20}
PERIOD_MS=${PERIOD_MS:-1000}
ETCD_PORT=${ETCD_PORT:-23150}
PEER_PORT=$((ETCD_PORT + 1))

command -v etcd >/dev/null || {
    echo "error: etcd is not on PATH (apt-get install etcd-server)" >&2
    exit 1
}
cargo build --release -q -p setpoint-runtime --example load
LOAD=target/release/examples/load

WORK=$(mktemp -d)
ETCD_PID=
cleanup() {
    if [ -n "$ETCD_PID" ]; then kill "$ETCD_PID" 2>/dev/null || true; wait "$ETCD_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

etcd --name bench --data-dir "$WORK/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
    --initial-cluster "bench=http://127.0.0.1:$PEER_PORT" \
    --logger zap --log-level warn >"$WORK/etcd.log" 2>&1 &
ETCD_PID=$!
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$ETCD_PORT/health" >/dev/null 2>&1 && break
    sleep 0.1
done

metric() { curl -sf "http://127.0.0.1:$ETCD_PORT/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

echo "# machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo); $(uname -sr); $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# commit: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')"
echo "# load before: $(uptime)"
echo "# settings: copies=$COPIES agents=$AGENTS period_ms=$PERIOD_MS seconds=$SECONDS_STEADY simulate=1"

run() {
    local store=$1
    echo
    echo "## $store"
    local t0 puts0 txns0
    puts0=$(metric etcd_mvcc_put_total); txns0=$(metric etcd_mvcc_txn_total); t0=$(date +%s.%N)
    "$LOAD" copies="$COPIES" agents="$AGENTS" period_ms="$PERIOD_MS" seconds="$SECONDS_STEADY" \
        simulate=1 dir="$WORK/data-${store%%:*}" store="$store" 2>"$WORK/${store%%:*}.log" || {
        echo "error: the load run on $store failed:" >&2
        grep -v -e ': started ' -e ': stopping ' "$WORK/${store%%:*}.log" | tail -5 >&2
        exit 1
    }
    local t1 puts1 txns1
    t1=$(date +%s.%N); puts1=$(metric etcd_mvcc_put_total); txns1=$(metric etcd_mvcc_txn_total)
    if [ "${store%%:*}" = etcd ]; then
        awk -v p0="$puts0" -v p1="$puts1" -v x0="$txns0" -v x1="$txns1" -v t0="$t0" -v t1="$t1" 'BEGIN {
            printf "etcd itself, whole run (%.0f s): %.0f puts (%.0f/s), %.0f txns (%.0f/s)\n",
                t1 - t0, p1 - p0, (p1 - p0) / (t1 - t0), x1 - x0, (x1 - x0) / (t1 - t0) }'
    fi
    echo "# load after: $(uptime)"
}

run "etcd://127.0.0.1:$ETCD_PORT"
run "sqlite:$WORK/data-sqlite"
