#!/usr/bin/env bash
# The restart chain as users run it: the first job is signalled (SIGUSR1 to the batch
# shell, as --signal=B:USR1@... does before the time limit), forwards it to trident,
# which checkpoints and exits 0; the queued successor resumes from the checkpoint and
# trains to the end. Every step's loss, the last one included, must equal an
# uninterrupted run's: a resumed run is the same computation.
# Skips (exit 77) while `trident train --help` does not offer --resume.
#   usage: restart_chain.sh CLUSTER_DIR TRIDENT_BINARY FIXTURE_DIR WORK_DIR
set -euo pipefail
CLUSTER=$1 bin=$2 fixtures=$3 work=$4
root=$(cd "$(dirname "$0")/../.." && pwd)
if ! "$bin" train --help 2>&1 | grep -q -- '--resume'; then
  echo "SKIP: 'trident train --help' lists no --resume: checkpoints are not in this build yet"
  exit 77
fi
source "$root/tests/slurm/common.sh"
rm -rf "$work" && mkdir -p "$work" && cd "$work"
export TRIDENT_ROOT=$root TRIDENT_BIN=$bin RUNS_DIR=$work/runs
steps=60
args=(--set train.steps="$steps" --set model.d_model=128 --set model.seq_len=64 --set train.eval_every=20
      --set output.log_every=10 --set system.threads=1)

# The uninterrupted reference, launched the same way (4 ranks, srun --mpi=pmix).
timeout 300 srun --nodes=1 --ntasks=4 --mpi=pmix --kill-on-bad-exit=1 "$bin" train "$fixtures/tiny.toml" "${args[@]}" \
  --metrics "$work/reference.jsonl" > "$work/reference.out" 2>&1 || { cat "$work/reference.out"; fail "reference run failed"; }

first=$(sbatch --parsable --nodes=1 --ntasks=4 --ntasks-per-node=4 "$root/jobscripts/train_chain.sbatch" \
          "$fixtures/tiny.toml" "${args[@]}") || fail "sbatch refused the chain"
echo "chain: first link is job $first"
# Signal the first link a few steps in, as Slurm would shortly before its time limit.
deadline=$(( $(date +%s) + 120 ))
while :; do
  m=$(ls "$RUNS_DIR"/trident.tiny.*/metrics.link1.jsonl 2>/dev/null | head -n 1 || true)
  [ -n "$m" ] && [ "$(wc -l < "$m")" -ge 5 ] && break
  [ "$(date +%s)" -lt "$deadline" ] || fail "link 1 did not reach step 5 in 120 s"
  [ -n "$(squeue -h -j "$first" -o %i 2>/dev/null)" ] || fail "link 1 ended before reaching step 5"
  sleep 0.05
done
scancel --batch --signal=USR1 "$first"
echo "chain: sent SIGUSR1 to the batch shell of job $first at step $(wc -l < "$m")"
run=$(dirname "$m")

deadline=$(( $(date +%s) + 240 ))
until [ -f "$run/DONE" ] && [ -z "$(squeue -h -n trident-chain -o %i)" ]; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "the chain did not finish in 240 s"
  sleep 0.5
done
echo "--- $run/chain.log"; cat "$run/chain.log"
echo "--- $run/trident.out (links, checkpoint messages, last lines)"
grep -E '^=== link|resume|checkpoint|^FOM' "$run/trident.out" || true
echo "--- job log of link 1"; cat "$work/trident-chain-$first.out"

[ "$(job_field "$first" JobState)" = COMPLETED ] || fail "link 1 ended $(job_field "$first" JobState), not COMPLETED"
[ "$(job_field "$first" ExitCode)" = 0:0 ] || fail "link 1 exited $(job_field "$first" ExitCode), not 0"
grep -q 'SIGUSR1 at .*forwarding to the job step' "$work/trident-chain-$first.out" || fail "link 1 did not forward SIGUSR1"
links=$(grep -c '^=== link' "$run/trident.out")
[ "$links" = 2 ] || fail "expected 2 links (signalled, resumed), got $links"
grep -q '^=== link 1,.*' "$run/trident.out" && ! grep -q '^=== link 1,.*--resume' "$run/trident.out" \
  || fail "link 1 must start without --resume"
grep -q '^=== link 2,.*--resume latest' "$run/trident.out" || fail "link 2 did not resume from latest"
[ -e "$run/checkpoints/latest" ] || fail "no checkpoints/latest"
grep -q 'training complete' "$run/chain.log" || fail "chain.log does not record completion"

/usr/bin/python3 - "$work/reference.jsonl" "$run" "$steps" <<'PY'
import glob, json, sys
ref = {r["step"]: r for r in map(json.loads, open(sys.argv[1]))}
files = sorted(glob.glob(sys.argv[2] + "/metrics.link*.jsonl"))
chain = {}
for f in files:
    for r in map(json.loads, open(f)):
        chain[r["step"]] = r
steps = int(sys.argv[3])
link1 = [json.loads(l)["step"] for l in open(files[0])]
assert 0 < max(link1) < steps, f"link 1 trained steps {min(link1)}..{max(link1)}: the signal did not stop it early"
assert sorted(chain) == list(range(1, steps + 1)), f"chain steps: {sorted(chain)}"
bad = [s for s in chain if chain[s]["loss"] != ref[s]["loss"]]
assert not bad, "losses differ from the uninterrupted run at steps %s: %s" % (
    bad[:5], [(chain[s]["loss"], ref[s]["loss"]) for s in bad[:5]])
vals = [s for s in ref if "val_loss" in ref[s]]
assert all(chain[s].get("val_loss") == ref[s]["val_loss"] for s in vals), "validation losses differ"
print(f"ok: link 1 stopped at step {max(link1)}, link 2 resumed to {steps}; final loss "
      f"{chain[steps]['loss']:.6f} == uninterrupted {ref[steps]['loss']:.6f}, all {steps} losses identical")
PY
