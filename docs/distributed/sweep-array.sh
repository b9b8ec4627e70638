#!/bin/sh
# A sweep as a Slurm job array: task k runs shard k+1 of $SHARDS (docs/distributed.md).
#   sbatch docs/distributed/sweep-array.sh
#   sbatch --dependency=afterok:JOBID --wrap 'setpoint merge results/shard-*.csv > sweep.csv'
# The test `distributed::the_slurm_array_script_runs_shards_that_merge_into_the_whole_sweep`
# runs this script once per task id and checks the merge against the unsharded sweep.
#SBATCH --job-name=setpoint-sweep
#SBATCH --array=0-3
#SBATCH --output=slurm-%A_%a.log
set -eu
SHARDS=4   # keep equal to the size of --array above
OUT=${OUT:-results}
mkdir -p "$OUT"
out="$OUT/shard-$SLURM_ARRAY_TASK_ID.csv"
setpoint sweep --delay-model fixed:30,lesson-chain --period 10..=40:10 --controller ledger,named --runs 20 --seed 7 --shard "$((SLURM_ARRAY_TASK_ID + 1))/$SHARDS" > "$out.tmp"
mv "$out.tmp" "$out"
