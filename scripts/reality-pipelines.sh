#!/usr/bin/env bash
# reality-pipelines.sh: do the lab's predictions hold on real processes once the lab models the
# agent's report pipeline? (issue 20, part 5). For every (controller, jittered delay model) it
# runs `experiment lesson --real` at several seeds, and the lab at LAB_SEEDS seeds under the
# agent's pipeline (in-order snapshots of one node every 0.5 s) and under per-report, then
# prints one row per cell: the real overshoots, their mean, the lab's min..max and mean, the
# 95 % interval of a mean of that many runs drawn from the lab (mean ± 1.96 sd / √n), and
# whether every real run is inside the lab's range and the real mean inside the interval.
#
# usage: scripts/reality-pipelines.sh        (SEEDS × about 900 · TIME_SCALE s of real time)
# environment:
#   SETPOINT     the binary (default target/release/setpoint, else target/debug/setpoint)
#   TIME_SCALE   real seconds per virtual second (default 0.05; the issue asks ≤ 0.1)
#   SEEDS        the real runs' seeds (default "1 2 3 4 5")
#   MODELS       delay models (default uniform:5:30,lesson-chain,uniform:0:40)
#   CONTROLLERS  (default ledger,intent)
#   LAB_SEEDS    lab runs per cell (default 200)
#   JOBS         real cells at once (default 6: every cell of one seed together)
#   OUT          where the CSVs and the table go (default reality-pipelines/)
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
SEEDS=${SEEDS:-"1 2 3 4 5"}
MODELS=${MODELS:-uniform:5:30,lesson-chain,uniform:0:40}
CONTROLLERS=${CONTROLLERS:-ledger,intent}
LAB_SEEDS=${LAB_SEEDS:-200}
JOBS=${JOBS:-6}
OUT=${OUT:-reality-pipelines}
mkdir -p "$OUT"

echo "binary $BIN, time scale $TIME_SCALE, seeds $SEEDS, models $MODELS" | tee "$OUT/conditions.txt"
echo "load before: $(uptime)" | tee -a "$OUT/conditions.txt"

# The lab: overshoot per seed, under the agent's pipeline and under per-report.
lab="$OUT/lab.csv"
echo "pipeline,controller,model,seed,overshoot" >"$lab"
IFS=, read -r -a models <<<"$MODELS"
IFS=, read -r -a controllers <<<"$CONTROLLERS"
for c in "${controllers[@]}"; do
    for m in "${models[@]}"; do
        for s in $(seq 1 "$LAB_SEEDS"); do
            for p in agent per-report; do
                flags=(--pipeline per-report)
                [ "$p" = agent ] && flags=(--pipeline in-order --nodes 1 --report-every 0.5)
                "$BIN" run --delay-model "$m" --controller "$c" --seed "$s" "${flags[@]}" \
                    --format csv | awk -F'"' -v p="$p" -v c="$c" -v m="$m" -v s="$s" \
                    'NR == 2 { split($3, f, ","); print p "," c "," m "," s "," f[11] }' >>"$lab"
            done
        done
    done
done

# The real runs: every cell of a seed at once.
for s in $SEEDS; do
    echo "real runs, seed $s: $(date -u +%T), $(uptime)" | tee -a "$OUT/conditions.txt"
    "$BIN" experiment lesson --real --time-scale "$TIME_SCALE" --delay-model "$MODELS" \
        --controllers "$CONTROLLERS" --seed "$s" --jobs "$JOBS" --format csv \
        --data-dir "$OUT/data" >"$OUT/real-$s.csv"
done
echo "load after: $(uptime)" | tee -a "$OUT/conditions.txt"

python3 - "$OUT" <<'EOF' | tee "$OUT/table.md"
import csv, glob, math, sys
out = sys.argv[1]
lab = {}
for r in csv.DictReader(open(f"{out}/lab.csv")):
    lab.setdefault((r["pipeline"], r["controller"], r["model"]), []).append(float(r["overshoot"]))
real = {}
for path in sorted(glob.glob(f"{out}/real-*.csv")):
    for r in csv.DictReader(open(path)):
        real.setdefault((r["controller"], r["delay_model"]), []).append(
            (int(r["seed"]), float(r["real_overshoot"])))
print("| controller | delay model | real overshoot (seeds) | real mean | pipeline | lab min..max | lab mean | 95 % interval of a mean of n | inside |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for (c, m), runs in sorted(real.items()):
    runs.sort()
    xs = [x for _, x in runs]
    n = len(xs)
    mean = sum(xs) / n
    for p in ("agent", "per-report"):
        ys = lab[(p, c, m)]
        lm = sum(ys) / len(ys)
        sd = math.sqrt(sum((y - lm) ** 2 for y in ys) / (len(ys) - 1))
        # The interval of the mean of n runs from the lab, widened by the lab mean's own error.
        half = 1.96 * math.sqrt(sd * sd / n + sd * sd / len(ys))
        lo, hi = lm - half, lm + half
        ok = all(min(ys) <= x <= max(ys) for x in xs) and lo <= mean <= hi
        shown = ", ".join(f"{x:g} ({s})" for s, x in runs)
        name = "in-order every 0.5 s (agent)" if p == "agent" else "per-report"
        print(f"| {c} | {m} | {shown} | {mean:.2f} | {name} | {min(ys):g}..{max(ys):g} | {lm:.2f} | {lo:.2f}..{hi:.2f} | {'yes' if ok else 'NO'} |")
EOF
