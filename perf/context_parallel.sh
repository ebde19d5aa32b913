#!/usr/bin/env bash
# Context parallelism against data parallelism on 2 ranks at the same tokens
# per step: cp 2 (each sequence split over the two ranks, attention as a ring
# of key/value blocks) against dp 2 (a whole sequence per rank), at a long
# sequence. Prints tokens/s side by side and their ratio, and for cp 2 the
# ring's timers: its attention blocks, the waits for transfers that
# attention did not hide, and the bytes the context group sent per step.
#   usage: perf/context_parallel.sh [DECK] [SEQ_LEN] [STEPS]
#   env: D_MODEL (256), LAYERS (4), HEADS (4), THREADS (1 per rank), TRIDENT_BIN
# On a machine with fewer cores than 2 * THREADS, ranks share cores: the
# ratio then measures the code path, not the scaling.
set -euo pipefail
deck=${1:-input/default.toml}
seq=${2:-8192}
steps=${3:-5}
bin=${TRIDENT_BIN:-build/src/trident}
d=${D_MODEL:-256} layers=${LAYERS:-4} heads=${HEADS:-4} threads=${THREADS:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "machine: $(nproc) cores, $(uname -r); $bin; deck $deck"
echo "model: seq_len $seq, d_model $d, layers $layers, heads $heads; 2 sequences per step;" \
  "$steps steps; $threads threads per rank"

# run LABEL OVERRIDES...: the run's output (its FOM and timers are parsed below).
run() {
  mpirun -np 2 --oversubscribe --bind-to none "$bin" train "$deck" \
    --set model.seq_len="$seq" --set model.d_model="$d" --set model.layers="$layers" \
    --set model.heads="$heads" --set train.batch=2 --set train.micro_batch=1 \
    --set train.steps="$steps" --set train.warmup=1 --set train.eval_every=0 \
    --set data.val='[]' --set output.metrics='""' --set output.log_every=1000 \
    --set system.threads="$threads" "$@" < /dev/null 2>&1
}
fom() { grep '^FOM:' <<<"$1" | sed -E 's/^FOM: ([0-9.]+) tokens\/s.*/\1/'; }
timer() { grep -E "^  $2 " <<<"$1" | awk '{print $(NF-2)}'; }  # the average over ranks

dp_out=$(run --set parallel.dp=2 --set parallel.cp=1)
cp_out=$(run --set parallel.dp=1 --set parallel.cp=2)
dp_fom=$(fom "$dp_out")
cp_fom=$(fom "$cp_out")
printf '%-6s %12s %12s %12s\n' layout tokens/s forward backward
printf '%-6s %12s %12s %12s\n' "dp 2" "$dp_fom" "$(timer "$dp_out" forward)" \
  "$(timer "$dp_out" backward)"
printf '%-6s %12s %12s %12s\n' "cp 2" "$cp_fom" "$(timer "$cp_out" forward)" \
  "$(timer "$cp_out" backward)"
python3 -c "print(f'cp 2 / dp 2 tokens/s: {float($cp_fom) / float($dp_fom):.3f}')"
compute=$(timer "$cp_out" "ring attention compute")
exposed=$(timer "$cp_out" "ring transfers exposed")
context=$(grep -o 'context [0-9]* calls [0-9.]* [KMG]*i*B sent [0-9.]* [KMG]*i*B' <<<"$cp_out" ||
          true)
echo "ring (cp 2, s over the run, average over ranks): attention blocks $compute," \
  "waiting on transfers (exposed) $exposed"
echo "context group per step per rank: ${context:-none}"
python3 -c "
c, e = float('$compute' or 0), float('$exposed' or 0)
print(f'exposed / (blocks + exposed): {e / (c + e) if c + e > 0 else 0:.3f}'
      ' (the rest of each transfer ran behind the blocks)')"
