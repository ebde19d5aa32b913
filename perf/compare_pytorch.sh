#!/usr/bin/env bash
# Trident (1 rank) against PyTorch CPU on the same model, batch, sequence length
# and thread count; prints both throughputs and the ratio.
#   usage: perf/compare_pytorch.sh [DECK] [THREADS] [STEPS]
# Run from the repository root after building (cmake --preset release) and
# making the corpus (input/make_corpus.sh). Needs python3-torch (/usr/bin/python3).
set -euo pipefail
deck=${1:-input/default.toml}
threads=${2:-$(nproc)}
steps=${3:-30}
bin=${TRIDENT_BIN:-build/src/trident}
py=${TORCH_PYTHON:-/usr/bin/python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Read the model and batch from the deck so both sides train the same thing.
read -r layers d_model heads seq_len vocab micro_batch < <("$py" - "$deck" <<'PY'
import sys, tomllib
d = tomllib.load(open(sys.argv[1], "rb"))
m, t = d["model"], d["train"]
print(m["layers"], m["d_model"], m["heads"], m["seq_len"], m["vocab"], t.get("micro_batch") or t["batch"])
PY
)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "model: layers=$layers d_model=$d_model heads=$heads seq_len=$seq_len vocab=$vocab batch=$micro_batch threads=$threads steps=$steps"
echo "command: mpirun -np 1 $bin train $deck --set train.batch=$micro_batch --set train.micro_batch=$micro_batch --set system.threads=$threads --set train.steps=$((steps + 1))"

tri=$(mpirun -np 1 --bind-to none "$bin" train "$deck" --set train.batch="$micro_batch" \
      --set train.micro_batch="$micro_batch" --set system.threads="$threads" \
      --set train.steps=$((steps + 1)) --set train.eval_every=0 --set output.metrics='""' \
      --set output.log_every=1000 | grep '^FOM:')
tri_tps=$(sed -E 's/^FOM: ([0-9.]+) tokens\/s.*/\1/' <<<"$tri")
echo "trident $tri"

pt=$(OMP_NUM_THREADS=$threads "$py" perf/pytorch_gpt.py --layers "$layers" --d-model "$d_model" \
     --heads "$heads" --seq-len "$seq_len" --vocab "$vocab" --micro-batch "$micro_batch" \
     --steps "$steps" --warmup-steps 2 --threads "$threads")
pt_tps=$(sed -E 's/.*tokens_per_s=([0-9.]+).*/\1/' <<<"$pt")
echo "$pt"
"$py" -c "print(f'trident {float($tri_tps):.0f} tokens/s, pytorch {float($pt_tps):.0f} tokens/s, ratio {float($tri_tps)/float($pt_tps):.2f}x')"
