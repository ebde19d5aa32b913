#!/usr/bin/env bash
# Checkpoint fixtures for the CLI tests: a 2-rank run saving at steps 10, 20
# and 30, a copy with one flipped byte in /params/wte's data, a truncated copy
# and an empty checkpoint directory.
#   usage: make_checkpoints.sh "MPIEXEC..." TRIDENT_BINARY FIXTURE_DIR PYTHON_WITH_H5PY
set -euo pipefail
mpiexec=$1 bin=$2 dir=$3 py=$4
ck="$dir/ckpt"
rm -rf "$ck" "$dir/ckpt_empty" && mkdir -p "$dir/ckpt_empty"
timeout -k 5 120 $mpiexec -n 2 "$bin" train "$dir/tiny.toml" --set "checkpoint.dir=\"$ck\"" \
  --set checkpoint.every=10 --set checkpoint.keep=3 > "$ck.out" 2>&1 || { cat "$ck.out"; exit 1; }
cp "$ck/step_000010.h5" "$dir/corrupt.h5"
"$py" - "$dir/corrupt.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    at = f["params/wte"].id.get_offset() + 1001
with open(sys.argv[1], "r+b") as f:
    f.seek(at)
    b = f.read(1)[0]
    f.seek(at)
    f.write(bytes([b ^ 0x10]))
PY
size=$(stat -c %s "$ck/step_000010.h5")
head -c $((size / 2)) "$ck/step_000010.h5" > "$dir/truncated.h5"
ls "$ck"
