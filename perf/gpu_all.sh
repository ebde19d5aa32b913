#!/usr/bin/env bash
# Every GPU check and benchmark in one call on a borrowed node, each bounded
# so the whole call ends in time: the gpu_* tests and training checks
# (gpu_check.sh), GPT-2 124M against PyTorch at MICRO_BATCH (gpu_gpt2.sh), the
# same with a baseline binary (BASE_BIN, when set: an earlier build measured
# on the same machine), bf16 against fp32 over 200 steps (gpu_bf16_accuracy.sh)
# and the largest micro-batch (gpu_max_batch.sh). PARTS picks among
# "check gpt2 base accuracy maxbatch" (all by default); *_S bound each part
# in seconds, GPT2_PARTS is gpu_gpt2.sh's PARTS (default "trident pytorch").
#   usage: perf/gpu_all.sh LOG_DIR [MICRO_BATCH]
# On the node: unpack a perf/gpu_bundle.sh bundle and source its env.sh first;
# DATA_DIR may name a folder with corpus_train.bin (else it is made there).
set -uo pipefail
logs=$(realpath -m "${1:?usage: perf/gpu_all.sh LOG_DIR [MICRO_BATCH]}")
mb=${2:-8}
parts=${PARTS:-check gpt2 base accuracy maxbatch}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$logs"
export DATA_DIR=${DATA_DIR:-$here/data}
summary=$logs/summary.txt
: >"$summary"
# part NAME LIMIT_S COMMAND...: one part, its output to NAME.log, its last
# lines to the summary.
part() {
  local name=$1 limit=$2
  shift 2
  [[ " $parts " == *" $name "* ]] || return 0
  local t0=$SECONDS
  timeout "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  { echo "== $name (rc $rc, $((SECONDS - t0)) s)"; tail -n "${TAIL:-25}" "$logs/$name.log"; } |
    tee -a "$summary"
}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader |
  tee -a "$summary"
part check "${CHECK_S:-200}" env GPU_CHECK_SECONDS="${CHECK_S:-200}" \
  bash "$here/perf/gpu_check.sh" "$logs/check" "${MATRIX_RUNS:-4}"
part gpt2 "${GPT2_S:-240}" env PARTS="${GPT2_PARTS:-trident pytorch}" \
  bash "$here/perf/gpu_gpt2.sh" "$mb" 10 "$logs/gpt2"
[ -n "${BASE_BIN:-}" ] &&
  part base 60 env PARTS=trident TRIDENT_BIN="$BASE_BIN" \
    bash "$here/perf/gpu_gpt2.sh" "$mb" 10 "$logs/base"
part accuracy "${ACCURACY_S:-150}" bash "$here/perf/gpu_bf16_accuracy.sh" "$logs/accuracy"
part maxbatch "${MAXBATCH_S:-120}" bash "$here/perf/gpu_max_batch.sh" "$logs/maxbatch" \
  "${MAXBATCH_NONE:-192 208 224}" "${MAXBATCH_FULL:-288}"
echo "logs: $logs"
