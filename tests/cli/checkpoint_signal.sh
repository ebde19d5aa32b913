#!/usr/bin/env bash
# A job told to stop with SIGUSR1 (as Slurm's --signal does, forwarded by
# mpirun) checkpoints at the next step boundary, exits 0 saying how to resume,
# and `--resume latest` finishes with the straight run's losses, bit for bit.
# With `async`: checkpoint.async saving every 2 steps, so a background save is
# in flight when the signal comes; it is completed first.
#   usage: checkpoint_signal.sh "MPIEXEC..." TRIDENT_BINARY FIXTURE_DIR [async]
set -uo pipefail
mpiexec=$1 bin=$2 dir=$3 mode=${4:-sync}
here=$(cd "$(dirname "$0")" && pwd)
work="$dir/signal_$mode" && rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
sets=(--set train.steps=300 --set train.eval_every=0 --set "checkpoint.dir=\"$work/ck\"")
[ "$mode" = async ] && sets+=(--set checkpoint.async=true --set checkpoint.every=2)

timeout -k 5 120 $mpiexec -n 2 "$bin" train "$dir/tiny.toml" "${sets[@]}" \
  --metrics "$work/straight.jsonl" > "$work/straight.out" 2>&1 || fail "the straight run failed"
rm -rf "$work/ck"
$mpiexec -n 2 "$bin" train "$dir/tiny.toml" "${sets[@]}" --metrics "$work/run.jsonl" \
  > "$work/run.out" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do  # wait for step 10 (at most 60 s)
  [ "$(cat "$work/run.jsonl" 2>/dev/null | wc -l)" -ge 10 ] && break
  sleep 0.05
done
kill -USR1 "$pid"
( sleep 60; kill -KILL "$pid" ) > /dev/null 2>&1 & watchdog=$!  # no hang if the signal is lost
wait "$pid"
code=$?
kill "$watchdog" 2>/dev/null
cat "$work/run.out"
[ "$code" = 0 ] || fail "exit $code after SIGUSR1, expected 0"
stop=$(sed -nE 's/^stopped by SIGUSR1 after step ([0-9]+) of 300; checkpoint .*step_0*([0-9]+)\.h5 written.*--resume latest.*/\1 \2/p' "$work/run.out")
read -r step saved <<<"$stop"
[ -n "$stop" ] && [ "$step" = "$saved" ] || fail "no stop message naming the checkpoint"
[ "$step" -lt 300 ] || fail "the signal arrived after the last step; nothing was tested"
timeout -k 5 120 $mpiexec -n 2 "$bin" train "$dir/tiny.toml" "${sets[@]}" --resume latest \
  --metrics "$work/run.jsonl" > "$work/resume.out" 2>&1 || { cat "$work/resume.out"; fail "resume failed"; }
grep -q "resumed from $work/ck/step_0*$step.h5: step $step" "$work/resume.out" || fail "resumed from the wrong place"
python3 "$here/same_losses.py" "$work/straight.jsonl" "$work/run.jsonl" 1 || fail "losses differ"
echo "ok ($mode): stopped by SIGUSR1 after step $step, resumed, same losses as the straight run"
