#!/usr/bin/env bash
# The GPU jobscripts' Slurm side. train_gpu.sbatch: one node, four GPUs, one rank per GPU.
# train_multinode.sbatch: two nodes with two GPUs and two ranks each, one MPI world
# across the nodes under srun --mpi=pmix. Both get the --cpus-per-task they ask for.
# The test cluster's GPUs are stand-ins and the ranks run the CPU build, so this checks
# the scripts and the launch, not CUDA.
#   usage: gpu_jobscripts.sh CLUSTER_DIR TRIDENT_BINARY FIXTURE_DIR WORK_DIR
set -euo pipefail
CLUSTER=$1 bin=$2 fixtures=$3 work=$4
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/tests/slurm/common.sh"
rm -rf "$work" && mkdir -p "$work" && cd "$work"
export TRIDENT_ROOT=$root TRIDENT_BIN=$bin RUNS_DIR=$work/runs

# run_job NAME EXPECTED_NODES [sbatch options] JOBSCRIPT: submit, wait, check; sets run.
run_job() {
  local name=$1 want_nodes=$2 id log
  shift 2
  id=$(sbatch --parsable --cpus-per-task=2 "$@" "$fixtures/tiny.toml" --set train.steps=5) \
    || fail "sbatch refused $name"
  wait_jobs 120 "$id"
  log=$(ls "$work"/trident-*-"$id".out)
  cat "$log"
  [ "$(job_field "$id" ExitCode)" = 0:0 ] || fail "$name: job $id exited $(job_field "$id" ExitCode)"
  run=$(sed -n 's/^trident: run directory \([^ ]*\).*/\1/p' "$log")
  [ -d "$run" ] || fail "$name: no run directory named in the job log"
  grep -q "^nodes=$want_nodes$" "$run/run.env" || fail "$name: expected $want_nodes node(s)"
  grep -q '^cpus_per_task=2$' "$run/run.env" || fail "$name: --cpus-per-task=2 did not reach the job"
  ! grep -q 'warning: .*one rank per GPU' "$log" || fail "$name: ranks per node and GPUs per node differ"
  grep -Eq '^FOM: .* \| 4 ranks TP\(1\)-PP\(1\)-DP\(4\)' "$run/trident.out" || fail "$name: no 4-rank FOM line"
  [ "$(grep -c '^trident 0' "$run/trident.out")" = 1 ] || fail "$name: ranks started as singletons"
}

run_job train_gpu 1 "$root/jobscripts/train_gpu.sbatch"
grep -q '^gpus_per_node=4$' "$run/run.env" || fail "train_gpu: the job did not get 4 GPUs"
echo "ok: train_gpu.sbatch: 1 node, 4 GPUs, 4 ranks with 2 CPUs each"

# Both test nodes are one machine: Open MPI's shared-memory transport would take ranks
# on the two "nodes" for neighbours with inconsistent locality and crash, so this job
# talks TCP, as ranks on real separate nodes do.
OMPI_MCA_btl=self,tcp run_job train_multinode 2 --nodes=2 --ntasks-per-node=2 --gpus-per-node=2 \
  "$root/jobscripts/train_multinode.sbatch"
grep -q '^gpus_per_node=2$' "$run/run.env" || fail "train_multinode: the job did not get 2 GPUs per node"
grep -q 'trident: 4 ranks on 2 nodes (n\[1-2\])' "$work"/trident-multinode-*.out || fail "train_multinode: not on n1 and n2"
echo "ok: train_multinode.sbatch: 2 nodes x (2 GPUs, 2 ranks), one 4-rank MPI world"
