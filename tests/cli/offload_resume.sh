#!/usr/bin/env bash
# Checkpoints carry offloaded optimizer state: a run saved with NVMe offload
# resumes without offload, and one saved without resumes into NVMe offload (and
# into CPU offload), each continuing its reference bit for bit (losses, then
# every parameter, Adam moment and fp32 master of the final checkpoint).
# ZeRO-3 with bf16 weights, so the masters are offloaded too; 4 KiB blocks.
#   usage: offload_resume.sh "MPIEXEC..." TRIDENT_BINARY FIXTURE_DIR
set -euo pipefail
mpiexec=$1 bin=$2 tiny=$3/tiny.toml dir=$3/offload_resume
here=$(dirname "$0")
rm -rf "$dir" && mkdir -p "$dir/swap"
train() {  # NAME OFFLOAD [ARGS...]
  local name=$1 home=$2
  shift 2
  timeout -k 5 200 $mpiexec -n 2 "$bin" train "$tiny" --set train.steps=8 \
    --set train.eval_every=0 --set zero.stage=3 --set zero.persistence_threshold=0 \
    --set precision.dtype=bf16 --set offload.optimizer="$home" \
    --set offload.nvme_path="$dir/swap" --set offload.block_mb=0.00390625 \
    --set checkpoint.dir="$dir/$name" --set checkpoint.every=4 --set checkpoint.keep=0 \
    --metrics "$dir/$name.jsonl" "$@" >"$dir/$name.log" 2>&1 || {
    cat "$dir/$name.log"; echo "FAIL: run $name exited non-zero"; exit 1; }
}
train none none
train nvme nvme
train none_to_nvme nvme --resume "$dir/none/step_000004.h5"
train nvme_to_none none --resume "$dir/nvme/step_000004.h5"
train none_to_cpu cpu --resume "$dir/none/step_000004.h5"
python3 "$here/same_losses.py" "$dir/none.jsonl" "$dir/nvme.jsonl" 1
python3 "$here/same_losses.py" "$dir/none.jsonl" "$dir/none_to_nvme.jsonl" 5
python3 "$here/same_losses.py" "$dir/nvme.jsonl" "$dir/nvme_to_none.jsonl" 5
python3 "$here/same_losses.py" "$dir/none.jsonl" "$dir/none_to_cpu.jsonl" 5
for run in nvme none_to_nvme nvme_to_none none_to_cpu; do
  for group in /params /master /optim/exp_avg /optim/exp_avg_sq; do
    h5diff -q "$dir/none/step_000008.h5" "$dir/$run/step_000008.h5" "$group" "$group" || {
      echo "FAIL: $run's $group differs from the run without offload"; exit 1; }
  done
done
[ -z "$(ls -A "$dir/swap")" ] || { echo "FAIL: swap files left in $dir/swap"; exit 1; }
echo "ok: offloaded state saved and resumed across offload settings bit for bit"
