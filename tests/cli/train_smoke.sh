#!/usr/bin/env bash
# A real 2-rank training run on the tiny deck: exits 0, prints per-step lines
# and the figure-of-merit line, writes one JSON object per step with the
# documented fields, and the loss falls.
#   usage: train_smoke.sh "MPIEXEC..." TRIDENT_BINARY FIXTURE_DIR
set -euo pipefail
mpiexec=$1 bin=$2 dir=$3
metrics="$dir/metrics.jsonl"
out=$(timeout -k 5 300 $mpiexec -n 2 "$bin" train "$dir/tiny.toml" --metrics "$metrics" 2>&1) || {
  echo "$out"; echo "FAIL: training exited non-zero"; exit 1; }
echo "$out"
grep -Eq '^FOM: [0-9.]+ tokens/s \| [0-9.]+ tokens/s/rank \| MFU [0-9.]+%' <<<"$out" || { echo "FAIL: no FOM line"; exit 1; }
grep -Eq '^step 30/30 \| loss [0-9.]+ .*ETA' <<<"$out" || { echo "FAIL: no final step line"; exit 1; }
grep -q 'forward' <<<"$out" && grep -q 'max/avg' <<<"$out" || { echo "FAIL: no phase timers"; exit 1; }
python3 - "$metrics" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 30, f"expected 30 records, got {len(rows)}"
for r in rows:
    for k in ("step", "loss", "lr", "grad_norm", "tokens_per_s"):
        assert k in r, f"missing {k} in {r}"
evals = [r["step"] for r in rows if "val_loss" in r]
assert evals == [10, 20, 30], f"val_loss at steps {evals}"
first, last = rows[0]["loss"], rows[-1]["loss"]
assert last < first - 1.0, f"loss did not fall enough: {first} -> {last}"
print(f"ok: 30 records, loss {first:.3f} -> {last:.3f}, val at {evals}")
PY
