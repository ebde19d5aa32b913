#!/usr/bin/env bash
# The CPU jobscript as users submit it: sbatch, 4 ranks started by srun --mpi=pmix,
# finishing with its figure-of-merit line and a run directory named by the convention.
#   usage: cpu_job.sh CLUSTER_DIR TRIDENT_BINARY FIXTURE_DIR WORK_DIR
set -euo pipefail
CLUSTER=$1 bin=$2 fixtures=$3 work=$4
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/tests/slurm/common.sh"
rm -rf "$work" && mkdir -p "$work" && cd "$work"
export TRIDENT_ROOT=$root TRIDENT_BIN=$bin RUNS_DIR=$work/runs

id=$(sbatch --parsable --ntasks-per-node=4 "$root/jobscripts/train_cpu.sbatch" "$fixtures/tiny.toml" \
       --set train.steps=20) || fail "sbatch refused the job"
wait_jobs 120 "$id"
log=$work/trident-cpu-$id.out
cat "$log" 2>/dev/null || fail "no job log $log"
state=$(job_field "$id" JobState) code=$(job_field "$id" ExitCode)
[ "$state" = COMPLETED ] && [ "$code" = 0:0 ] || fail "job $id ended $state with exit $code"

runs=("$RUNS_DIR"/trident.tiny.tp1-pp1-dp4.N4.*)
[ ${#runs[@]} = 1 ] && [ -d "${runs[0]}" ] || fail "expected one run directory trident.tiny.tp1-pp1-dp4.N4.<date>, got: $(ls "$RUNS_DIR")"
run=${runs[0]}
echo "--- $run/trident.out"; cat "$run/trident.out"
grep -Eq '^FOM: [0-9.]+ tokens/s \| [0-9.]+ tokens/s/rank \| MFU [0-9.]+% \| 4 ranks TP\(1\)-PP\(1\)-DP\(4\)' "$run/trident.out" \
  || fail "no 4-rank FOM line in $run/trident.out"
grep -q '^FOM:' "$log" || fail "the job log does not repeat the FOM line"
# The four ranks form one MPI world (srun --mpi=pmix wired them up), not four singletons.
grep -q '| 4 ranks | layout TP(1)-PP(1)-DP(4)-Rank(0)' "$run/trident.out" || fail "the ranks did not form one 4-rank world"
[ "$(grep -c '^trident 0' "$run/trident.out")" = 1 ] || fail "more than one banner: ranks started as singletons?"
[ "$(wc -l < "$run/metrics.jsonl")" = 20 ] || fail "expected 20 metrics records"
grep -q "^job_id=$id$" "$run/run.env" || fail "run.env does not name job $id"
echo "ok: job $id, 4 ranks under srun --mpi=pmix, $(grep '^FOM:' "$run/trident.out")"
