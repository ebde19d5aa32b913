#!/bin/bash
# Strong scaling: one deck, the same global batch, on more and more ranks. Submits one
# job per (tp, ranks) and a last job that collects the table and plot (perf/collect_runs.py).
#
#   jobscripts/strong_scaling.sh DECK.toml [trident train options for every run]
#   e.g. RANKS="4 8 16 32 64" TP="1 4" RANKS_PER_NODE=4 GPUS_PER_RANK=1 \
#        JOBSCRIPT=jobscripts/train_multinode.sbatch jobscripts/strong_scaling.sh input/gpt2-124m.toml
#
# Run it on the login node from the repository root (or set TRIDENT_ROOT).
# Knobs (environment variables):
#   RANKS           rank counts to sweep                  (default: "1 2 4 8")
#   TP              tensor-parallel sizes to sweep; dp = ranks / tp; combinations
#                   where tp does not divide ranks are skipped      (default: "1")
#   STEPS           train.steps per run; the FOM leaves out step 0  (default: 50)
#   BATCH           global batch, the same for every run  (default: the deck's train.batch)
#   MICRO           micro-batch per rank, the same for every run
#                   (default: BATCH / the largest dp, one micro-batch per step there)
#   RANKS_PER_NODE  ranks per node; a run with more ranks takes ranks/RANKS_PER_NODE
#                   whole nodes                           (default: 4)
#   GPUS_PER_RANK   0 for CPU jobscripts, 1 for GPU ones  (default: 0)
#   JOBSCRIPT       the jobscript each run uses           (default: jobscripts/train_cpu.sbatch)
#   SBATCH_ARGS     more sbatch options for every job, e.g. "--time=00:20:00 --cpus-per-task=16"
#   EXCLUSIVE       1: whole nodes per run (--exclusive), so runs do not disturb
#                   each other's timings; 0: share nodes   (default: 1)
#   STUDY_DIR       where the runs go   (default: runs/study.strong.<deck>.<date>)
#   COLLECT         1: submit the collecting job; 0: run perf/collect_runs.py yourself (default: 1)
#   PYTHON          the Python 3 the collecting job runs  (default: python3)
# Site settings (partition, account, modules) live in the jobscript's site block;
# SBATCH_ARGS can add a partition or account for this study only.
# Output: STUDY_DIR/trident.<deck>.<layout>.N<ranks>.<date>/ per run, study.env, and
# scaling.csv, scaling.yaml, scaling.png (speedup and efficiency against the run with
# the fewest ranks of each tp).
set -euo pipefail
TRIDENT_ROOT=${TRIDENT_ROOT:-$PWD}
source "$TRIDENT_ROOT/jobscripts/lib.sh"
submit_study strong "$@"
