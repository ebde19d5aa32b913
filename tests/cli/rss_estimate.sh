#!/usr/bin/env bash
# Peak process RSS lands within 10% of `trident estimate`'s process RSS
# (arenas + the measured runtime term) on a model whose arenas are most of
# it (51 M parameters, seq_len 32): ZeRO-3 over 2 ranks in fp32 (MPI's
# reduce-scatter temporaries included), one rank in bf16 (the token
# embedding read through its window), and one rank with the optimizer
# offloaded to host memory (outside the arenas, counted apart).
#   usage: rss_estimate.sh "MPIEXEC..." TRIDENT_BINARY FIXTURE_DIR
set -euo pipefail
mpiexec=$1 bin=$2 tiny=$3/tiny.toml
shape=(--set model.layers=4 --set model.d_model=1024 --set model.heads=16 --set model.seq_len=32
       --set train.micro_batch=1 --set checkpoint.dir= --set checkpoint.every=0)
check() {  # RANKS [SETTINGS...]
  local ranks=$1
  shift
  local sets=("${shape[@]}" --set train.batch="$ranks" "$@")
  local est out
  est=$("$bin" estimate "$tiny" --world "$ranks" "${sets[@]}" |
        sed -nE 's/^process RSS .*= ([0-9.]+ [KMG]iB) \(runtime.*/\1/p')
  out=$(timeout -k 5 200 $mpiexec -n "$ranks" "$bin" train "$tiny" "${sets[@]}" \
        --set train.steps=2 --set train.eval_every=0 2>&1) || { echo "$out"; echo "FAIL: run"; exit 1; }
  local measured
  measured=$(sed -nE 's/.*process RSS ([0-9.]+ [KMG]iB).*/\1/p' <<<"$out")
  [ -n "$est" ] && [ -n "$measured" ] || { echo "$out"; echo "FAIL: no RSS figures"; exit 1; }
  python3 - "$est" "$measured" "$ranks $*" <<'PY'
import sys
unit = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
size = lambda s: float(s.split()[0]) * unit[s.split()[1]]
est, got = size(sys.argv[1]), size(sys.argv[2])
print(f"{sys.argv[3]}: estimate {sys.argv[1]}, measured {sys.argv[2]}, ratio {got / est:.3f}")
sys.exit(0 if abs(got - est) <= 0.10 * est else 1)
PY
}
check 2 --set zero.stage=3
check 1 --set zero.stage=0 --set precision.dtype=bf16
check 1 --set zero.stage=2 --set precision.dtype=bf16 --set offload.optimizer=cpu
echo "PASS"
