#!/usr/bin/env bash
# What bf16 weights and activations cost in accuracy on one GPU: GPT-2 124M
# trained STEPS steps (default 200) on the corpus in fp32 and in bf16 (fp32
# masters), the same seed and batches, and the bf16 loss against the fp32 one
# at every EVERY-th step (default 20). Exits 1 when a step differs by more
# than TOL (default 0.01, relative).
#   usage: perf/gpu_bf16_accuracy.sh [LOG_DIR] [STEPS] [MICRO_BATCH]
set -uo pipefail
logs=$(realpath -m "${1:-gpu-bf16-accuracy}")
steps=${2:-200}
mb=${3:-8}
every=${EVERY:-20}
tol=${TOL:-0.01}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${TRIDENT_BIN:-$here/build-cuda/src/trident}
[ -x "$bin" ] || bin=$(command -v trident)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$logs"
data=${DATA_DIR:-$here/data}
[ -f "$data/corpus_train.bin" ] || bash "$here/input/make_corpus.sh" "$bin" "$data" >/dev/null
for dtype in fp32 bf16; do
  cmd=(mpirun -np 1 --bind-to none "$bin" train "$here/input/gpt2-124m.toml"
       --set system.device=cuda --set "precision.dtype=$dtype"
       --set "data.train=$data/corpus_train.bin" --set 'data.val=[]'
       --set "train.steps=$steps" --set "train.batch=$mb" --set "train.micro_batch=$mb"
       --set train.warmup=20 --set "output.log_every=$every"
       --set "output.metrics=$logs/$dtype.jsonl" --set 'checkpoint.dir=""'
       --set checkpoint.every=0 --set checkpoint.minutes=0)
  echo "command: ${cmd[*]}"
  timeout 600 "${cmd[@]}" >"$logs/$dtype.log" 2>&1 || { tail -5 "$logs/$dtype.log"; exit 1; }
done
python3 - "$logs" "$every" "$tol" <<'PY'
import json, sys
logs, every, tol = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def losses(name):
    recs = [json.loads(l) for l in open(f"{logs}/{name}.jsonl") if l.strip()]
    return {r["step"]: r["loss"] for r in recs if "loss" in r and r["step"] % every == 0}
a, b = losses("fp32"), losses("bf16")
worst = 0.0
print(f"{'step':>6}{'fp32 loss':>12}{'bf16 loss':>12}{'rel diff':>10}")
for step in sorted(a):
    if step not in b:
        print(f"step {step}: no bf16 loss"); sys.exit(1)
    d = abs(b[step] - a[step]) / abs(a[step])
    worst = max(worst, d)
    print(f"{step:>6}{a[step]:>12.4f}{b[step]:>12.4f}{100 * d:>9.2f}%")
ok = len(a) > 0 and worst <= tol
print(f"bf16 vs fp32 over {len(a)} points: worst {100 * worst:.2f}% "
      f"(bound {100 * tol:.0f}%): {'pass' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
