#!/usr/bin/env bash
# engine-same.sh: the general engine's outputs, byte for byte, against another build of
# setpoint (issue 24: every change to the engines keeps every output byte).
#
# usage: BASELINE=/path/to/old/setpoint scripts/engine-same.sh
# environment:
#   BASELINE     the setpoint binary to compare with (required): a release build from before
#                the change
#   NEW          the binary under test (default $CARGO_TARGET_DIR/release/setpoint, or
#                target/release/setpoint)
#   SKIP_BUILD=1 use the release build as it is
#   RUNS         Monte Carlo runs per cell of the large sweeps (default 40)
#
# What it compares (every output to a file, then `cmp`):
#   - Monte Carlo sweeps as CSV over every controller (ledger, intent, expectations, named,
#     gated) and every delay model (fixed, uniform, the lesson's chain, an empirical file), on
#     periods 1 to 61 s and startups 0 to 20 s, with deaths, under per-report and under each
#     other pipeline (in-order, in-order with snapshots, snapshot, per-copy), and over startup
#     models;
#   - the same grid as single-run JSON rows, and the lesson's world sweep (the fast engine and
#     the predictor);
#   - `setpoint run` of every scenario file in scenarios/ (faults, rolling updates, crash
#     loops, stale views, outages, lost deletes), as JSON, with --runs, and with --trace; and
#     with --trace under fixed delays (0, 20 and 7.5 s) with each controller.
# It prints one line per comparison and exits 1 at the first difference. It writes nothing
# outside a temporary folder.
set -euo pipefail

cd "$(dirname "$0")/.."
: "${BASELINE:?set BASELINE to the setpoint binary to compare with}"
RUNS=${RUNS:-40}
if [ "${SKIP_BUILD:-}" != 1 ] && [ -z "${NEW:-}" ]; then
    cargo build --release --quiet --bin setpoint
fi
NEW=${NEW:-${CARGO_TARGET_DIR:-target}/release/setpoint}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
n=0

# same NAME ARGS...: runs both binaries with ARGS and compares stdout and the exit code.
same() {
    local name=$1
    shift
    local a=0 b=0
    "$BASELINE" "$@" >"$TMP/a" 2>"$TMP/a.err" || a=$?
    "$NEW" "$@" >"$TMP/b" 2>"$TMP/b.err" || b=$?
    if [ "$a" != "$b" ] || ! cmp -s "$TMP/a" "$TMP/b"; then
        echo "DIFFERENT: $name (exit $a vs $b): $*" >&2
        cmp "$TMP/a" "$TMP/b" >&2 || true
        exit 1
    fi
    n=$((n + 1))
    echo "same: $name ($(wc -c <"$TMP/a") bytes)"
}

# same_trace NAME ARGS...: as `same`, with --trace FILE, comparing the trace files too.
same_trace() {
    local name=$1
    shift
    "$BASELINE" "$@" --trace "$TMP/ta" >"$TMP/a" 2>/dev/null || true
    "$NEW" "$@" --trace "$TMP/tb" >"$TMP/b" 2>/dev/null || true
    if ! cmp -s "$TMP/a" "$TMP/b" || ! cmp -s "$TMP/ta" "$TMP/tb"; then
        echo "DIFFERENT: $name: $* --trace" >&2
        exit 1
    fi
    n=$((n + 1))
    echo "same: $name ($(wc -c <"$TMP/ta") trace bytes)"
}

EMP=empirical:scenarios/empirical/report-delay.toml
MODELS="fixed:0,fixed:20,fixed:7.5,uniform:5:30,lesson-chain,$EMP"
CONTROLLERS=ledger,intent,expectations,named,gated
GRID=(--desired 3,6,40 -U 1..=61:6 -B 0,5,20 --delay-model "$MODELS" --controller "$CONTROLLERS")

same "monte carlo, every controller and delay model" \
    sweep "${GRID[@]}" --runs "$RUNS" --deaths 300:2,600:5
same "monte carlo, no deaths, 300 s" \
    sweep "${GRID[@]}" --runs "$RUNS" --deaths none --duration 300 --seed 9
same "monte carlo summary" sweep "${GRID[@]}" --runs "$RUNS" --summary
same "single runs as json" sweep "${GRID[@]}" --format json
for pipe in "--pipeline in-order --nodes 3" "--pipeline in-order --nodes 2 --report-every 4.5" \
    "--pipeline snapshot --nodes 3" "--pipeline per-copy"; do
    # shellcheck disable=SC2086
    # A small grid: the snapshot pipeline of builds before issue 24 takes minutes on a large one.
    same "monte carlo, $pipe" sweep --desired 6 -U 5..=61:14 -B 0,5 \
        --delay-model "fixed:20,uniform:5:30,lesson-chain,$EMP" --controller "$CONTROLLERS" \
        --runs 5 $pipe
done
# The snapshot pipeline's long chains of replaced snapshots (issue 24, part 4: a build before
# it takes about 16 s on the first), and snapshots whose reports an outage of one workload
# holds apart from the others'.
cat >"$TMP/chain.toml" <<'TOML'
period = 1
duration = 135
seed = 7303134752413288063
[controller]
kind = "ledger"
[delay]
model = "uniform"
min = 3.703
max = 41.799
[pipeline]
mode = "snapshot"
nodes = 4
[[workload]]
name = "w0"
desired = 8
startup = 2
[[workload]]
name = "w1"
desired = 8
startup = 2
[[workload]]
name = "w2"
desired = 9
startup = 2
TOML
same "snapshot pipeline, a long chain of replacements" run "$TMP/chain.toml" --format json
cat >"$TMP/outages.toml" <<'TOML'
period = 10
duration = 400
seed = 11
[controller]
kind = "intent"
[delay]
model = "uniform"
min = 1
max = 12
[pipeline]
mode = "snapshot"
nodes = 2
[[workload]]
name = "a"
desired = 5
startup = 1
[[workload]]
name = "b"
desired = 4
startup = 3
[[workload]]
name = "c"
desired = 3
startup = 0
[[event]]
at = 40
kind = "outage"
workload = "a"
seconds = 25
[[event]]
at = 50
kind = "outage"
workload = "b"
seconds = 40
[[event]]
at = 60
kind = "deaths"
count = 2
[[event]]
at = 120
kind = "scale"
workload = "c"
desired = 9
[[event]]
at = 130
kind = "outage"
workload = "c"
seconds = 30
[[event]]
at = 200
kind = "outage"
seconds = 15
TOML
for c in ledger intent expectations named gated; do
    same "snapshot pipeline, outages of one workload, $c, 40 seeds" \
        run "$TMP/outages.toml" --controller "$c" --format json --runs 40
    same_trace "snapshot pipeline, outages of one workload, $c, seed 5" \
        run "$TMP/outages.toml" --controller "$c" --seed 5
done
same "startup models" sweep --desired 6 -U 5..=60:11 --delay-model fixed:3,lesson-chain \
    --startup-model "fixed:5,uniform:1:30,empirical:scenarios/empirical/startup.toml" \
    --controller "$CONTROLLERS" --runs 10
same "lesson world sweep (fast engine, predictor)" \
    sweep --delay 0..=60:3 --period 1..=100:3 --startup 0..=20:4
same "lesson world summary" sweep --delay 0..=199:7 --period 1..=100 --startup 0..=49:5 --summary

for f in scenarios/*.toml; do
    same "run $f" run "$f" --format json
    same "run $f, 20 seeds" run "$f" --format json --runs 20
    for c in ledger intent named gated expectations; do
        same_trace "run $f, $c, seed 3" run "$f" --controller "$c" --seed 3
    done
done
# The scenario files again under delays that draw nothing: only there do a batch's reports
# travel in one queue entry and a pass's kills report in one step (issue 24, part 6).
for f in scenarios/*.toml; do
    for d in fixed:0 fixed:20 fixed:7.5; do
        for c in ledger intent named gated expectations; do
            same_trace "run $f, $d, $c" run "$f" --delay-model "$d" --controller "$c" --seed 3
        done
    done
done
# Pictures: the timeline (SVG and PNG) at the durations the tests use and longer, on both
# engines, and a report page (it draws every workload's timeline).
for d in 900 3600 100000 10000000; do
    same "plot timeline, $d s" plot timeline --duration "$d" -o -
    same "plot timeline -G 60, $d s" plot timeline -G 60 --duration "$d" -o -
    same "plot timeline named lesson-chain, $d s" plot timeline --controller named \
        --delay-model lesson-chain --duration "$d" -o -
done
for c in ledger intent expectations named gated; do
    same "plot timeline $c lesson-chain" plot timeline --controller "$c" --delay-model lesson-chain -o -
done
for f in scenarios/*.toml; do
    same "plot timeline $f" plot timeline "$f" -o -
done
for args in "-G 60" "--duration 100000" "--controller named --delay-model lesson-chain"; do
    # shellcheck disable=SC2086
    "$BASELINE" plot timeline $args -o "$TMP/a.png" >/dev/null
    # shellcheck disable=SC2086
    "$NEW" plot timeline $args -o "$TMP/b.png" >/dev/null
    cmp "$TMP/a.png" "$TMP/b.png" || {
        echo "DIFFERENT: plot timeline $args (PNG)" >&2
        exit 1
    }
    n=$((n + 1))
    echo "same: plot timeline $args (PNG, $(wc -c <"$TMP/a.png") bytes)"
done
"$BASELINE" report scenarios/faults.toml -o "$TMP/a.html" >/dev/null
"$NEW" report scenarios/faults.toml -o "$TMP/b.html" >/dev/null
cmp "$TMP/a.html" "$TMP/b.html" || {
    echo "DIFFERENT: report scenarios/faults.toml" >&2
    exit 1
}
n=$((n + 1))
echo "same: report scenarios/faults.toml"
echo "all $n comparisons byte-identical ($BASELINE against $NEW)"
