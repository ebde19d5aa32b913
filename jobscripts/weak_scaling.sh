#!/bin/bash
# Weak scaling: the same work per data-parallel rank, so the global batch grows with the
# ranks. Submits one job per (tp, ranks) and a last job that collects the table and plot
# (perf/collect_runs.py).
#
#   jobscripts/weak_scaling.sh DECK.toml [trident train options for every run]
#   e.g. RANKS="1 2 4 8 16" BATCH_PER_DP=8 SBATCH_ARGS="--cpus-per-task=16" \
#        jobscripts/weak_scaling.sh input/default.toml
#
# Run it on the login node from the repository root (or set TRIDENT_ROOT).
# Knobs (environment variables):
#   RANKS           rank counts to sweep                  (default: "1 2 4 8")
#   TP              tensor-parallel sizes to sweep; dp = ranks / tp; combinations
#                   where tp does not divide ranks are skipped      (default: "1")
#   STEPS           train.steps per run; the FOM leaves out step 0  (default: 50)
#   BATCH_PER_DP    sequences per data-parallel rank per step; train.batch = BATCH_PER_DP * dp
#                                                         (default: the deck's micro_batch, else 4)
#   MICRO           micro-batch per rank                  (default: BATCH_PER_DP)
#   RANKS_PER_NODE  ranks per node; a run with more ranks takes ranks/RANKS_PER_NODE
#                   whole nodes                           (default: 4)
#   GPUS_PER_RANK   0 for CPU jobscripts, 1 for GPU ones  (default: 0)
#   JOBSCRIPT       the jobscript each run uses           (default: jobscripts/train_cpu.sbatch)
#   SBATCH_ARGS     more sbatch options for every job, e.g. "--time=00:20:00 --cpus-per-task=16"
#   EXCLUSIVE       1: whole nodes per run (--exclusive); 0: share nodes   (default: 1)
#   STUDY_DIR       where the runs go   (default: runs/study.weak.<deck>.<date>)
#   COLLECT         1: submit the collecting job; 0: run perf/collect_runs.py yourself (default: 1)
#   PYTHON          the Python 3 the collecting job runs  (default: python3)
# Site settings (partition, account, modules) live in the jobscript's site block;
# SBATCH_ARGS can add a partition or account for this study only.
# Output: STUDY_DIR/trident.<deck>.<layout>.N<ranks>.<date>/ per run, study.env, and
# scaling.csv, scaling.yaml, scaling.png (efficiency = tokens/s per rank against the
# run with the fewest ranks of each tp).
set -euo pipefail
TRIDENT_ROOT=${TRIDENT_ROOT:-$PWD}
source "$TRIDENT_ROOT/jobscripts/lib.sh"
submit_study weak "$@"
