#!/usr/bin/env bash
# Checkpoints carry offloaded state: a run saved with NVMe offload resumes
# without offload, and one saved without resumes into NVMe offload (and into
# CPU offload), each continuing its reference bit for bit (losses, then every
# parameter, Adam moment and fp32 master of the final checkpoint). The same
# with the parameter shard offloaded (offload.params), also resumed on one
# rank (another partition of the shard) beside the same resume from the run
# without offload. ZeRO-3 with bf16 weights, so the masters are offloaded
# too; 4 KiB blocks. A cpu home with offload.ratio (part of the state left
# in the arenas) saves and resumes the same way, and its memory line shows
# both parts.
#   usage: offload_resume.sh "MPIEXEC..." TRIDENT_BINARY FIXTURE_DIR
set -euo pipefail
mpiexec=$1 bin=$2 tiny=$3/tiny.toml dir=$3/offload_resume
here=$(dirname "$0")
rm -rf "$dir" && mkdir -p "$dir/swap"
train() {  # NAME OPTIMIZER_HOME [ARGS...]; RANKS=n to change the 2 ranks
  local name=$1 home=$2
  shift 2
  timeout -k 5 200 $mpiexec -n "${RANKS:-2}" "$bin" train "$tiny" --set train.steps=8 \
    --set train.eval_every=0 --set zero.stage=3 --set zero.persistence_threshold=0 \
    --set precision.dtype=bf16 --set offload.optimizer="$home" \
    --set offload.nvme_path="$dir/swap" --set offload.block_mb=0.00390625 \
    --set checkpoint.dir="$dir/$name" --set checkpoint.every=4 --set checkpoint.keep=0 \
    --metrics "$dir/$name.jsonl" "$@" >"$dir/$name.log" 2>&1 || {
    cat "$dir/$name.log"; echo "FAIL: run $name exited non-zero"; exit 1; }
}
same_state() {  # REFERENCE_RUN RUN...
  local ref=$1
  shift
  for run in "$@"; do
    for group in /params /master /optim/exp_avg /optim/exp_avg_sq; do
      h5diff -q "$dir/$ref/step_000008.h5" "$dir/$run/step_000008.h5" "$group" "$group" || {
        echo "FAIL: $run's $group differs from $ref's"; exit 1; }
    done
  done
}
params=(--set offload.params=nvme)
train none none
train nvme nvme
train params nvme "${params[@]}"
train none_to_nvme nvme --resume "$dir/none/step_000004.h5"
train nvme_to_none none --resume "$dir/nvme/step_000004.h5"
train none_to_cpu cpu --resume "$dir/none/step_000004.h5"
train none_to_params none "${params[@]}" --resume "$dir/none/step_000004.h5"
train params_to_none none --resume "$dir/params/step_000004.h5"
train params_to_cpu cpu --set offload.params=cpu --resume "$dir/params/step_000004.h5"
train split cpu --set offload.ratio=0.5
train split_to_none none --resume "$dir/split/step_000004.h5"
train none_to_split cpu --set offload.ratio=0.3 --resume "$dir/none/step_000004.h5"
RANKS=1 train none_on_1 none --resume "$dir/none/step_000004.h5"
RANKS=1 train params_on_1 none --set offload.params=cpu --resume "$dir/params/step_000004.h5"
python3 "$here/same_losses.py" "$dir/none.jsonl" "$dir/nvme.jsonl" 1
python3 "$here/same_losses.py" "$dir/none.jsonl" "$dir/params.jsonl" 1
python3 "$here/same_losses.py" "$dir/none.jsonl" "$dir/split.jsonl" 1
for run in none_to_nvme none_to_cpu none_to_params split_to_none none_to_split; do
  python3 "$here/same_losses.py" "$dir/none.jsonl" "$dir/$run.jsonl" 5
done
python3 "$here/same_losses.py" "$dir/nvme.jsonl" "$dir/nvme_to_none.jsonl" 5
for run in params_to_none params_to_cpu; do
  python3 "$here/same_losses.py" "$dir/params.jsonl" "$dir/$run.jsonl" 5
done
python3 "$here/same_losses.py" "$dir/none_on_1.jsonl" "$dir/params_on_1.jsonl" 5
same_state none nvme params none_to_nvme nvme_to_none none_to_cpu none_to_params params_to_none \
  params_to_cpu split split_to_none none_to_split
same_state none_on_1 params_on_1
# The split keeps optimizer state in the arenas and the rest in host memory.
memory=$(grep '^memory per rank' "$dir/split.log")
grep -q 'optimizer 0 B' <<<"$memory" && { echo "FAIL: split kept no state in the arenas: $memory"; exit 1; }
grep -q 'offloaded to host memory' <<<"$memory" || { echo "FAIL: split put nothing on the host: $memory"; exit 1; }
[ -z "$(ls -A "$dir/swap")" ] || { echo "FAIL: swap files left in $dir/swap"; exit 1; }
echo "ok: offloaded state saved and resumed across offload settings and layouts bit for bit"
