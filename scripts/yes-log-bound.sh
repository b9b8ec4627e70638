#!/usr/bin/env bash
# A copy running `yes` for SECONDS (default 60) next to a quiet copy on one agent: prints the
# largest disk use of the flood's log files seen (sampled every 0.2 s) against
# --log-max-size × --log-max-files, the agent's lease losses in up's log, and whether the other
# copy's output went on. Usage: scripts/yes-log-bound.sh [SECONDS] [SIZE_BYTES] [FILES]
set -euo pipefail
SECS=${1:-60}
SIZE=${2:-1048576}
FILES=${3:-5}
DIR=${YES_DIR:-/tmp/setpoint-yes}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${SETPOINT:-$ROOT/target/debug/setpoint}
[[ -x $BIN ]] || (cd "$ROOT" && cargo build --quiet -p setpoint-cli)
rm -rf "$DIR"
mkdir -p "$DIR"
DATA=$DIR/data
"$BIN" up --data-dir "$DATA" --nodes 1 --log-max-size "$SIZE" --log-max-files "$FILES" \
    2>"$DIR/up.err" &
UP=$!
trap 'kill -INT $UP 2>/dev/null; wait $UP 2>/dev/null || true' EXIT
until [[ -f $DATA/store.sqlite ]]; do sleep 0.1; done
cat >"$DIR/w.toml" <<'EOF'
[[workload]]
name = "flood"
command = "yes"
copies = 1
period = "200ms"
startup = "200ms"

[[workload]]
name = "talker"
command = "i=0; while :; do echo line $i; i=$((i+1)); sleep 0.1; done"
copies = 1
period = "200ms"
startup = "200ms"
EOF
"$BIN" apply -f "$DIR/w.toml" --data-dir "$DATA" >/dev/null
LOGS=$DATA/nodes/logs
until [[ -f $LOGS/flood-0.log ]]; do sleep 0.1; done
first=$("$BIN" logs talker-0 --tail 1 --data-dir "$DATA" || true)
max=0
end=$((SECONDS + SECS))
while ((SECONDS < end)); do
    # The log files only: not flood-0.log.pipe, the FIFO the copy writes into (reading it
    # would take the copy's output and never end).
    use=$(cat "$LOGS"/flood-0.log "$LOGS"/flood-0.log.[0-9]* 2>/dev/null | wc -c || true)
    ((use > max)) && max=$use
    sleep 0.2
done
last=$("$BIN" logs talker-0 --tail 1 --data-dir "$DATA" || true)
echo "flood: largest disk use ${max} bytes; bound $((SIZE * FILES)) bytes ($SIZE x $FILES)"
echo "flood files: $(ls "$LOGS" | grep -c '^flood-0.log') (of which a FIFO: $(ls "$LOGS" | grep -c 'flood-0.log.pipe'))"
echo "talker: '$first' -> '$last'"
echo "lease lost / fenced lines in up's log: $(grep -ciE 'lost|fenc|not renewed|expired' "$DIR/up.err" || true)"
