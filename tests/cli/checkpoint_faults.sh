#!/usr/bin/env bash
# Crash safety: every rank is SIGKILLed at each phase of writing the step-20
# checkpoint (TRIDENT_FAULT_INJECT=ckpt:<phase>@20); `--resume latest` then
# loads the step-10 checkpoint and the run ends with the same losses, bit for
# bit, as one that never crashed. The killed run never announced step 20's
# checkpoint. With `async`: checkpoint.async (mid_datasets is then inside the
# background write, before_complete a later step boundary) and keep = 1, so
# the clean-up must spare what `latest` names.
#   usage: checkpoint_faults.sh "MPIEXEC..." TRIDENT_BINARY FIXTURE_DIR [async]
set -uo pipefail
mpiexec=$1 bin=$2 dir=$3 mode=${4:-sync}
here=$(cd "$(dirname "$0")" && pwd)
work="$dir/faults_$mode" && rm -rf "$work" && mkdir -p "$work"
extra=() kept=$(printf 'latest\nstep_000020.h5\nstep_000030.h5')
if [ "$mode" = async ]; then
  extra=(--set checkpoint.async=true --set checkpoint.keep=1) kept=$(printf 'latest\nstep_000030.h5')
fi
fail() { echo "FAIL: $*"; exit 1; }
run() { timeout -k 5 120 $mpiexec -n 2 "$bin" train "$dir/tiny.toml" "$@" 2>&1; }

run --metrics "$work/straight.jsonl" > "$work/straight.out" || fail "the straight run failed"
for phase in after_create mid_datasets before_complete before_rename before_latest; do
  ck="$work/$phase"
  sets=(--set "checkpoint.dir=\"$ck\"" --set checkpoint.every=10 "${extra[@]}")
  out=$(TRIDENT_FAULT_INJECT="ckpt:$phase@20" run "${sets[@]}" --metrics "$ck.crashed.jsonl")
  code=$?
  [ "$code" != 0 ] && [ "$code" != 124 ] || { echo "$out"; fail "$phase: exit $code, expected a kill"; }
  grep -q "fault injection: ckpt:$phase at step 20" <<<"$out" || { echo "$out"; fail "$phase: no fault"; }
  grep -q "checkpoint: step 20 ->" <<<"$out" && { echo "$out"; fail "$phase: step 20's checkpoint announced, never made"; }
  [ -f "$ck/step_000010.h5" ] || fail "$phase: latest's checkpoint was deleted"
  [ "$(cat "$ck/latest")" = step_000010.h5 ] || fail "$phase: latest is '$(cat "$ck/latest")'"
  out=$(run "${sets[@]}" --resume latest --metrics "$ck.jsonl") || { echo "$out"; fail "$phase: resume failed"; }
  grep -q "resumed from $ck/step_000010.h5: step 10" <<<"$out" || { echo "$out"; fail "$phase: resumed from the wrong place"; }
  python3 "$here/same_losses.py" "$work/straight.jsonl" "$ck.jsonl" 11 || fail "$phase: losses differ"
  ls -A "$ck" | grep -q '\.tmp$' && fail "$phase: a temporary file was left behind: $(ls -A "$ck")"
  [ "$(ls "$ck")" = "$kept" ] || fail "$phase: kept $(ls "$ck" | xargs)"
  echo "ok ($mode): killed at $phase, resumed from step 10, same losses"
done
