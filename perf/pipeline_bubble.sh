#!/usr/bin/env bash
# Pipeline bubble: measured idle share of the ranks' time within the slowest
# rank's schedule (1 - (forward + backward) / (ranks x that span)) against
# theory, (p-1)/(m+p-1) for gpipe and 1f1b, (p-1)/(v*m+p-1) for interleaved
# and for zb-h1 / zb-h2 / zb-v their schedule replayed with unit F, B and W,
# for a few (p, m), with each run's tokens/s; and pipedream, whose theory is 0
# (never flushed): its row shows what the per-step loss reduction and the
# per-micro-batch updates leave idle (no ratio).
#   usage: perf/pipeline_bubble.sh [DECK] [P...]
# Give each rank its own core (p <= cores): with shared cores a waiting rank
# also waits for CPU and the measurement is meaningless.
set -euo pipefail
deck=${1:-input/default.toml}
shift || true
pps=${*:-2}
bin=${TRIDENT_BIN:-build/src/trident}
# D_MODEL: a wider model makes the per-message latency a smaller share of
# each micro-batch (the theory counts compute only).
d_model=${D_MODEL:-256} schedules=${SCHEDULES:-gpipe 1f1b interleaved zb-h1 zb-h2 zb-v pipedream}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "machine: $(nproc) cores; deck $deck (d_model $d_model, 8 layers, micro_batch 1)"
printf '%-3s %-12s %-3s %-3s %10s %10s %8s %10s\n' p schedule m v measured theory ratio tokens/s
for p in $pps; do
  for m in $p $((2 * p)) $((4 * p)); do
    for sched in $schedules; do
      v=1; [ "$sched" = interleaved ] && v=2
      out=$(mpirun -np "$p" --bind-to core "$bin" train "$deck" --set parallel.pp="$p" \
        --set parallel.schedule="$sched" --set parallel.virtual_stages="$v" --set model.layers=8 \
        --set model.d_model="$d_model" --set model.heads=8 --set train.micro_batch=1 \
        --set train.batch="$m" --set train.steps=8 --set data.val='[]' --set output.metrics='""' \
        --set output.log_every=1000 --set system.threads=1 2>&1)
      line=$(grep '^pipeline bubble' <<<"$out")
      meas=$(sed -E 's/.*measured ([0-9.]+)%.*/\1/' <<<"$line")
      theo=$(sed -E 's/.*theory ([0-9.]+)%.*/\1/' <<<"$line")
      ratio=$(python3 -c "t = float($theo); print(f'{float($meas)/t:.2f}' if t > 0 else '-')")
      tps=$(sed -nE 's/^FOM: ([0-9.]+) tokens.*/\1/p' <<<"$out")
      printf '%-3s %-12s %-3s %-3s %9s%% %9s%% %8s %10s\n' "$p" "$sched" "$m" "$v" "$meas" "$theo" "$ratio" "$tps"
    done
  done
done
