#!/usr/bin/env bash
# Checkpoints do not depend on context parallelism: a run at cp 2 saves the
# same global tensors a run at cp 1 does, so each resumes the other. A cp 2
# run (2 ranks) resumed at cp 1 on one rank, and a cp 1 run resumed at cp 2,
# each continue their reference within the equivalence matrix's fp32
# tolerance (the ring sums attention in another order, so not bit for bit);
# the same with ZeRO-1 sharding over data x context. Also: cp 2 trains the
# same losses as cp 1 at every step.
#   usage: context_resume.sh "MPIEXEC..." TRIDENT_BINARY FIXTURE_DIR
set -euo pipefail
mpiexec=$1 bin=$2 tiny=$3/tiny.toml dir=$3/context_resume
rm -rf "$dir" && mkdir -p "$dir"
train() {  # NAME RANKS CP [ARGS...]
  local name=$1 ranks=$2 cp=$3
  shift 3
  timeout -k 5 200 $mpiexec -n "$ranks" "$bin" train "$tiny" --set train.steps=8 \
    --set train.eval_every=0 --set parallel.cp="$cp" --set checkpoint.dir="$dir/$name" \
    --set checkpoint.every=4 --set checkpoint.keep=0 --metrics "$dir/$name.jsonl" "$@" \
    >"$dir/$name.log" 2>&1 || { cat "$dir/$name.log"; echo "FAIL: run $name exited non-zero"; exit 1; }
}
close() {  # REFERENCE RUN FIRST_STEP: every loss of RUN from FIRST_STEP within 1e-5 of REFERENCE's
  python3 - "$dir/$1.jsonl" "$dir/$2.jsonl" "$3" <<'PY'
import json, sys
ref = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1]))}
run = [r for r in map(json.loads, open(sys.argv[2])) if r["step"] >= int(sys.argv[3])]
assert [r["step"] for r in run] == list(range(int(sys.argv[3]), max(ref) + 1)), "steps differ"
worst = max(abs(r["loss"] - ref[r["step"]]) / abs(ref[r["step"]]) for r in run)
assert worst < 1e-5, f"{sys.argv[2]}: loss {worst:.2e} off {sys.argv[1]}"
print(f"ok: {sys.argv[2]} within {worst:.1e} of {sys.argv[1]}")
PY
}
train cp1 1 1
train cp2 2 2
grep -q 'CP(2)' "$dir/cp2.log" || { echo "FAIL: the cp 2 run's layout line names no CP(2)"; exit 1; }
train cp2_to_cp1 1 1 --resume "$dir/cp2/step_000004.h5"
train cp1_to_cp2 2 2 --resume "$dir/cp1/step_000004.h5"
close cp1 cp2 1
close cp2 cp2_to_cp1 5
close cp1 cp1_to_cp2 5
zero=(--set zero.stage=1 --set train.micro_batch=1)
train z1_cp1 2 1 "${zero[@]}"
train z1_cp2 4 2 "${zero[@]}"
train z1_cp2_to_cp1 2 1 "${zero[@]}" --resume "$dir/z1_cp2/step_000004.h5"
close z1_cp1 z1_cp2 1
close z1_cp2 z1_cp2_to_cp1 5
echo "ok: checkpoints resume across context parallelism"
