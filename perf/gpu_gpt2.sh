#!/usr/bin/env bash
# GPT-2 124M (12 layers, d_model 768, 12 heads, seq 1024, vocab 50257) training
# on one GPU: tokens/s, MFU, and the device time of every backend op.
#   usage: perf/gpu_gpt2.sh [MICRO_BATCH] [STEPS] [TF32]
# Build first (sm_90 for H100): cmake --preset cuda -DCMAKE_CUDA_ARCHITECTURES=90 &&
#   cmake --build build-cuda -j
# MFU here counts 6 N + 6 L d T FLOPs per token (N parameters; attention scores
# and mixing at the causal half of 12 L d T) against 989 TFLOP/s, the H100 SXM
# dense bf16 peak. The run keeps the deck's fp32 precision (TF32 with
# TF32=true), so the figure is a baseline against the bf16 peak, not a claim.
# (Trident's own MFU line uses 12 L d T, as PaLM's appendix B.)
set -euo pipefail
mb=${1:-8}
steps=${2:-20}
tf32=${3:-false}
bin=${TRIDENT_BIN:-build-cuda/src/trident}
peak_tflops=989
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -f data/corpus_train.bin ] || bash input/make_corpus.sh "$bin" data >/dev/null

echo "machine: $(hostname), $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
echo "versions: $("$bin" --version), $(nvcc --version 2>/dev/null | tail -1)"
args=(train input/gpt2-124m.toml --set system.device=cuda --set "system.allow_tf32=$tf32"
      --set "train.batch=$mb" --set "train.micro_batch=$mb" --set "train.steps=$((steps + 1))"
      --set train.warmup=0 --set 'data.val=[]' --set 'output.metrics=""' --set output.log_every=5
      --set "system.peak_tflops=$peak_tflops")
echo "command: TRIDENT_KERNEL_TIMES=1 mpirun -np 1 $bin ${args[*]}"
out=$(TRIDENT_KERNEL_TIMES=1 mpirun -np 1 "$bin" "${args[@]}")
echo "$out"

# Throughput of the steady steps (the FOM line leaves step 0 out) and MFU.
tps=$(sed -nE 's/^FOM: ([0-9.]+) tokens\/s.*/\1/p' <<<"$out")
python3 - "$tps" "$peak_tflops" <<'PY'
import sys
tps, peak = float(sys.argv[1]), float(sys.argv[2])
L, d, T, V = 12, 768, 1024, 50257
N = V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d  # GPT-2 small, tied head
flops = 6 * N + 6 * L * d * T
print(f"GPT-2 124M: N = {N / 1e6:.1f} M parameters, {flops / 1e9:.3f} GFLOP/token")
print(f"throughput {tps:.0f} tokens/s | MFU {100 * tps * flops / (peak * 1e12):.2f}% "
      f"of {peak:.0f} TFLOP/s (dense bf16; this run is fp32)")
PY
