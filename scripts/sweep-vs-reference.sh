#!/usr/bin/env bash
# sweep-vs-reference.sh: the million-cell lesson sweep (with the exact predictor) against the
# lesson's reference model, per cell, side by side in one run (issue 12, part 4).
#
# usage: scripts/sweep-vs-reference.sh        (about a minute on an idle machine)
# environment:
#   SETPOINT_REFERENCE  the reference folder (default ../shared/reference next to the repository)
#   REPS                timed runs of each command (default 5); every figure is their median
#   SAMPLE_CELLS        cells of the grid the reference runs (default 1000)
#   SKIP_BUILD=1        use target/release/setpoint as it is
#   SP                  the setpoint binary to time (default target/release/setpoint; with
#                       CARGO_TARGET_DIR set, point it there and set SKIP_BUILD=1)
#   BASELINE            another setpoint binary (an older build) to time on the same sweep, in
#                       the same rounds, for a before/after ratio
#
# What it runs, alternating so that both sides see the same load:
#   - `setpoint sweep --delay 0..=199 --period 1..=100 --startup 0..=49 --summary`
#     (1,000,000 cells: desired 6, ledger, 900 s, deaths 300:2; every cell runs the fast engine,
#     the lesson's relation and the exact predictor), on all cores and with RAYON_NUM_THREADS=1;
#   - the same grid as CSV rows to a temporary file (the row writer's cost);
#   - `node scripts/reference-batch.mjs` on SAMPLE_CELLS cells drawn from the same grid
#     (scripts/sample-cells.mjs), minus the same with no input (node's start-up), divided by
#     SAMPLE_CELLS: the reference's time a cell.
# It checks that the reference and the sweep's CSV rows agree on the sampled cells (created,
# delete commands, deleted, overshoot), and prints a markdown table with the load (`uptime`) of
# every run. It never runs inside `cargo test` and writes no file outside a temporary folder.
#
# needs: cargo, node, awk, GNU time at /usr/bin/time (apt-get install time).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
REF=$(cd "${SETPOINT_REFERENCE:-$ROOT/../shared/reference}" && pwd)
REPS=${REPS:-5}
SAMPLE_CELLS=${SAMPLE_CELLS:-1000}
SAMPLE_SEED=20260913
export SETPOINT_REFERENCE=$REF

for tool in cargo node awk /usr/bin/time; do
    command -v "$tool" >/dev/null || {
        echo "error: $tool is missing (/usr/bin/time: apt-get install time)" >&2
        exit 1
    }
done

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
say() { echo "== $*" >&2; }
load1() { cut -d' ' -f1 /proc/loadavg; }

if [ "${SKIP_BUILD:-}" != 1 ]; then
    say "building (release)"
    cargo build --release --quiet --bin setpoint
fi
SP=${SP:-$ROOT/target/release/setpoint}
GRID=(--delay 0..=199 --period 1..=100 --startup 0..=49)
CELLS=1000000

# timed NAME COMMAND...: runs COMMAND once with stdout to $TMP/NAME.out, appends
# "wall user load" to $TMP/NAME.times.
timed() {
    local name=$1
    shift
    local l
    l=$(load1)
    /usr/bin/time -f "%e %U" -o "$TMP/time" "$@" >"$TMP/$name.out"
    echo "$(cat "$TMP/time") $l" >>"$TMP/$name.times"
}
# median NAME COLUMN: the median of one column (1 wall, 2 user, 3 load) of NAME's runs.
median() { awk -v c="$2" '{print $c}' "$TMP/$1.times" | sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
range() { awk -v c="$2" '{print $c}' "$TMP/$1.times" | sort -g | awk 'NR==1{lo=$1} {hi=$1} END {print lo "–" hi}'; }
calc() { awk "BEGIN {print $1}"; }

say "sample of $SAMPLE_CELLS cells"
# The same cells as scripts/compare-reference.sh (the same generator and seed).
node scripts/sample-cells.mjs "$SAMPLE_SEED" "$SAMPLE_CELLS" >"$TMP/sample.jsonl"
: >"$TMP/empty.jsonl"

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
say "warm-up"
"$SP" sweep "${GRID[@]}" --summary >/dev/null
node scripts/reference-batch.mjs <"$TMP/sample.jsonl" >/dev/null

for i in $(seq "$REPS"); do
    say "round $i of $REPS"
    timed sweep2 "$SP" sweep "${GRID[@]}" --summary
    timed ref node scripts/reference-batch.mjs <"$TMP/sample.jsonl"
    RAYON_NUM_THREADS=1 timed sweep1 "$SP" sweep "${GRID[@]}" --summary
    timed ref0 node scripts/reference-batch.mjs <"$TMP/empty.jsonl"
    if [ -n "${BASELINE:-}" ]; then
        timed base2 "$BASELINE" sweep "${GRID[@]}" --summary
    fi
done
say "CSV rows"
for i in $(seq "$REPS"); do
    timed csv "$SP" sweep "${GRID[@]}"
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# The reference's answers against the sweep's rows for the same cells. Cell number of
# (U, G, B) in this grid: ((U - 1) * 200 + G) * 50 + B; the CSV's line is that plus 2.
node -e '
const fs = require("fs");
const sample = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
const ref = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").map(JSON.parse);
console.log(sample.map((c) => ((c.U - 1) * 200 + c.G) * 50 + c.B + 2).join("\n"));' \
    "$TMP/sample.jsonl" "$TMP/ref.out" >"$TMP/lines"
# A sample of many cells draws some cell twice (10,000 of 1,000,000: about 50 pairs), so each
# line keeps the list of every sample index that asked for it.
awk -F, 'NR == FNR { want[$1] = ($1 in want) ? want[$1] " " FNR : FNR; next }
    FNR == 1 { for (i = 1; i <= NF; i++) col[$i] = i }
    (FNR in want) { n = split(want[FNR], at, " ")
        for (k = 1; k <= n; k++) print at[k], $col["created"], $col["delete_commands"], $col["deleted"], $col["overshoot"] }' \
    "$TMP/lines" "$TMP/csv.out" | sort -n >"$TMP/ours"
MISMATCHED=$(node -e '
const fs = require("fs");
const ref = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
const ours = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").map((l) => l.split(" ").map(Number));
const at = new Map(ours.map((o) => [o[0], o]));
let bad = 0;
ref.forEach((r, i) => { const o = at.get(i + 1);
  if (!o || o[1] !== r.created || o[2] !== r.commands || o[3] !== r.deleted || o[4] !== r.overshoot) bad++; });
console.log(bad);' "$TMP/ref.out" "$TMP/ours")

REF_CELL=$(calc "($(median ref 1) - $(median ref0 1)) / $SAMPLE_CELLS")
REF_CPU=$(calc "($(median ref 2) - $(median ref0 2)) / $SAMPLE_CELLS")
SW2=$(median sweep2 1)
SW1=$(median sweep1 1)
CSV=$(median csv 1)
us() { awk "BEGIN {printf \"%.3f\", $1 * 1e6}"; }
times_() { awk "BEGIN {printf \"%.0f\", $1}"; }

cat <<EOF
$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), $(nproc) cores, load average before $LOAD_BEFORE, after $LOAD_AFTER
Medians of $REPS runs each, alternated; the last column is the range of the 1-minute load average at the start of the runs.

| what | wall (median) | wall (range) | user CPU (median) | per cell | reference per cell | ratio | load |
| --- | --- | --- | --- | --- | --- | --- | --- |
| sweep, $CELLS cells, --summary, $(nproc) threads | $SW2 s | $(range sweep2 1) s | $(median sweep2 2) s | $(us "$SW2 / $CELLS") µs | $(us "$REF_CELL") µs | $(times_ "$REF_CELL / ($SW2 / $CELLS)")× | $(range sweep2 3) |
| sweep, $CELLS cells, --summary, 1 thread | $SW1 s | $(range sweep1 1) s | $(median sweep1 2) s | $(us "$SW1 / $CELLS") µs | $(us "$REF_CELL") µs | $(times_ "$REF_CELL / ($SW1 / $CELLS)")× | $(range sweep1 3) |
| sweep, $CELLS cells, CSV rows to a file, $(nproc) threads | $CSV s | $(range csv 1) s | $(median csv 2) s | $(us "$CSV / $CELLS") µs | | | $(range csv 3) |
| reference, $SAMPLE_CELLS sampled cells, minus node's start-up | $(median ref 1) − $(median ref0 1) s | $(range ref 1) s | $(median ref 2) − $(median ref0 2) s | | $(us "$REF_CELL") µs | | $(range ref 3) |
$(if [ -n "${BASELINE:-}" ]; then echo "| BASELINE ($BASELINE), the same --summary sweep, $(nproc) threads | $(median base2 1) s | $(range base2 1) s | $(median base2 2) s | $(us "$(median base2 1) / $CELLS") µs | $(us "$REF_CELL") µs | $(times_ "$REF_CELL / ($(median base2 1) / $CELLS)")× | $(range base2 3) |"; fi)

In CPU time (user), which the other work on a shared machine disturbs less: the sweep on 1 thread
$(us "$(median sweep1 2) / $CELLS") µs a cell, the reference $(us "$REF_CPU") µs a cell: $(times_ "$REF_CPU / ($(median sweep1 2) / $CELLS)")× (node's user time includes its
compiler and collector threads).

- counts of the sweep: \`$(tail -1 "$TMP/sweep2.out")\` (schema, cells, mismatched, overshooting, prediction_mismatched)
- sampled cells whose created, delete commands, deleted or overshoot differ between the reference and the sweep's CSV rows: $MISMATCHED of $SAMPLE_CELLS
EOF
