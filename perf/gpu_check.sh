#!/usr/bin/env bash
# Everything Trident's GPU path must do right, on one GPU node, in one call:
# the GPU test executables, training on the GPU against the CPU (fp32, bf16,
# fp16), a checkpointed GPU run that resumes bit for bit, NCCL at one rank,
# and 2-4 ranks sharing the GPU through the host-staged communicators in the
# equivalence matrix's layouts (dp, tp, pp, SP, ZeRO 1-3, offload).
#   usage: perf/gpu_check.sh [LOG_DIR] [MATRIX_RUNS]
# GPU_CHECK_SECONDS=N: checks that would start after N seconds are skipped,
# and none runs past it (a bounded call on a borrowed node). DEVICE=cpu runs
# the same checks with the CPU in the GPU's place (a dry run of this script);
# PYTHON names a python3 with numpy and h5py; MPIEXEC the launcher and its
# options (default: Open MPI's mpirun, oversubscribed, unbound).
# Binaries: TRIDENT_BIN if set, else build-cuda/ if built here, else trident
# and gpu_* from PATH (a bundle from perf/gpu_bundle.sh). One log per check under LOG_DIR, and
# LOG_DIR/summary.txt: one line per check. Exits 1 if any check failed.
set -uo pipefail
logs=$(realpath -m "${1:-gpu-check}")
matrix_runs=${2:-16}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$logs"
if [ -n "${TRIDENT_BIN:-}" ]; then
  bin=$TRIDENT_BIN tests=$(dirname "$(dirname "$bin")")/tests
elif [ -x "$here/build-cuda/src/trident" ]; then
  bin=$here/build-cuda/src/trident tests=$here/build-cuda/tests
else
  bin=$(command -v trident) tests=$(dirname "$(command -v gpu_kernels)")
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun_cmd=${MPIEXEC:-mpirun --oversubscribe --bind-to none}
py=${PYTHON:-python3}
dev=${DEVICE:-cuda}
staged="--set system.comm=staged" nccl="--set system.comm=nccl"
[ "$dev" = cuda ] || staged="" nccl=""
compare="$py $here/perf/run_compare.py"
summary=$logs/summary.txt
: >"$summary"
failed=0

# check NAME TIMEOUT_S COMMAND...: runs it, logs it, adds a summary line with
# the log's last line (the comparisons print their worst error there), or its
# first error line. Exit code 77: skipped (no GPU).
check() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS rc
  if [ "${GPU_CHECK_SECONDS:-0}" -gt 0 ]; then
    local left=$((GPU_CHECK_SECONDS - SECONDS))
    if [ $left -le 5 ]; then
      printf '%-16s %-26s\n' "$name" "not run (time budget)" | tee -a "$summary"
      failed=1
      return
    fi
    [ $left -lt "$limit" ] && limit=$left
  fi
  timeout "$limit" bash -c "$*" >"$logs/$name.log" 2>&1
  rc=$?
  local verdict=pass line
  line=$(grep -v '^\s*$' "$logs/$name.log" | tail -1)
  if [ $rc -eq 77 ]; then
    verdict="skipped (no GPU)" line=""
  elif [ $rc -ne 0 ]; then
    verdict="FAIL (rc $rc)" failed=1
    [ $rc -eq 124 ] && verdict="FAIL (timed out after $limit s)"
    line=$(grep -m1 -iE "error|FAILED|FAIL:|exception|abort" "$logs/$name.log" || echo "$line")
  fi
  printf '%-16s %-26s %4d s  %s\n' "$name" "$verdict" $((SECONDS - t0)) "${line:0:160}" |
    tee -a "$summary"
}

{
  echo "date: $(date -u '+%F %T UTC')"
  echo "machine: $(hostname), $(nproc) cores"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1
  echo "trident: $("$bin" --version)"
} | tee "$logs/machine.txt"

data=$logs/data
mkdir -p "$data"
if [ -f "$here/data/corpus_train.bin" ]; then
  cp "$here/data/corpus_train.bin" "$here/data/corpus_val.bin" "$data/"
else
  bash "$here/input/make_corpus.sh" "$bin" "$data" >/dev/null
fi
deck=$here/input/default.toml
# train NAME RANKS --set...: the default deck, 20 steps, metrics to NAME.jsonl.
train() {
  local name=$1 ranks=$2
  shift 2
  echo "$mpirun_cmd -np $ranks $bin train $deck $* ..."
  $mpirun_cmd -np "$ranks" "$bin" train "$deck" --set "data.train=$data/corpus_train.bin" \
    --set 'data.val=[]' --set train.steps=20 --set train.batch=8 --set train.micro_batch=4 \
    --set "output.metrics=$logs/$name.jsonl" --set "checkpoint.dir=$logs/ckpt_$name" \
    --set checkpoint.every=0 --set output.log_every=5 "$@"
}
export -f train
export logs data deck bin mpirun_cmd dev

for t in gpu_kernels gpu_model gpu_nccl_np1 gpu_staged_np4; do
  ranks=1
  [ $t = gpu_staged_np4 ] && ranks=4
  [ -x "$tests/$t" ] && check "$t" 120 "$mpirun_cmd -np $ranks $tests/$t"
done

# The GPU trains what the CPU trains, compared over the first 10 steps (the
# deck's warm-up): from its peak learning rate on, some batches of the small
# corpus spike the gradient norm ~100x, and the two GEMM libraries' summation
# orders then part by 1e-5 (fp32) to 1e-1 (bf16) on those steps alone.
# Tolerances: fp32 loss 1e-6, grad_norm 1e-5; bf16 and fp16 1e-3 and 1e-2.
check cpu_fp32 120 "train cpu_fp32 1 --set system.device=cpu"
check gpu_fp32 120 "train gpu_fp32 1 --set system.device=$dev && \
  $compare metrics $logs/cpu_fp32.jsonl $logs/gpu_fp32.jsonl --tol 1e-6 --grad-tol 1e-5 --to-step 10"
for p in bf16 fp16; do
  check "cpu_$p" 120 "train cpu_$p 1 --set system.device=cpu --set precision.dtype=$p"
  check "gpu_$p" 120 "train gpu_$p 1 --set system.device=$dev --set precision.dtype=$p && \
    $compare metrics $logs/cpu_$p.jsonl $logs/gpu_$p.jsonl --tol 1e-3 --grad-tol 1e-2 --to-step 10"
done
# bf16 with every block recomputed, and zero bubble's separate weight pass
# (2 stages sharing the GPU): the GEMMs read the recomputed or kept values
# as bf16 operands; the same model as the CPU's bf16 run.
check gpu_bf16_recompute 120 "train gpu_bf16_recompute 1 --set system.device=$dev \
    --set precision.dtype=bf16 --set train.recompute=full && \
  $compare metrics $logs/cpu_bf16.jsonl $logs/gpu_bf16_recompute.jsonl --tol 1e-3 --grad-tol 1e-2 --to-step 10"
check gpu_bf16_zb 120 "train gpu_bf16_zb 2 --set system.device=$dev $staged --set parallel.pp=2 \
    --set parallel.schedule=zb-h1 --set precision.dtype=bf16 && \
  $compare metrics $logs/cpu_bf16.jsonl $logs/gpu_bf16_zb.jsonl --tol 1e-3 --grad-tol 1e-2 --to-step 10"
# NCCL at one rank per communicator: the same run as the staged one, bit for bit.
check gpu_nccl_train 120 "train gpu_nccl 1 --set system.device=$dev $nccl && \
  $compare metrics $logs/gpu_fp32.jsonl $logs/gpu_nccl.jsonl --tol 0"
# Checkpointed at step 10, resumed to 20: the same steps and final state.
check gpu_resume 180 "train gpu_full 2 --set system.device=$dev --set checkpoint.every=10 \
    --set checkpoint.keep=0 --set precision.dtype=bf16 && \
  train gpu_resumed 2 --set system.device=$dev --set precision.dtype=bf16 \
    --resume $logs/ckpt_gpu_full/step_000010.h5 && \
  $compare metrics $logs/gpu_full.jsonl $logs/gpu_resumed.jsonl --tol 0 --from-step 11 && \
  $compare checkpoint $logs/ckpt_gpu_full/step_000020.h5 $logs/ckpt_gpu_resumed/step_000020.h5"
# Layouts of 2-4 ranks sharing the GPU (host-staged collectives) against the
# serial GPU run, and the offload settings against no offload, bit for bit.
check gpu_matrix 600 "$py $here/tests/equivalence/run_matrix --trident $bin \
  --max-ranks 4 --max-runs $matrix_runs --workdir $logs/matrix \
  --mpiexec '$mpirun_cmd' --set system.device=$dev $staged"

echo "logs: $logs"
exit $failed
