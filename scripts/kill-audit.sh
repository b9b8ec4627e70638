#!/usr/bin/env bash
# kill-audit.sh: the fault audit's random SIGKILLs, kept: two controllers and three agents on
# one SQLite store run an `intent` and a `named` workload of real copies (`sleep`), and KILLS
# times (default 101) a seeded random choice of them is killed with SIGKILL and started again
# after a random pause. Then it counts what must never happen:
#   duplicates    two live processes with one copy identity at one time (sampled after every
#                 kill and every restart, and at the end);
#   orphans       copies left running once everything has converged that no assignment wants,
#                 plus any copy left after every part is stopped;
#   lost          declarations that `get` no longer shows as applied (name and desired copies).
# It exits 1 if any count is not 0.
#
# usage: scripts/kill-audit.sh                 (about 3 minutes)
# environment:
#   KILLS        how many SIGKILLs (default 101)
#   SEED         the seed of the choices and pauses (default 14)
#   SETPOINT_BIN the binary (default: target/release/setpoint, built first)
#   DATA_DIR     the data directory (default: a new temporary directory, removed afterwards)
#   INJECT       `duplicate` plants an impostor copy (a second `fleet-0` carrying an agent's
#                mark) before the kills, to show that the count catches one: the run must fail
#
# needs: cargo, jq. It never runs inside `cargo test`.
set -euo pipefail

cd "$(dirname "$0")/.."
KILLS=${KILLS:-101}
SEED=${SEED:-14}
command -v jq >/dev/null || { echo "error: jq is missing (apt-get install jq)" >&2; exit 1; }
if [[ -z "${SETPOINT_BIN:-}" ]]; then
    cargo build --release -q -p setpoint-cli
    SETPOINT_BIN=target/release/setpoint
fi
BIN=$(realpath "$SETPOINT_BIN")
WORK=$(mktemp -d)
DATA=${DATA_DIR:-$WORK/data}
mkdir -p "$DATA"
DATA=$(realpath "$DATA")
MARK_PREFIX="SETPOINT_AGENT=$DATA/nodes/"

declare -A PID ARGS
PARTS=(c1 c2 n1 n2 n3)
ARGS[c1]="controller --lease-ttl 1s --node-timeout 3s"
ARGS[c2]="controller --lease-ttl 1s --node-timeout 3s"
for n in n1 n2 n3; do ARGS[$n]="agent --node $n --report-every 100ms"; done

start() {
    # shellcheck disable=SC2086
    "$BIN" ${ARGS[$1]} --data-dir "$DATA" </dev/null >/dev/null 2>>"$WORK/$1.log" &
    PID[$1]=$!
}

stop_all() {
    for p in "${PARTS[@]}"; do
        if [[ -n "${PID[$p]:-}" ]]; then
            kill -TERM "${PID[$p]}" 2>/dev/null || true
        fi
    done
    for p in "${PARTS[@]}"; do
        if [[ -n "${PID[$p]:-}" ]]; then
            wait "${PID[$p]}" 2>/dev/null || true
            PID[$p]=""
        fi
    done
}

# The live copies of this run: "pid copy" per line, group leaders only.
copies() {
    local f pid stat
    for f in $(grep -lzs "^$MARK_PREFIX" /proc/[0-9]*/environ 2>/dev/null); do
        pid=${f#/proc/}; pid=${pid%/environ}
        stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
        stat=${stat##*) }
        # state and process group: a zombie has ended; only leaders are copies.
        set -- $stat
        [[ "$1" == Z || "$3" != "$pid" ]] && continue
        echo "$pid $(tr '\0' '\n' <"$f" 2>/dev/null | sed -n 's/^SETPOINT_COPY=//p')"
    done
}

cleanup() {
    stop_all
    # Whatever copy is left is ended by its pid.
    copies | while read -r pid _; do kill -KILL "$pid" 2>/dev/null || true; done
    [[ -z "${DATA_DIR:-}" ]] && rm -rf "$WORK"
}
trap cleanup EXIT

DUPLICATES=0
sample() {
    local d
    d=$(copies | awk '{print $2}' | sort | uniq -d | wc -l)
    if ((d > 0)); then
        echo "duplicate identities after $1: $(copies | awk '{print $2}' | sort | uniq -d | tr '\n' ' ')" >&2
        DUPLICATES=$((DUPLICATES + d))
    fi
}

get() { "$BIN" get --data-dir "$DATA" --format json --node-timeout 3s; }

converged() {
    get | jq -e '[.workloads[] | select(.live == .desired and .on_ledger == .desired
        and .pending_create == 0 and .pending_delete == 0)] | length == 2' >/dev/null 2>&1
}

wait_converged() {
    local deadline=$((SECONDS + 60))
    until converged; do
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}

for p in "${PARTS[@]}"; do start "$p"; done
until "$BIN" status --data-dir "$DATA" --format json 2>/dev/null | jq -e '.nodes | length == 3' >/dev/null; do
    sleep 0.1
done
cat >"$WORK/workloads.toml" <<'EOF'
[[workload]]
name = "fleet"
command = ["sleep", "3600"]
copies = 6
controller = "intent"
period = "200ms"
startup = "100ms"
grace = "300ms"

[[workload]]
name = "names"
command = ["sleep", "3600"]
copies = 3
controller = "named"
period = "200ms"
startup = "100ms"
grace = "300ms"
EOF
"$BIN" apply --data-dir "$DATA" -f "$WORK/workloads.toml" >/dev/null
wait_converged || { echo "error: the cluster never converged before the kills" >&2; exit 1; }
declared=$(get | jq -c '[.workloads[] | {name, desired}]')
if [[ "${INJECT:-}" == duplicate ]]; then
    env SETPOINT_AGENT="$DATA/nodes/n1" SETPOINT_COPY=fleet-0 setsid sleep 3600 </dev/null >/dev/null 2>&1 &
    sleep 0.2
    sample "the injected duplicate"
fi

# Bash's RANDOM, seeded, makes every choice and pause the same for the same seed.
RANDOM=$SEED
declare -A KILLED=([controller]=0 [agent]=0)
started=$SECONDS
for ((i = 1; i <= KILLS; i++)); do
    victim=${PARTS[RANDOM % ${#PARTS[@]}]}
    kill -KILL "${PID[$victim]}"
    wait "${PID[$victim]}" 2>/dev/null || true
    [[ $victim == c* ]] && KILLED[controller]=$((KILLED[controller] + 1)) || KILLED[agent]=$((KILLED[agent] + 1))
    sample "kill $i ($victim)"
    sleep "0.$(printf '%03d' $((RANDOM % 500)))"
    start "$victim"
    sleep "0.$(printf '%03d' $((200 + RANDOM % 700)))"
    sample "restart $i ($victim)"
done
kill_seconds=$((SECONDS - started))

settle_start=$SECONDS
if wait_converged; then settled=$((SECONDS - settle_start)); else settled="never (60 s)"; fi
sample "the end"
now=$(get)
LOST=$(jq -n --argjson want "$declared" --argjson got "$(echo "$now" | jq -c '[.workloads[] | {name, desired}]')" \
    '[$want[] | select(. as $w | $got | index($w) | not)] | length')
# Orphans: running copies no assignment of their workload wants.
wanted=$(echo "$now" | jq -r '.workloads[].copies[] | select(.assigned) | .copy' | sort)
running=$(copies | awk '{print $2}' | sort)
ORPHANS=$(comm -13 <(echo "$wanted") <(echo "$running") | grep -c . || true)
stop_all
sleep 0.5
LEFT=$(copies | grep -c . || true)
ORPHANS=$((ORPHANS + LEFT))

echo "kill audit: seed $SEED, $KILLS SIGKILLs (${KILLED[controller]} of controllers, ${KILLED[agent]} of agents) in ${kill_seconds} s"
echo "binary: $BIN"
echo "load: $(uptime)"
echo "converged again ${settled} s after the last kill"
echo "duplicates: $DUPLICATES (identity-samples with two live processes)"
echo "orphans: $ORPHANS ($LEFT left after every part stopped)"
echo "lost declarations: $LOST"
if ((DUPLICATES + ORPHANS + LOST > 0)); then exit 1; fi
