#!/usr/bin/env bash
# Trident (1 rank) against current PyTorch from PyPI on the CPU: the same GPT,
# batch, sequence length and thread count, PyTorch eager and torch.compile'd,
# runs alternating, best of ROUNDS each. Prints a table with the ratio of
# Trident to the better PyTorch for each precision: fp32, and bf16 (Trident
# with precision.dtype = bf16 against PyTorch under torch.autocast to
# bfloat16; both keep fp32 master weights and optimizer state).
#   usage: perf/compare_pytorch.sh [STEPS] [ROUNDS]
# Run from the repository root after building (cmake --preset release) and
# making the corpus (input/make_corpus.sh). The first run makes a virtual
# environment with PyPI's torch (~5 GB with its CUDA wheels) outside the source
# tree, in $TORCH_VENV (default ~/.cache/trident-bench/torch-venv).
# Environment: THREADS (default "1 2"), SIZES (names below, default all),
# PRECISIONS (default "fp32 bf16"), TRIDENT_BIN (default build/src/trident),
# MODEL (gpt2, the default, or llama: input/llama-100m.toml's Llama against
# PyTorch's own, SDPA with enable_gqa, nn.RMSNorm, SwiGLU, untied, no biases),
# LOG_DIR (Trident's logs, default a new directory under /tmp). A Trident run
# that fails marks its row with its log and the table goes on; the script then
# exits 1.
set -euo pipefail
steps=${1:-8}
rounds=${2:-2}
threads_list=${THREADS:-1 2}
precisions=${PRECISIONS:-fp32 bf16}
bin=${TRIDENT_BIN:-build/src/trident}
venv=${TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/trident-bench/torch-venv}
logs=${LOG_DIR:-$(mktemp -d /tmp/compare_pytorch.XXXXXX)}
mkdir -p "$logs"
failed=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  echo "compare_pytorch: installing PyTorch from PyPI into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q torch numpy
fi
py=$venv/bin/python

# name layers d_model heads kv_heads ffn_hidden seq_len batch. gpt2: the default
# deck's model, a wider one, and GPT-2 124M's width and context with 4 layers
# (kv_heads = heads and ffn_hidden 0: GPT-2's). llama: input/llama-100m.toml's
# shape, and a small one for a quick look. Vocabulary: the decks' 257.
model=${MODEL:-gpt2}
if [ "$model" = llama ]; then
  deck=input/llama-100m.toml
  all_sizes="llama-100m:16:768:12:4:2048:512:2 llama-small:2:128:4:2:352:128:4"
else
  deck=input/default.toml
  all_sizes="default:4:128:4:4:0:128:4 d512:4:512:8:8:0:256:4 d768:4:768:12:12:0:1024:4"
fi
sizes=""
for s in $all_sizes; do
  [ -z "${SIZES:-}" ] || [[ " $SIZES " == *" ${s%%:*} "* ]] && sizes+=" $s"
done

echo "date: $(date -u +%F)"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "pytorch: $("$py" -c 'import torch; print(torch.__version__)')"
echo "trident: $("$bin" --version 2>/dev/null | head -1), $steps timed steps, best of $rounds alternating rounds"
echo "trident logs: $logs"

# LOG layers d heads kv ffn T batch threads precision -> tokens/s; fails (the
# log says why) where the run fails or reports no figure of merit.
trident_run() {
  local log=$1
  shift
  mpirun -np 1 --bind-to none "$bin" train "$deck" --set precision.dtype="$9" \
    --set model.layers="$1" --set model.d_model="$2" --set model.heads="$3" \
    --set model.kv_heads="$4" --set model.ffn_hidden="$5" --set model.seq_len="$6" \
    --set train.batch="$7" --set train.micro_batch="$7" --set system.threads="$8" \
    --set train.steps=$((steps + 1)) --set train.eval_every=0 --set output.metrics='""' \
    --set checkpoint.every=0 --set checkpoint.dir='""' \
    --set output.log_every=1000 >"$log" 2>&1 || return 1
  sed -nE 's/^FOM: ([0-9.]+) tokens\/s.*/\1/p' "$log" | grep . || return 1
}
torch_run() {  # layers d heads kv ffn T batch threads [--compile] [--bf16] -> tokens/s
  OMP_NUM_THREADS=$8 "$py" perf/pytorch_gpt.py --model "$model" --layers "$1" --d-model "$2" \
    --heads "$3" --kv-heads "$4" --ffn-hidden "$5" --seq-len "$6" --vocab 257 \
    --micro-batch "$7" --threads "$8" --steps "$steps" \
    --warmup-steps 2 "${@:9}" 2>/dev/null | sed -nE 's/.*tokens_per_s=([0-9.]+).*/\1/p'
}
best() { printf '%s\n' "$@" | sort -g | tail -1; }

for precision in $precisions; do
  torch_flags=() title="fp32"
  [ "$precision" = bf16 ] && torch_flags=(--bf16) title="bf16 (PyTorch: autocast to bfloat16)"
  echo
  echo "$title:"
  echo
  echo "| $model model (vocab 257) | threads | Trident tok/s | PyTorch eager | PyTorch compiled | ratio |"
  echo "|---|---|---|---|---|---|"
  for s in $sizes; do
    IFS=: read -r name layers d heads kv ffn T batch <<<"$s"
    shape=("$layers" "$d" "$heads" "$kv" "$ffn" "$T" "$batch")
    for th in $threads_list; do
      tri=() eag=() com=() failed_log=""
      for round in $(seq "$rounds"); do
        log="$logs/$name-$precision-threads$th-round$round.log"
        if [ -z "$failed_log" ]; then  # after a failure, PyTorch's columns only
          if fom=$(trident_run "$log" "${shape[@]}" "$th" "$precision"); then
            tri+=("$fom")
          else
            failed_log=$log
          fi
        fi
        eag+=("$(torch_run "${shape[@]}" "$th" ${torch_flags[@]+"${torch_flags[@]}"})")
        com+=("$(torch_run "${shape[@]}" "$th" --compile ${torch_flags[@]+"${torch_flags[@]}"})")
      done
      e=$(best "${eag[@]}") c=$(best "${com[@]}") t=""
      if [ -n "$failed_log" ]; then failed=$((failed + 1)); else t=$(best "${tri[@]}"); fi
      kv_part=$([ "$kv" = "$heads" ] || echo ", kv_heads $kv")
      python3 -c "
t, e, c, failed_log = float('$t' or 0), float('$e' or 0), float('$c' or 0), '$failed_log'
trident, ratio = (f'failed (log: {failed_log})', '-') if failed_log else \\
    (f'{t:,.0f}', f'{t / max(e, c, 1e-9):.2f}')
print(f'| layers {$layers}, d {$d}, heads {$heads}$kv_part, T {$T}, batch {$batch} | $th | '
      f'{trident} | {e:,.0f} | {c:,.0f} | {ratio} |')"
    done
  done
done
if [ "$failed" -gt 0 ]; then
  echo "compare_pytorch: $failed row(s) without a Trident figure (logs in $logs)" >&2
  exit 1
fi
