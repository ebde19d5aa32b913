#!/usr/bin/env bash
# Mixed precision and activation recomputation: step time and peak memory per
# rank by category for recompute none / selective / full and precision fp32 /
# bf16 / fp16 (with fp32 or 16-bit gradients), and the final loss (all runs
# train the same steps).
#   usage: perf/precision_recompute.sh [DECK] [STEPS] [RANKS]
# On the CPU, bf16 runs' products run on bf16 kernels (AMX tiles where the CPU
# has them) and fp16's in f32 after widening, so fp16 costs time and saves
# activation memory; on a GPU both run on tensor cores. Recompute trades
# forward work for memory.
set -euo pipefail
deck=${1:-input/default.toml}
steps=${2:-20}
ranks=${3:-1}
bin=${TRIDENT_BIN:-build/src/trident}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--set train.steps="$steps" --set data.val='[]' --set output.metrics='""'
        --set checkpoint.dir='""' --set checkpoint.every=0 --set output.log_every=1000)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "deck $deck; $steps steps on $ranks rank(s); $("$bin" --version 2>&1 | head -1)"
# precision.dtype/precision.reduce_dtype: fp32; 16-bit weights with fp32
# gradients; 16-bit weights and gradients.
printf '%-10s %-10s %9s %11s %11s %11s %13s %13s %10s\n' recompute "dtype/grad" "step ms" params \
  grads optimizer activations "peak arenas" "last loss"
for precision in fp32/fp32 bf16/fp32 bf16/bf16 fp16/fp32 fp16/fp16; do
  dtype=${precision%/*} reduce=${precision#*/}
  for mode in none selective full; do
    out=$(mpirun -np "$ranks" --oversubscribe --bind-to none "$bin" train "$deck" "${common[@]}" \
          --set train.recompute="\"$mode\"" --set precision.dtype="\"$dtype\"" \
          --set precision.reduce_dtype="\"$reduce\"" 2>&1)
    fom=$(grep '^FOM:' <<<"$out" | sed -E 's/^FOM: ([0-9.]+) tokens\/s.*/\1/')
    tokens=$(grep -m1 '^train:' <<<"$out" | sed -E 's/.* = ([0-9]+) tokens\/step.*/\1/')
    ms=$(python3 -c "print(f'{$tokens/float($fom)*1e3:.1f}')")
    mem=$(grep '^memory per rank' <<<"$out")
    field() { sed -E "s/.* $1 ([0-9.]+ [KMG]?i?B).*/\1/" <<<"$mem"; }
    loss=$(grep '^step' <<<"$out" | tail -1 | sed -E 's/.*loss ([0-9.]+).*/\1/')
    printf '%-10s %-10s %9s %11s %11s %11s %13s %13s %10s\n' "$mode" "$precision" "$ms" \
      "$(field params)" "$(field grads)" "$(field optimizer)" "$(field activations)" \
      "$(field arenas)" "$loss"
  done
done
