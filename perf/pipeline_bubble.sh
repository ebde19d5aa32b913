#!/usr/bin/env bash
# Pipeline bubble: measured idle share of the ranks' time within the slowest
# rank's schedule (1 - (forward + backward) / (ranks x that span)) against
# theory, (p-1)/(m+p-1) for gpipe and 1f1b, (p-1)/(v*m+p-1) for interleaved
# and for zb-h1 / zb-h2 / zb-v their schedule replayed with unit F, B and W,
# for a few (p, m), with each run's tokens/s and, where 1f1b runs too, each
# bubble over 1F1B's measured one (the zero-bubble targets); and pipedream,
# whose theory is 0 (never flushed): its row shows what the per-step loss
# reduction and the per-micro-batch updates leave idle (no ratio).
# Beside each: the floor, the run's lists replayed with its passes' measured
# mean F, B and W (what no schedule of these lists can go below at those
# costs), the measured bubble over it, and the peak activation bytes over the
# ranks against 1F1B's (zb-h1's budget: 1F1B's + 5%). A schedule written
# NAME+pv runs with parallel.post_validation = true.
# Post-validation moves work across the step boundary (a step ends without
# waiting; the next one settles it), so the schedule's span no longer holds
# every idle second. The columns steady, s_floor, xs_floor and xs_1f1b apply
# one rule to every schedule: per rank, the steady steps' wall time less its
# own work outside the passes (gradient reductions, optimizer), and the floor
# as 8 steps replayed back to back under the measured pass costs and each
# rank's measured step tail (with the barrier for synchronous steps, without
# it for +pv rows; docs/parallelism.md). For 1F1B steady stays within about
# a point of measured.
# Every row runs without checkpoints (a save settles its step first) and with
# GRAD_CLIP (default 1e3:
# off): the deck's 1.0 clips every step of these short runs, and a step whose
# own share already clips is held for the global check, not taken ahead.
# Issue 49's acceptance (p 2 on 2 cores, d 512):
#   ROUNDS=5 D_MODEL=512 SCHEDULES="1f1b zb-h1 zb-h2+pv zb-v+pv" perf/pipeline_bubble.sh
# SETS: more deck overrides for every run, e.g. SETS="model.tied_embeddings=false".
#   usage: [ROUNDS=N] [D_MODEL=...] [LAYERS=...] [SCHEDULES="..."] [STEPS=...] [SETS="k=v ..."]
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
schedules=${SCHEDULES:-gpipe 1f1b interleaved zb-h1 zb-h2 zb-v zb-h2+pv zb-v+pv pipedream}
steps=${STEPS:-8}
grad_clip=${GRAD_CLIP:-1e3}
extra=()
for kv in ${SETS:-}; do extra+=(--set "$kv"); done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# ROUNDS: each (p, m) runs every schedule once per round, the schedules in
# turn, so a drift in the machine's speed reaches them all alike; the table
# gives each schedule's median over the rounds (and the measured range).
rounds=${ROUNDS:-1}
echo "machine: $(nproc) cores; deck $deck (d_model $d_model, $layers layers, micro_batch 1)," \
  "$rounds round(s)${SETS:+; $SETS}"
printf '%-3s %-12s %-3s %-3s %10s %13s %8s %8s %10s %8s %8s %9s %7s %10s %8s %8s %8s %8s\n' p schedule m v \
  measured range floor x_floor theory x_theory x_1f1b act_MiB x_act tokens/s steady s_floor \
  xs_floor xs_1f1b
for p in $pps; do
  for m in $p $((2 * p)) $((4 * p)); do
    results=""  # lines "schedule v measured theory tokens/s floor activations"
    for ((round = 1; round <= rounds; round++)); do
      for sched in $schedules; do
        v=1; [ "$sched" = interleaved ] && v=2
        pv=false; [ "${sched%+pv}" != "$sched" ] && pv=true
        out=$(mpirun -np "$p" --bind-to core "$bin" train "$deck" --set parallel.pp="$p" \
          --set parallel.schedule="${sched%+pv}" --set parallel.virtual_stages="$v" \
          --set parallel.post_validation="$pv" --set train.steps="$steps" \
          --set model.layers="$layers" \
          --set model.d_model="$d_model" --set model.heads=8 --set train.micro_batch=1 \
          --set train.batch="$m" --set data.val='[]' --set output.metrics='""' \
          --set output.log_every=1000 --set system.threads=1 --set checkpoint.dir='""' \
          --set checkpoint.every=0 --set train.grad_clip="$grad_clip" ${extra[@]+"${extra[@]}"} \
          2>&1 </dev/null)
        line=$(grep '^pipeline bubble:' <<<"$out")
        meas=$(sed -E 's/.*measured ([0-9.]+)%.*/\1/' <<<"$line")
        theo=$(sed -E 's/.*theory ([0-9.]+)%.*/\1/' <<<"$line")
        tps=$(sed -nE 's/^FOM: ([0-9.]+) tokens.*/\1/p' <<<"$out")
        floor=$(sed -nE 's/.*floor ([0-9.]+)%.*/\1/p' <<<"$line")
        act=$(grep '^memory per rank' <<<"$out" | sed -E 's/.*activations ([0-9.]+ [KMG]?i?B).*/\1/')
        steady_line=$(grep '^pipeline bubble over the steady steps' <<<"$out" || true)
        steady=$(sed -nE 's/^pipeline bubble over the steady steps: ([0-9.]+)%.*/\1/p' <<<"$steady_line")
        s_floor=$(sed -nE 's/.*floor ([0-9.]+)%.*/\1/p' <<<"$steady_line")
        results+="$sched $v $meas $theo $tps ${floor:--1} ${act// /_} ${steady:--1} ${s_floor:--1}"$'\n'
      done
    done
    RESULTS=$results python3 - "$p" "$m" "$schedules" <<'PY'
import os, statistics, sys
p, m, order = sys.argv[1], sys.argv[2], sys.argv[3].split()
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def mib(text):  # "37.1_MiB" -> 37.1
    value, unit = text.split("_")
    return float(value) * UNITS[unit] / 2**20


runs = {}
for line in os.environ["RESULTS"].split("\n"):
    if line.strip():
        s, v, meas, theo, tps, floor, act, steady, s_floor = line.split()
        runs.setdefault(s, []).append((int(v), float(meas), float(theo), float(tps),
                                       float(floor), mib(act), float(steady), float(s_floor)))
med = {s: statistics.median(r[1] for r in rs) for s, rs in runs.items()}
steady = {s: statistics.median(r[6] for r in rs) for s, rs in runs.items()}
for s in order:
    rs = runs[s]
    v, theo = rs[0][0], rs[0][2]
    meas = [r[1] for r in rs]
    span = f"{min(meas):.1f}-{max(meas):.1f}%" if len(meas) > 1 else "-"
    x_theory = f"{med[s] / theo:.2f}" if theo > 0 else "-"
    x_1f1b = f"{med[s] / med['1f1b']:.2f}" if med.get("1f1b", 0) > 0 and s != "pipedream" else "-"
    tps = statistics.median(r[3] for r in rs)
    floor = statistics.median(r[4] for r in rs)  # -1: not measured (pipedream)
    floor_text = f"{floor:7.1f}%" if floor >= 0 else f"{'-':>8}"
    x_floor = f"{med[s] / floor:.2f}" if floor > 0 else "-"
    act = max(r[5] for r in rs)
    act_1f1b = max(r[5] for r in runs["1f1b"]) if "1f1b" in runs else 0
    x_act = f"{act / act_1f1b:.3f}" if act_1f1b > 0 else "-"
    s_floor = statistics.median(r[7] for r in rs)  # -1: not measured
    fmt = lambda x: f"{x:7.1f}%" if x >= 0 else f"{'-':>8}"
    xs_floor = f"{steady[s] / s_floor:.2f}" if s_floor > 0 and steady[s] >= 0 else "-"
    xs_1f1b = (f"{steady[s] / steady['1f1b']:.2f}"
               if steady.get("1f1b", 0) > 0 and steady[s] >= 0 and s != "pipedream" else "-")
    print(f"{p:<3} {s:<12} {m:<3} {v:<3} {med[s]:9.1f}% {span:>13} {floor_text} {x_floor:>8} "
          f"{theo:9.1f}% {x_theory:>8} {x_1f1b:>8} {act:9.1f} {x_act:>7} {tps:10.0f} "
          f"{fmt(steady[s])} {fmt(s_floor)} {xs_floor:>8} {xs_1f1b:>8}")
PY
  done
done
