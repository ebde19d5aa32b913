#!/usr/bin/env bash
# trident plan --cluster this-cpu against real runs on this machine: for each
# layout, the predicted step time and peak memory next to a short training
# run's, then the planner's top-1 layout per rank count against the fastest
# measured one.
#   usage: perf/plan_vs_measured.sh [TRIDENT_BINARY] [OUT_DIR]
#   env:   DECK (default perf/plan/cpu-small.toml), STEPS (default 6: step 1 is warm-up),
#          DTYPE (precision.dtype of plans and runs; default the deck's)
set -euo pipefail
bin=${1:-build/src/trident}
out=${2:-${TMPDIR:-/tmp}/plan_vs_measured}
deck=${DECK:-perf/plan/cpu-small.toml}
steps=${STEPS:-6}
common=()
[ -z "${DTYPE:-}" ] || common=(--set "precision.dtype=$DTYPE")
here=$(dirname "$0")
cores=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -f data/corpus_train.bin ] || input/make_corpus.sh "$bin" data
rm -rf "$out" && mkdir -p "$out"

# "ranks layout": dp, tp, pp and its schedules, ZeRO, recompute, 1-8 ranks.
layouts=(
  "1 tp=1,pp=1,mb=4"
  "1 tp=1,pp=1,mb=4,recompute=selective"
  "1 tp=1,pp=1,mb=4,recompute=full"
  "2 tp=1,pp=1,dp=2,mb=4"
  "2 tp=1,pp=1,dp=2,mb=4,zero=1"
  "2 tp=1,pp=1,dp=2,mb=4,zero=3"
  "2 tp=2,pp=1,mb=4"
  "2 tp=2,pp=1,mb=4,sp=1"
  "2 tp=1,pp=2,mb=2,schedule=gpipe"
  "2 tp=1,pp=2,mb=2,schedule=1f1b"
  "2 tp=1,pp=2,mb=2,v=2"
  "4 tp=1,pp=1,dp=4,mb=4"
  "4 tp=2,pp=1,dp=2,mb=4"
  "4 tp=1,pp=4,mb=2,schedule=1f1b"
  "8 tp=1,pp=1,dp=8,mb=2"
  "8 tp=2,pp=2,dp=2,mb=2,schedule=1f1b"
)

n=0
measure() {  # ranks layout: the plan's prediction and a real run, in run-NN/
  local ranks=$1 layout=$2 dir
  dir=$(printf "%s/run-%02d" "$out" "$n")
  n=$((n + 1))
  mkdir -p "$dir"
  "$bin" plan "$deck" "${common[@]}" --gpus "$ranks" --cluster this-cpu --layout "$layout" \
    --json > "$dir/plan.json"
  # Ranks past the cores share them: one thread each, unbound.
  local threads=$((cores / ranks > 0 ? cores / ranks : 1))
  local sets=()
  while read -r s; do sets+=(--set "$s"); done < <(python3 "$here/plan_vs_measured.py" sets "$layout")
  OMP_NUM_THREADS=$threads mpirun -np "$ranks" --oversubscribe --bind-to none \
    "$bin" train "$deck" "${common[@]}" "${sets[@]}" --set "train.steps=$steps" \
    --set "system.threads=$threads" \
    --metrics "$dir/metrics.jsonl" > "$dir/train.log" 2>&1
  echo "measured $ranks ranks $layout: $(grep -o 'arenas [^,]*' "$dir/train.log")"
}

for entry in "${layouts[@]}"; do measure $entry; done

# The planner's own pick per rank count, measured too when not listed above.
for ranks in 1 2 4 8; do
  "$bin" plan "$deck" "${common[@]}" --gpus "$ranks" --cluster this-cpu --top 1 --json \
    > "$out/top1-$ranks.json"
  pick=$(python3 "$here/plan_vs_measured.py" unmeasured "$out/top1-$ranks.json" "$out")
  [ -z "$pick" ] || measure "$ranks" "$pick"
done

echo
echo "$(date -u +%F) | ${DTYPE:-deck precision} | $(lscpu | sed -n 's/^Model name: *//p') | $cores cores | $0 $*"
python3 "$here/plan_vs_measured.py" table "$out"
