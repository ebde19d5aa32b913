# Shared by the Slurm tests; sourced. Expects CLUSTER (the directory cluster.sh up
# used) and sets SLURM_CONF so sbatch, srun and squeue talk to that test cluster.
export SLURM_CONF=$CLUSTER/etc/slurm.conf
[ -f "$SLURM_CONF" ] || { echo "FAIL: no test cluster at $CLUSTER (the slurm_up fixture did not run or failed)"; exit 1; }
# The jobs run on a node that claims more CPUs than the machine has, so the cluster
# has no CPU binding (TaskPlugin=task/none): let the jobscripts pass no --cpu-bind.
export CPU_BIND=

fail() {
  echo "FAIL: $*"
  echo "--- squeue"; squeue 2>&1 || true
  echo "--- slurmctld log (last 15 lines)"; tail -n 15 "$CLUSTER/log/slurmctld.log" 2>&1 || true
  exit 1
}

# wait_jobs SECONDS JOBID...: until none of the jobs is pending or running.
wait_jobs() {
  local limit=$1 deadline
  shift
  deadline=$(( $(date +%s) + limit ))
  while [ -n "$(squeue -h -o %i -j "$(IFS=,; echo "$*")" 2>/dev/null)" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "jobs $* still queued or running after $limit s"
    sleep 0.5
  done
}

# job_field JOBID FIELD: a field of `scontrol show job` (completed jobs stay MinJobAge s).
job_field() { scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"; }
