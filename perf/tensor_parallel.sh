#!/usr/bin/env bash
# Tensor parallelism: step time and bytes communicated per step per rank (the
# payload, and the bytes each rank sends by nccl-tests' bus convention) for
# tp = 1, 2, 4 (dp = 1) on one model, with and without sequence parallelism.
#   usage: perf/tensor_parallel.sh [DECK] [STEPS]
# On a machine with fewer cores than ranks, ranks share cores (--oversubscribe),
# so step times measure the code path, not the scaling; bytes are exact.
set -euo pipefail
deck=${1:-input/default.toml}
steps=${2:-20}
bin=${TRIDENT_BIN:-build/src/trident}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "machine: $(nproc) cores; deck $deck; $steps steps; model overrides: d_model 256, heads 8"
printf '%-4s %-5s %12s %14s %14s %18s %18s\n' tp sp "step ms" "tokens/s" "tensor calls" \
  "payload/step" "sent/step"
for tp in 1 2 4; do
  for sp in false true; do
    [ "$tp" = 1 ] && [ "$sp" = true ] && continue
    out=$(mpirun -np "$tp" --oversubscribe --bind-to none "$bin" train "$deck" \
      --set parallel.tp="$tp" --set parallel.sequence_parallel="$sp" --set model.d_model=256 \
      --set model.heads=8 --set train.batch=4 --set train.micro_batch=4 --set train.steps="$steps" \
      --set data.val='[]' --set output.metrics='""' --set output.log_every=1000 \
      --set system.threads=1 2>&1)
    fom=$(grep '^FOM:' <<<"$out" | sed -E 's/^FOM: ([0-9.]+) tokens\/s.*/\1/')
    ms=$(python3 -c "print(f'{4*128/float($fom)*1e3:.1f}')")
    tensor=$(grep -o 'tensor [0-9]* calls [0-9.]* [KMG]*i*B sent [0-9.]* [KMG]*i*B' <<<"$out" ||
             true)
    calls=$(awk '{print $2}' <<<"$tensor")
    bytes=$(awk '{print $4" "$5}' <<<"$tensor")
    sent=$(awk '{print $7" "$8}' <<<"$tensor")
    printf '%-4s %-5s %12s %14s %14s %18s %18s\n' "$tp" "$sp" "$ms" "$fom" "${calls:-0}" \
      "${bytes:-0 B}" "${sent:-0 B}"
  done
done
