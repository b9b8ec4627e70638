#!/usr/bin/env bash
# History size over time (issue 11): runs `setpoint up` with three workloads at U = 200 ms — a
# talker printing ~2 KB/s per copy, a crash loop (new copy, new log, new events every few
# seconds) and a steady workload — and prints, every SAMPLE seconds, the store's size on disk,
# the number of event-log keys and the copy logs' size. With bounded history both stay flat
# once the first retention period has passed.
#
# usage: scripts/history-size.sh [MINUTES] [RETENTION] [SAMPLE]   (defaults 30, 1h, 60)
#   RETENTION is passed to --event-retention and --log-retention (compress it, e.g. 2m, to see
#   the shape in less time). Needs python3 (read-only count of the store's keys).
# env: SETPOINT=path/to/setpoint (default target/release/setpoint, built if missing)
#      HIST_DIR=/tmp/setpoint-history (wiped at start)
set -euo pipefail

MINUTES=${1:-30}
RETENTION=${2:-1h}
SAMPLE=${3:-60}
DIR=${HIST_DIR:-/tmp/setpoint-history}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${SETPOINT:-$ROOT/target/release/setpoint}
[[ -x $BIN ]] || (cd "$ROOT" && cargo build --release --quiet)
rm -rf "$DIR"
mkdir -p "$DIR"
DATA=$DIR/data

"$BIN" up --data-dir "$DATA" --nodes 2 --event-retention "$RETENTION" \
    --log-retention "$RETENTION" --log-max-size 256KiB 2>"$DIR/up.err" &
UP=$!
trap 'kill -INT $UP 2>/dev/null; wait $UP 2>/dev/null || true' EXIT
until [[ -f $DATA/store.sqlite ]]; do sleep 0.1; done
cat >"$DIR/w.toml" <<'EOF'
[[workload]]
name = "talker"
command = "i=0; while :; do echo \"line $i of $SETPOINT_COPY, padded to about forty bytes\"; i=$((i+1)); sleep 0.02; done"
copies = 2
period = "200ms"
startup = "200ms"

[[workload]]
name = "crash"
command = "echo starting; exit 3"
copies = 2
period = "200ms"
startup = "200ms"
backoff = { initial = "1s", max = "4s" }

[[workload]]
name = "steady"
command = ["sleep", "86400"]
copies = 3
period = "200ms"
startup = "200ms"
EOF
"$BIN" apply -f "$DIR/w.toml" --data-dir "$DATA" >/dev/null

keys() {
    python3 - "$DATA/store.sqlite" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True, timeout=10)
(n,) = db.execute("SELECT count(*) FROM kv WHERE key >= '/events/' AND key < '/events0'").fetchone()
(a,) = db.execute("SELECT count(*) FROM kv").fetchone()
print(n, a)
EOF
}

echo "# setpoint history size: $MINUTES min, retention $RETENTION, U = 200ms; $(nproc) cores; $(uptime | sed 's/.*load/load/')"
printf '%6s %12s %10s %11s %9s %11s %10s\n' "t(s)" "store(KiB)" "wal(KiB)" "event keys" "all keys" "logs(KiB)" "log files"
START=$(date +%s)
END=$((START + MINUTES * 60))
while true; do
    now=$(date +%s)
    db=$(($(stat -c %s "$DATA/store.sqlite") / 1024))
    wal=$(($(stat -c %s "$DATA/store.sqlite-wal" 2>/dev/null || echo 0) / 1024))
    read -r ev all < <(keys)
    logs=$(du -sk "$DATA/nodes/logs" | cut -f1)
    files=$(find "$DATA/nodes/logs" -type f | wc -l)
    printf '%6d %12d %10d %11d %9d %11d %10d\n' $((now - START)) "$db" "$wal" "$ev" "$all" "$logs" "$files"
    ((now < END)) || break
    sleep "$SAMPLE"
done
echo "# compactions: $(grep -c 'compacted the event log' "$DIR/up.err" || true), rotations: $(grep -c 'rotated the log' "$DIR/up.err" || true)"
