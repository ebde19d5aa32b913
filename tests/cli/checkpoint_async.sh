#!/usr/bin/env bash
# checkpoint.async: every checkpoint of a run equals the synchronous run's, bit
# for bit (every dataset and attribute), also when the background write spans
# several steps (TRIDENT_FAULT_INJECT=ckpt:drain_slow) and the optimizer step
# must wait for it (staging_mb = 0) or copy what it has not read, PipeDream's
# included; tensors large enough for direct I/O written from the arenas in
# place, on a slow disk too (ckpt:write_slow); and a run resumed from an
# asynchronous checkpoint continues bit for bit.
#   usage: checkpoint_async.sh "MPIEXEC..." TRIDENT_BINARY FIXTURE_DIR PYTHON_WITH_H5PY
set -uo pipefail
mpiexec=$1 bin=$2 dir=$3 py=$4
here=$(cd "$(dirname "$0")" && pwd)
compare="$here/../../perf/run_compare.py"
work="$dir/async" && rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
run() {  # NAME [--set ...]...: trains into $work/NAME (checkpoints every 10 steps, all kept)
  local name=$1; shift
  timeout -k 5 120 $mpiexec -n 2 "$bin" train "$dir/tiny.toml" --set train.eval_every=0 \
    --set "checkpoint.dir=\"$work/$name\"" --set checkpoint.every=10 --set checkpoint.keep=0 \
    --metrics "$work/$name.jsonl" "$@" > "$work/$name.out" 2>&1 || { cat "$work/$name.out"; fail "$name: exit $?"; }
}
same_files() {  # NAME STEP...: NAME's checkpoints equal the synchronous run's ($REF, or sync)
  local name=$1 ref=${REF:-sync}; shift
  for s in "$@"; do
    f=$(printf 'step_%06d.h5' "$s")
    "$py" "$compare" checkpoint --attributes "$work/$ref/$f" "$work/$name/$f" ||
      fail "$name: $f differs from the synchronous run's"
  done
  [ -z "$(ls -A "$work/$name" | grep '\.tmp$')" ] || fail "$name: temporaries left: $(ls -A "$work/$name")"
}

run sync
run async --set checkpoint.async=true
same_files async 10 20 30
python3 "$here/same_losses.py" "$work/sync.jsonl" "$work/async.jsonl" || fail "async: losses differ"
grep -q "checkpoint: step 10 -> .*in the background" "$work/async.out" || fail "async: no background save announced"

# Tensors large enough for direct I/O are written from the arenas in place,
# also on a slow disk (ckpt:write_slow), where the optimizer step waits for
# the transfers still reading them and copies what the drain has not taken.
big=(--set model.d_model=256)
run big_sync "${big[@]}"
run big_async "${big[@]}" --set checkpoint.async=true
TRIDENT_FAULT_INJECT=ckpt:write_slow run big_slow "${big[@]}" --set checkpoint.async=true \
  --set checkpoint.staging_mb=1
for name in big_async big_slow; do
  REF=big_sync same_files $name 10 20 30
  grep -q "checkpoint: step 10 -> .*[1-9][0-9.]* [KMG]iB written in place" "$work/$name.out" ||
    fail "$name: nothing written in place"
done
python3 "$here/same_losses.py" "$work/big_sync.jsonl" "$work/big_slow.jsonl" || fail "big_slow: losses differ"

# The drain still reading when the optimizer steps: it waits, or copies.
TRIDENT_FAULT_INJECT=ckpt:drain_slow run slow_wait --set checkpoint.async=true --set checkpoint.staging_mb=0
same_files slow_wait 10 20 30
TRIDENT_FAULT_INJECT=ckpt:drain_slow run slow_copy --set checkpoint.async=true
same_files slow_copy 10 20 30
# One save in flight: the drain of step 10 (about 0.4 s) outlasts 10 steps.
grep -q "checkpoint: waited [0-9.]* s for step 10's save" "$work/slow_copy.out" ||
  fail "slow_copy: the save due at step 20 did not say it waited for step 10's"

# PipeDream: its weight stash swaps other versions into the live arena for
# each backward, yet the save reads the state in place (the arenas are
# swapped, not their bytes): slowed, so the backwards run while it reads, and
# with staging_mb = 0 the first update waits for all of it; nothing is
# copied, so the memory line shows no staging.
pd=(--set parallel.pp=2 --set parallel.dp=1 --set parallel.schedule=pipedream --set precision.dtype=bf16)
run pd_sync "${pd[@]}"
TRIDENT_FAULT_INJECT=ckpt:drain_slow run pd_async "${pd[@]}" --set checkpoint.async=true \
  --set checkpoint.staging_mb=0
REF=pd_sync same_files pd_async 10 20 30
python3 "$here/same_losses.py" "$work/pd_sync.jsonl" "$work/pd_async.jsonl" || fail "pd_async: losses differ"
grep -q "checkpoint: step 10 -> .*in the background" "$work/pd_async.out" || fail "pd_async: no background save"
grep -q "async checkpoint staging" "$work/pd_async.out" && fail "pd_async: host memory copied at the save"
"$bin" estimate "$dir/tiny.toml" --world 2 "${pd[@]}" --set checkpoint.async=true \
  --set checkpoint.staging_mb=0 > "$work/pd_estimate.out" 2>&1 || { cat "$work/pd_estimate.out"; fail "pd estimate"; }
grep -q "async checkpoint staging" "$work/pd_estimate.out" && fail "pd: estimate counts staging the run does not hold"

# Resumed from an asynchronous checkpoint: the same losses and checkpoints.
mkdir -p "$work/resumed" && cp "$work/async/step_000010.h5" "$work/resumed/"
echo step_000010.h5 > "$work/resumed/latest"
run resumed --set checkpoint.async=true --resume latest
grep -q "resumed from $work/resumed/step_000010.h5: step 10" "$work/resumed.out" || fail "resumed from the wrong place"
python3 "$here/same_losses.py" "$work/sync.jsonl" "$work/resumed.jsonl" 11 || fail "resumed: losses differ"
same_files resumed 20 30

# A background write failing (EIO): a warning, `latest` stays, training goes
# on; failing twice in a row stops the run. A stuck one is an error naming
# the rank and the dataset after system.comm_timeout_s, never a hang.
TRIDENT_FAULT_INJECT=ckpt:drain_error@10 run io_error --set checkpoint.async=true
grep -q "warning: checkpoint .*/.step_000010.h5.tmp: dataset /.*injected write failure.*Input/output error; the checkpoint of step 10 is dropped (latest names nothing yet) and training goes on" \
  "$work/io_error.out" || fail "io_error: no warning"
[ "$(ls -A "$work/io_error" | xargs)" = "latest step_000020.h5 step_000030.h5" ] || fail "io_error: left $(ls -A "$work/io_error" | xargs)"
same_files io_error 20 30
TRIDENT_FAULT_INJECT=ckpt:drain_error timeout -k 5 120 $mpiexec -n 2 "$bin" train "$dir/tiny.toml" \
  --set "checkpoint.dir=\"$work/io_errors\"" --set checkpoint.every=10 --set checkpoint.async=true > "$work/io_errors.out" 2>&1
code=$?
[ "$code" = 1 ] && grep -q "^error: .*the second background checkpoint in a row failed: stopping" "$work/io_errors.out" ||
  { cat "$work/io_errors.out"; fail "io_errors: exit $code, expected 1 and the reason"; }
[ ! -e "$work/io_errors/latest" ] || fail "io_errors: latest names $(cat "$work/io_errors/latest")"
TRIDENT_FAULT_INJECT=ckpt:drain_stall@10 timeout -k 5 60 $mpiexec -n 2 "$bin" train "$dir/tiny.toml" \
  --set "checkpoint.dir=\"$work/stall\"" --set checkpoint.every=10 --set checkpoint.async=true \
  --set system.comm_timeout_s=2 > "$work/stall.out" 2>&1
code=$?
[ "$code" != 0 ] && [ "$code" != 124 ] && [ "$code" != 137 ] &&
  grep -Eq "^error on rank [01]: checkpoint .*step_000010.h5.tmp: the background write made no progress for 2 s .*at dataset /" "$work/stall.out" ||
  { cat "$work/stall.out"; fail "stall: exit $code, expected an error naming the rank and the dataset"; }
echo "ok: asynchronous checkpoints equal synchronous ones bit for bit; resume continues bit for bit;" \
  "a failed background write warns, two stop the run, a stuck one is named"
