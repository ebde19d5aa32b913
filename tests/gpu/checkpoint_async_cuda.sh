#!/usr/bin/env bash
# checkpoint.async on the CUDA backend: device state is read by the drain's
# thread on a stream of its own into pinned staging, in waves (staging_mb =
# 0.002: one piece a wave); every checkpoint equals the synchronous run's bit
# for bit (fp32, and bf16 with the masters), also when the optimizer step
# meets the drain (ckpt:drain_slow) and reads what it has not itself. Exits 77
# (skipped) without a GPU.
#   usage: checkpoint_async_cuda.sh "MPIEXEC..." TRIDENT_BINARY FIXTURE_DIR PYTHON_WITH_H5PY
set -uo pipefail
mpiexec=$1 bin=$2 dir=$3 py=$4
nvidia-smi -L > /dev/null 2>&1 || { echo "no GPU: skipped"; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
compare="$here/../../perf/run_compare.py"
work="$dir/async_cuda" && rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
run() {  # NAME DTYPE [--set ...]...
  local name=$1 dtype=$2; shift 2
  timeout -k 5 300 $mpiexec -n 1 "$bin" train "$dir/tiny.toml" --set system.device=cuda \
    --set train.steps=12 --set train.eval_every=0 --set precision.dtype="$dtype" \
    --set "checkpoint.dir=\"$work/$name\"" --set checkpoint.every=4 --set checkpoint.keep=0 \
    "$@" > "$work/$name.out" 2>&1 || { cat "$work/$name.out"; fail "$name: exit $?"; }
}
for dtype in fp32 bf16; do
  run "sync_$dtype" "$dtype"
  run "async_$dtype" "$dtype" --set checkpoint.async=true --set checkpoint.staging_mb=0.002
  TRIDENT_FAULT_INJECT=ckpt:drain_slow run "slow_$dtype" "$dtype" --set checkpoint.async=true
  grep -Eq "checkpoint: step 4 -> .*staged through .* in ([2-9]|[1-9][0-9]+) waves" "$work/async_$dtype.out" ||
    { grep checkpoint "$work/async_$dtype.out"; fail "async_$dtype: no waves through the staging"; }
  for run_name in "async_$dtype" "slow_$dtype"; do
    for s in 4 8 12; do
      f=$(printf 'step_%06d.h5' "$s")
      "$py" "$compare" checkpoint --attributes "$work/sync_$dtype/$f" "$work/$run_name/$f" ||
        fail "$run_name: $f differs from the synchronous run's"
    done
  done
done
echo "ok: asynchronous saves of device state equal the synchronous ones bit for bit"
