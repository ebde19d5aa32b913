#!/usr/bin/env bash
# Pipeline bubble: measured idle share of the ranks' time within the slowest
# rank's schedule (1 - (forward + backward) / (ranks x that span)) against
# theory, (p-1)/(m+p-1) for gpipe and 1f1b, (p-1)/(v*m+p-1) for interleaved
# and for zb-h1 / zb-h2 / zb-v their schedule replayed with unit F, B and W,
# for a few (p, m), with each run's tokens/s and, where 1f1b runs too, each
# bubble over 1F1B's measured one (the zero-bubble targets); and pipedream,
# whose theory is 0 (never flushed): its row shows what the per-step loss
# reduction and the per-micro-batch updates leave idle (no ratio).
#   usage: [ROUNDS=N] [D_MODEL=...] [LAYERS=...] [SCHEDULES="..."]
#          perf/pipeline_bubble.sh [DECK] [P...]
# Give each rank its own core (p <= cores): with shared cores a waiting rank
# also waits for CPU and the measurement is meaningless.
set -euo pipefail
deck=${1:-input/default.toml}
shift || true
pps=${*:-2}
bin=${TRIDENT_BIN:-build/src/trident}
# D_MODEL and LAYERS (default 8; a multiple of 2p for zb-v): a wider or
# deeper stage makes the per-message latency a smaller share of
# each micro-batch (the theory counts compute only).
d_model=${D_MODEL:-256} layers=${LAYERS:-8}
schedules=${SCHEDULES:-gpipe 1f1b interleaved zb-h1 zb-h2 zb-v pipedream}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# ROUNDS: each (p, m) runs every schedule once per round, the schedules in
# turn, so a drift in the machine's speed reaches them all alike; the table
# gives each schedule's median over the rounds (and the measured range).
rounds=${ROUNDS:-1}
echo "machine: $(nproc) cores; deck $deck (d_model $d_model, $layers layers, micro_batch 1)," \
  "$rounds round(s)"
printf '%-3s %-12s %-3s %-3s %10s %13s %10s %8s %8s %10s\n' p schedule m v measured range theory x_theory x_1f1b tokens/s
for p in $pps; do
  for m in $p $((2 * p)) $((4 * p)); do
    results=""  # lines "schedule v measured theory tokens/s"
    for ((round = 1; round <= rounds; round++)); do
      for sched in $schedules; do
        v=1; [ "$sched" = interleaved ] && v=2
        out=$(mpirun -np "$p" --bind-to core "$bin" train "$deck" --set parallel.pp="$p" \
          --set parallel.schedule="$sched" --set parallel.virtual_stages="$v" \
          --set model.layers="$layers" \
          --set model.d_model="$d_model" --set model.heads=8 --set train.micro_batch=1 \
          --set train.batch="$m" --set train.steps=8 --set data.val='[]' --set output.metrics='""' \
          --set output.log_every=1000 --set system.threads=1 2>&1)
        line=$(grep '^pipeline bubble' <<<"$out")
        meas=$(sed -E 's/.*measured ([0-9.]+)%.*/\1/' <<<"$line")
        theo=$(sed -E 's/.*theory ([0-9.]+)%.*/\1/' <<<"$line")
        tps=$(sed -nE 's/^FOM: ([0-9.]+) tokens.*/\1/p' <<<"$out")
        results+="$sched $v $meas $theo $tps"$'\n'
      done
    done
    RESULTS=$results python3 - "$p" "$m" "$schedules" <<'PY'
import os, statistics, sys
p, m, order = sys.argv[1], sys.argv[2], sys.argv[3].split()
runs = {}
for line in os.environ["RESULTS"].split("\n"):
    if line.strip():
        s, v, meas, theo, tps = line.split()
        runs.setdefault(s, []).append((int(v), float(meas), float(theo), float(tps)))
med = {s: statistics.median(r[1] for r in rs) for s, rs in runs.items()}
for s in order:
    rs = runs[s]
    v, theo = rs[0][0], rs[0][2]
    meas = [r[1] for r in rs]
    span = f"{min(meas):.1f}-{max(meas):.1f}%" if len(meas) > 1 else "-"
    x_theory = f"{med[s] / theo:.2f}" if theo > 0 else "-"
    x_1f1b = f"{med[s] / med['1f1b']:.2f}" if med.get("1f1b", 0) > 0 and s != "pipedream" else "-"
    tps = statistics.median(r[3] for r in rs)
    print(f"{p:<3} {s:<12} {m:<3} {v:<3} {med[s]:9.1f}% {span:>13} {theo:9.1f}% {x_theory:>8} "
          f"{x_1f1b:>8} {tps:10.0f}")
PY
  done
done
