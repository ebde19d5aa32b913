#!/usr/bin/env bash
# The largest GPT-2 124M micro-batch that trains on one GPU (bf16 weights and
# activations, fp32 masters), without recompute and with full recompute,
# against `trident estimate`. Each setting tries its micro-batches in order,
# three steps each, and stops at the first that does not fit. Per try: fits or
# not, the arenas and kernel scratch the run reports, the estimate's arenas,
# and the step time.
#   usage: perf/gpu_max_batch.sh [LOG_DIR] ["MICRO_BATCHES none"] ["MICRO_BATCHES full"]
set -uo pipefail
logs=$(realpath -m "${1:-gpu-max-batch}")
none_list=${2:-176 192 208}
full_list=${3:-288 320 352}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${TRIDENT_BIN:-$here/build-cuda/src/trident}
[ -x "$bin" ] || bin=$(command -v trident)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$logs"
data=${DATA_DIR:-$here/data}
[ -f "$data/corpus_train.bin" ] || bash "$here/input/make_corpus.sh" "$bin" "$data" >/dev/null
common=(--set precision.dtype=bf16 --set "data.train=$data/corpus_train.bin" --set 'data.val=[]'
        --set train.eval_sequences=0 --set train.warmup=0 --set 'checkpoint.dir=""' --set checkpoint.every=0 --set checkpoint.minutes=0
        --set output.log_every=1)
echo "device: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1)"
printf '%-9s %5s %-5s %12s %15s %16s %9s\n' recompute mb fits "arenas" "kernel scratch" \
  "estimate arenas" "step ms"
for recompute in none full; do
  list=$none_list
  [ $recompute = full ] && list=$full_list
  for mb in $list; do
    sets=("${common[@]}" --set "train.batch=$mb" --set "train.micro_batch=$mb"
          --set "train.recompute=$recompute")
    estimate=$("$bin" estimate "$here/input/gpt2-124m.toml" --world 1 "${sets[@]}" 2>&1 |
               grep -oE 'arenas [0-9.]+ [GMK]iB' | head -1 | cut -d' ' -f2-)
    log=$logs/${recompute}_$mb.log
    timeout 60 mpirun -np 1 "$bin" train "$here/input/gpt2-124m.toml" --set system.device=cuda \
      "${sets[@]}" --set train.steps=3 --set 'output.metrics=""' >"$log" 2>&1
    rc=$?
    mem=$(grep -E '^memory per rank' "$log")
    arenas=$(sed -nE 's/.* arenas ([0-9.]+ [GMK]iB).*/\1/p' <<<"$mem")
    scratch=$(sed -nE 's/.*kernel scratch ([0-9.]+ [GMK]?i?B).*/\1/p' <<<"$mem")
    step_ms=$(grep -E '^step +3/3' "$log" | grep -oE '[0-9]+ ms' | cut -d' ' -f1)
    fits=yes
    [ $rc -eq 0 ] && [ -n "$mem" ] || fits=no
    printf '%-9s %5s %-5s %12s %15s %16s %9s\n' $recompute $mb $fits "${arenas:--}" \
      "${scratch:--}" "${estimate:--}" "${step_ms:--}"
    [ $fits = yes ] || { grep -m1 -E '^error|out of memory' "$log" | cut -c1-160; break; }
  done
done
