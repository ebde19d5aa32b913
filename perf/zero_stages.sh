#!/usr/bin/env bash
# ZeRO: step time, peak memory per rank and data-group traffic per step for
# stages 0-3 at dp = 2 and 4, next to `trident estimate`'s prediction.
#   usage: perf/zero_stages.sh [DECK] [STEPS]
# Ranks share cores when there are fewer cores than ranks (--oversubscribe):
# times then measure the code path; memory and bytes are exact.
set -euo pipefail
deck=${1:-input/default.toml}
steps=${2:-10}
bin=${TRIDENT_BIN:-build/src/trident}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--set train.steps="$steps" --set data.val='[]' --set output.metrics='""'
        --set output.log_every=1000 --set system.threads=1 --set zero.persistence_threshold=1000)
echo "machine: $(nproc) cores; deck $deck; $steps steps"
printf '%-3s %-5s %10s %12s %12s %12s %12s %16s\n' dp stage "step ms" params grads optimizer "peak arenas" "data bytes/step"
for dp in 2 4; do
  for stage in 0 1 2 3; do
    out=$(mpirun -np "$dp" --oversubscribe --bind-to none "$bin" train "$deck" "${common[@]}" \
          --set zero.stage="$stage" 2>&1)
    fom=$(grep '^FOM:' <<<"$out" | sed -E 's/^FOM: ([0-9.]+) tokens\/s.*/\1/')
    tokens=$(grep -m1 '^train:' <<<"$out" | sed -E 's/.* = ([0-9]+) tokens\/step.*/\1/')
    ms=$(python3 -c "print(f'{$tokens/float($fom)*1e3:.1f}')")
    mem=$(grep '^memory per rank' <<<"$out")
    field() { sed -E "s/.* $1 ([0-9.]+ [KMG]?i?B).*/\1/" <<<"$mem"; }
    data=$(grep -o 'data [0-9]* calls [0-9.]* [KMG]*i*B' <<<"$out" | awk '{print $4" "$5}' || true)
    printf '%-3s %-5s %10s %12s %12s %12s %12s %16s\n' "$dp" "$stage" "$ms" "$(field params)" \
      "$(field grads)" "$(field optimizer)" "$(field arenas)" "${data:-0 B}"
  done
done
echo
echo "estimate (dp = 4):"
"$bin" estimate "$deck" --world 4 --set zero.persistence_threshold=1000 | sed -n '/^zero /,/^3 /p'
