#!/usr/bin/env bash
# GPT-2 124M (12 layers, d_model 768, 12 heads, seq 1024, vocab 50257) training
# on one GPU, Trident against PyTorch on the same GPU at the same micro-batch:
# tokens/s, MFU, peak memory, the ratio, and Trident's per-kernel device time;
# then ZeRO-Offload's cost: ZeRO-1 with the optimizer on the host (offload.
# optimizer = "cpu": fp32 masters and Adam moments in pinned host memory, the
# Adam step on the CPU) against ZeRO-1 without, at a batch of one micro-batch
# and of ACCUMULATE (default 8), and at one micro-batch with OFFLOAD_RATIO
# (default 0.25) of the state on the host, the rest updated on the GPU meanwhile.
#   usage: [PARTS="trident pytorch offload"] perf/gpu_gpt2.sh [MICRO_BATCH] [STEPS] [LOG_DIR]
# PYTORCH_WARMUP: PyTorch's untimed steps first (default 10: with 3, torch.compile
# measured 290K tokens/s on an H200 where 10 gave 415K).
# Trident: bf16 weights and activations, fp32 masters (precision.dtype = bf16).
# PyTorch (perf/pytorch_gpt.py, the python3 that has torch): the same GPT with
# SDPA, bf16 autocast, fused AdamW, eager and torch.compile; vocab padded to
# 50304 as nanoGPT does (Trident pads to a multiple of 128 in its kernels).
# MFU counts 6 N + 6 L d T FLOPs per token (N parameters; attention at its
# causal half of 12 L d T) against the device's dense bf16 peak (989 TFLOP/s
# for H100 SXM and H200; PEAK_TFLOPS overrides).
set -uo pipefail
mb=${1:-8}
steps=${2:-20}
logs=$(realpath -m "${3:-gpu-gpt2}")
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${TRIDENT_BIN:-$here/build-cuda/src/trident}
[ -x "$bin" ] || bin=$(command -v trident)
peak_tflops=${PEAK_TFLOPS:-989}
parts=${PARTS:-trident pytorch offload}
accumulate=${ACCUMULATE:-8}
ratio=${OFFLOAD_RATIO:-0.25}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$logs"
data=${DATA_DIR:-$here/data}
[ -f "$data/corpus_train.bin" ] || bash "$here/input/make_corpus.sh" "$bin" "$data" >/dev/null

echo "machine: $(hostname), $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
echo "trident: $("$bin" --version)"
args=(train "$here/input/gpt2-124m.toml" --set system.device=cuda --set precision.dtype=bf16
      --set "data.train=$data/corpus_train.bin" --set 'data.val=[]'
      --set "train.batch=$mb" --set "train.micro_batch=$mb" --set train.warmup=0
      --set output.log_every=5
      --set "checkpoint.dir=$logs/ckpt" --set checkpoint.every=0 --set checkpoint.minutes=0)
"$bin" estimate "$here/input/gpt2-124m.toml" --world 1 --set precision.dtype=bf16 \
  --set "train.batch=$mb" --set "train.micro_batch=$mb" >"$logs/estimate.txt" 2>&1
# trident_run NAME SETS...: the timed run, its metrics in NAME.jsonl. Not
# bound to one core (Open MPI's default for one rank): the host's share of
# offload runs on every core of the node.
trident_run() {
  local name=$1
  shift
  echo "command: mpirun -np 1 --bind-to none $bin ${args[*]} --set train.steps=$((steps + 1)) $*"
  timeout 300 mpirun -np 1 --bind-to none "$bin" "${args[@]}" --set "train.steps=$((steps + 1))" \
    --set "output.metrics=$logs/$name.jsonl" "$@" >"$logs/$name.log" 2>&1
  grep -E "^(FOM|memory per rank)" "$logs/$name.log"
}
if [[ $parts == *trident* ]]; then
  trident_run trident
  # Where the device time goes: a short run with per-kernel timing (events
  # around every op slow it, so it is not the timed run).
  TRIDENT_KERNEL_TIMES=1 timeout 120 mpirun -np 1 "$bin" "${args[@]}" --set train.steps=4 \
    --set 'output.metrics=""' >"$logs/trident_kernels.log" 2>&1
fi
# PyTorch from the node's own environment (the bundle's libraries stay out).
pytorch() {
  env -u LD_LIBRARY_PATH timeout 300 python3 "$here/perf/pytorch_gpt.py" --device cuda --bf16 \
    --layers 12 --d-model 768 --heads 12 --seq-len 1024 --vocab 50304 --micro-batch "$mb" \
    --steps "$steps" --warmup-steps "${PYTORCH_WARMUP:-10}" "$@"
}
if [[ $parts == *pytorch* ]]; then
  pytorch >"$logs/pytorch_eager.log" 2>&1
  pytorch --compile >"$logs/pytorch_compiled.log" 2>&1
fi
if [[ $parts == *offload* ]]; then
  trident_run zero1 --set zero.stage=1
  trident_run zero1_offload --set zero.stage=1 --set offload.optimizer=cpu
  trident_run zero1_split_offload --set zero.stage=1 --set offload.optimizer=cpu \
    --set "offload.ratio=$ratio"
  # The same with a batch of ACCUMULATE micro-batches (the regime ZeRO-Offload
  # is for: the host's step is paid once per batch, the gradients leave for the
  # host during the last backward). Later --set options win.
  trident_run zero1_acc --set zero.stage=1 --set "train.batch=$((mb * accumulate))"
  trident_run zero1_acc_offload --set zero.stage=1 --set offload.optimizer=cpu \
    --set "train.batch=$((mb * accumulate))"
fi

python3 - "$logs" "$peak_tflops" "$mb" "$accumulate" "$ratio" <<'PY'
import json, re, sys
logs, peak, mb, acc = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ratio = sys.argv[5]
L, d, T, V = 12, 768, 1024, 50257
N = V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d  # GPT-2 small, tied head
flops = 6 * N + 6 * L * d * T
rows = []
def trident(name):
    """Tokens/s over the steady steps (time-weighted) and peak GiB, or None."""
    try:
        recs = [json.loads(l) for l in open(f"{logs}/{name}.jsonl") if l.strip()]
    except OSError:
        return None
    steady = [r for r in recs if r.get("step", 0) > 1 and "tokens_per_s" in r]
    if not steady:
        return None
    return (len(steady) / sum(1 / r["tokens_per_s"] for r in steady),
            max(r["peak_mem_bytes"] for r in steady) / 2**30)
steady = trident("trident")
if steady:
    rows.append(("trident bf16", *steady))
for mode in ("eager", "compiled"):
    try:
        text = open(f"{logs}/pytorch_{mode}.log").read()
    except OSError:
        continue
    m = re.search(r"tokens_per_s=([0-9.]+).*?peak_gib=([0-9.]+)", text)
    if m:
        rows.append((f"pytorch {mode}", float(m.group(1)), float(m.group(2))))
    else:
        print(f"pytorch {mode}: no result (see {logs}/pytorch_{mode}.log)")
print(f"GPT-2 124M, micro-batch {mb} x 1024 tokens: {flops / 1e9:.3f} GFLOP/token, "
      f"peak {peak:.0f} TFLOP/s")
print(f"{'run':<18}{'tokens/s':>12}{'MFU':>8}{'peak GiB':>10}")
for name, tps, gib in rows:
    print(f"{name:<18}{tps:>12,.0f}{100 * tps * flops / (peak * 1e12):>7.1f}%{gib:>10.2f}")
torch_best = max((r for r in rows if r[0].startswith("pytorch")), key=lambda r: r[1], default=None)
if steady and torch_best:
    print(f"ratio trident / best pytorch ({torch_best[0]}): {rows[0][1] / torch_best[1]:.2f}")
for micro, base, offloaded, what in (
        (1, "zero1", "zero1_offload", "offload.optimizer = cpu"),
        (1, "zero1", "zero1_split_offload", f"offload.optimizer = cpu, ratio {ratio}"),
        (acc, "zero1_acc", "zero1_acc_offload", "offload.optimizer = cpu")):
    z, zo = trident(base), trident(offloaded)
    if z and zo:
        print(f"ZeRO-1, batch {micro} x {mb}: {z[0]:,.0f} tokens/s, {z[1]:.2f} GiB; with "
              f"{what} {zo[0]:,.0f} tokens/s, {zo[1]:.2f} GiB: step time x{z[0] / zo[0]:.2f}")
PY
[[ $parts == *trident* ]] && echo "per-kernel device time (4-step run):" &&
  sed -n '/^device time per op/,/^total/p' "$logs/trident_kernels.log"
