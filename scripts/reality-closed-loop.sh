#!/usr/bin/env bash
# reality-closed-loop.sh: measure, calibrate, predict, check (issue 20, part 5, the closed loop).
# For every (controller, jittered delay model, seed) it runs `experiment lesson --real`, fits the
# report delay and the startup time from that run's own event log (`calibrate --store`), and
# predicts the run again from the fitted file alone: `run --delay-model empirical:FIT
# --startup-model empirical:FIT` at LAB_SEEDS seeds, per-report, because what the event log
# measures is each copy's ready-to-ledger lag as the ledger saw it, the agent's in-order
# snapshots (and their half-second grid) included. Then a second prediction over all the fits of
# a cell pooled (PREDICT_SEEDS seeds of each fit): a cell passes when every real overshoot lies
# inside the predictions' range and the real mean inside the 95 % interval of a mean of that
# many runs drawn from the pooled prediction.
#
# usage: scripts/reality-closed-loop.sh
# environment:
#   SETPOINT     the binary (default target/release/setpoint, else target/debug/setpoint)
#   TIME_SCALE   real seconds per virtual second (default 0.05; the issue asks ≤ 0.1)
#   SEEDS        the real runs' seeds (default "1 2 3 4 5 6 7 8")
#   MODELS       delay models (default uniform:5:30,lesson-chain,uniform:0:40)
#   CONTROLLERS  (default ledger,intent)
#   LAB_SEEDS    prediction runs per fit (default 200)
#   JOBS         real cells at once (default 6: every cell of one seed together)
#   OUT          where the fits, the CSVs and the table go (default reality-closed-loop/)
#
# Real runs start `sleep` processes under the embedded runtime with a SQLite store in OUT/data;
# nothing listens on the network. It never runs inside `cargo test`.
set -euo pipefail

cd "$(dirname "$0")/.."
BIN=${SETPOINT:-}
if [ -z "$BIN" ]; then
    BIN=target/release/setpoint
    [ -x "$BIN" ] || BIN=target/debug/setpoint
fi
TIME_SCALE=${TIME_SCALE:-0.05}
SEEDS=${SEEDS:-"1 2 3 4 5 6 7 8"}
MODELS=${MODELS:-uniform:5:30,lesson-chain,uniform:0:40}
CONTROLLERS=${CONTROLLERS:-ledger,intent}
LAB_SEEDS=${LAB_SEEDS:-200}
JOBS=${JOBS:-6}
OUT=${OUT:-reality-closed-loop}
mkdir -p "$OUT/fits"

echo "binary $BIN, time scale $TIME_SCALE, seeds $SEEDS, models $MODELS" | tee "$OUT/conditions.txt"
echo "load before: $(uptime)" | tee -a "$OUT/conditions.txt"
IFS=, read -r -a models <<<"$MODELS"
IFS=, read -r -a controllers <<<"$CONTROLLERS"

pred="$OUT/predicted.csv"
echo "controller,model,real_seed,seed,overshoot" >"$pred"
: >"$OUT/real.csv"
for s in $SEEDS; do
    echo "real runs, seed $s: $(date -u +%T), $(uptime)" | tee -a "$OUT/conditions.txt"
    "$BIN" experiment lesson --real --time-scale "$TIME_SCALE" --delay-model "$MODELS" \
        --controllers "$CONTROLLERS" --seed "$s" --jobs "$JOBS" --format csv \
        --data-dir "$OUT/data" >"$OUT/real-$s.csv" 2>"$OUT/real-$s.log"
    # Each cell's store is kept until the next seed reuses its directory: fit it now.
    for c in "${controllers[@]}"; do
        for m in "${models[@]}"; do
            slug="$c-$(echo "$m" | tr ':.,' '---')"
            fit="$OUT/fits/$slug-seed$s.toml"
            "$BIN" calibrate --store "sqlite:$OUT/data/$slug" --time-scale "$TIME_SCALE" \
                -o "$fit" --format csv >"$OUT/fits/$slug-seed$s.csv" 2>/dev/null
            for p in $(seq 1 "$LAB_SEEDS"); do
                "$BIN" run --delay-model "empirical:$fit" --startup-model "empirical:$fit" \
                    --controller "$c" --seed "$p" --format csv |
                    awk -F'"' -v c="$c" -v m="$m" -v s="$s" -v p="$p" \
                        'NR == 2 { split($3, f, ","); print c "," m "," s "," p "," f[11] }' >>"$pred"
            done
        done
    done
done
echo "load after: $(uptime)" | tee -a "$OUT/conditions.txt"

python3 - "$OUT" <<'EOF' | tee "$OUT/table.md"
import csv, glob, math, sys
out = sys.argv[1]
pred = {}
for r in csv.DictReader(open(f"{out}/predicted.csv")):
    pred.setdefault((r["controller"], r["model"]), {}).setdefault(int(r["real_seed"]), []).append(
        float(r["overshoot"]))
real = {}
for path in sorted(glob.glob(f"{out}/real-*.csv")):
    for r in csv.DictReader(open(path)):
        real.setdefault((r["controller"], r["delay_model"]), []).append(
            (int(r["seed"]), float(r["real_overshoot"])))
print("| controller | delay model | real overshoot (seeds) | real mean | each run inside its own fit's range | pooled prediction min..max | pooled mean | 95 % interval of a mean of n | inside |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for (c, m), runs in sorted(real.items()):
    runs.sort()
    xs = [x for _, x in runs]
    n = len(xs)
    mean = sum(xs) / n
    fits = pred[(c, m)]
    own = sum(1 for s, x in runs if min(fits[s]) <= x <= max(fits[s]))
    ys = [y for v in fits.values() for y in v]
    lm = sum(ys) / len(ys)
    sd = math.sqrt(sum((y - lm) ** 2 for y in ys) / (len(ys) - 1))
    half = 1.96 * math.sqrt(sd * sd / n + sd * sd / len(ys))
    lo, hi = lm - half, lm + half
    ok = all(min(ys) <= x <= max(ys) for x in xs) and lo <= mean <= hi
    shown = ", ".join(f"{x:g} ({s})" for s, x in runs)
    print(f"| {c} | {m} | {shown} | {mean:.2f} | {own} of {n} | {min(ys):g}..{max(ys):g} | {lm:.2f} | {lo:.2f}..{hi:.2f} | {'yes' if ok else 'NO'} |")
EOF
