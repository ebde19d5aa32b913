#!/usr/bin/env bash
# ZeRO-Offload / ZeRO-Infinity on this machine (docs/offload.md):
#  1. swap-file bandwidth (build/perf/bench_swap: O_DIRECT through io_uring at
#     BLOCK_MB blocks and QUEUE_DEPTH in flight, then the optimizer's own
#     read-update-write stream) against fio's O_DIRECT io_uring write and read
#     at the same block size and depth, same file size, same disk; the ratio
#     (target >= 0.8). fio runs right beside each trident transfer.
#  2. step time of one deck (gpt2-124m's shape at seq_len 128, one rank,
#     ZeRO-1) with offload.optimizer none, cpu and nvme: the median step and
#     the optimizer's share, loss per step (bit-identical across the three).
# A shared or virtual disk drifts from minute to minute: every part runs
# ROUNDS times, alternating, and prints each round (compare within a round).
#  3. with --headline: large models for 4 steps, bf16 weights and gradients,
#     on one rank, lr 2e-6 on one repeated 32-token window (at 32 tokens a
#     step, the windows' own spread hides a few steps' progress): ZeRO-1 with
#     1.0 B parameters without offload and with CPU offload (1.53 B needs
#     23.6 GiB by trident estimate), 3.19 B with NVMe offload of the optimizer
#     (fp32 model state 51 GB, 2.06x the 23 GiB of RAM); ZeRO-3 with 3.98 B
#     and the parameters on NVMe too (14 B/param of swap: 56 GB; the disk,
#     not the RAM, bounds it). The swap column is the disk the run took at
#     its fullest (df, sampled every 2 s). Tens of minutes; peak RSS 16 GiB.
#     HEADLINE_RUNS picks rows by name (default: "none cpu nvme params").
#   usage: perf/offload.sh [DIR] [GB] [BLOCK_MB] [QUEUE_DEPTH] [ROUNDS] [--headline]
#   (ROUNDS = 0 skips parts 1 and 2)
set -euo pipefail
dir=${1:-/tmp/trident_offload_bench} gb=${2:-2} block_mb=${3:-4} depth=${4:-8} rounds=${5:-3}
build=${TRIDENT_BUILD:-build}
bench=$build/perf/bench_swap bin=$build/src/trident
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$bench" ] && [ -x "$bin" ] || { echo "error: build first (cmake --build build)"; exit 2; }
command -v fio > /dev/null || { echo "error: fio not found (Debian: apt-get install fio)"; exit 2; }
mkdir -p "$dir"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/ {print $2}') GiB"
echo "disk: $(df -hT "$dir" | awk 'NR==2 {print $1, $2, $3, $5 " free"}') at $dir; $(fio --version), kernel $(uname -r)"
echo "load: $(uptime | sed 's/.*load/load/')"
echo "command: $bench $dir $gb $block_mb $depth; fio --direct=1 --ioengine=io_uring --bs=${block_mb}M --iodepth=$depth --size=$gb GB"

bytes=$(awk -v g="$gb" 'BEGIN {printf "%.0f", g * 1e9}')  # what bench_swap moves, about
median_step() {  # trident's output -> the median step time in s, step 1 left out
  grep -E '^step ' <<<"$1" | tail -n +2 | sed -E 's/.*\| ([0-9]+) ms \|.*/\1/' | sort -n |
    awk '{a[NR]=$1} END {print a[int((NR+1)/2)] / 1000}'
}
fio_gbps() {  # write|read -> GB/s
  fio --name=swap --filename="$dir/fio.dat" --rw="$1" --bs="${block_mb}M" --iodepth="$depth" \
      --ioengine=io_uring --direct=1 --size="$bytes" --output-format=json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0][sys.argv[1]]["bw_bytes"]/1e9)' "$1"
}
echo
echo "## swap bandwidth ($gb GB, ${block_mb} MiB blocks, depth $depth)"
printf '%-6s %-8s %12s %12s %8s %14s\n' round mode "trident GB/s" "fio GB/s" ratio "stream GB/s"
for round in $(seq "$rounds"); do
  ours=$("$bench" "$dir" "$gb" "$block_mb" "$depth")
  for mode in write read; do
    theirs=$(fio_gbps "$mode")
    mine=$(awk -v m="$mode" '$1 == m {print $6}' <<<"$ours")
    printf '%-6s %-8s %12.3f %12.3f %8.2f %14s\n' "$round" "$mode" "$mine" "$theirs" \
           "$(echo "$mine / $theirs" | bc -l)" "$(awk '/^stream/ {print $7}' <<<"$ours")"
  done
  rm -f "$dir/fio.dat"
done

deck=input/gpt2-124m.toml
[ -f data/corpus_train.bin ] || bash input/make_corpus.sh "$bin" > /dev/null
echo
echo "## step time: $deck at seq_len 128, 1 rank, zero.stage 1, 6 steps"
printf '%-6s %-6s %12s %14s %10s  %s\n' round offload "step (s)" "optimizer (s)" "arenas" "losses"
for round in $(seq "$rounds"); do for home in none cpu nvme; do
  out=$(mpirun -np 1 "$bin" train "$deck" --set model.seq_len=128 --set train.steps=6 \
        --set train.batch=1 --set train.micro_batch=1 --set train.eval_every=0 \
        --set train.eval_sequences=1 --set data.val='[]' --set checkpoint.dir='' \
        --set checkpoint.every=0 --set checkpoint.minutes=0 --set zero.stage=1 --set offload.optimizer=$home \
        --set offload.nvme_path="$dir" --set offload.block_mb="$block_mb" \
        --set offload.queue_depth="$depth" --set output.log_every=1 2>&1)
  step=$(median_step "$out")
  opt=$(awk '$1 == "optimizer" {print $3}' <<<"$out")
  arenas=$(grep -o 'arenas [0-9.]* [KMG]iB' <<<"$out" | cut -d' ' -f2-)
  losses=$(grep -E '^step ' <<<"$out" | sed -E 's/.*loss ([0-9.]+).*/\1/' | tr '\n' ' ')
  printf '%-6s %-6s %12s %14s %10s  %s\n' "$round" "$home" "$step" "$opt" "$arenas" "$losses"
done; done
[ "${6:-}" = "--headline" ] || exit 0
lr=${HEADLINE_LR:-2e-6}  # the first Adam steps move every weight by about lr: keep it small

echo
echo "## headline: the largest models run, 4 steps at lr $lr, one repeated 32-token window"
printf 'The quick brown fox jumps over the lazy dog.\n' > "$dir/window.txt"
"$bin" tokenize "$dir/window.txt" "$dir/window.bin" > /dev/null
ram=$(awk '/MemTotal/ {printf "%.0f", $2 * 1024}' /proc/meminfo)  # mawk's %d stops at 2^31
printf '%-7s %10s %16s %10s %10s %12s %9s  %s\n' offload params "fp32 state/RAM" arenas "peak RSS" "step (s)" swap losses
# name, zero stage, optimizer home, parameter home, layers, width, heads
for run in "none 1 none none 20 2048 16" "cpu 1 cpu none 20 2048 16" "nvme 1 nvme none 32 2880 20" \
           "params 3 nvme nvme 40 2880 20"; do
  read -r name stage home params_home layers width heads <<<"$run"
  [[ " ${HEADLINE_RUNS:-none cpu nvme params} " == *" $name "* ]] || continue
  free0=$(df -B1 --output=avail "$dir" | tail -1)
  mpirun -np 1 "$bin" train input/default.toml --set data.train="$dir/window.bin" \
        --set data.val='[]' --set model.layers="$layers" --set model.d_model="$width" \
        --set model.heads="$heads" --set model.seq_len=32 --set train.batch=1 \
        --set train.micro_batch=1 --set precision.dtype=bf16 --set precision.reduce_dtype=bf16 \
        --set zero.stage="$stage" --set train.steps=4 --set train.lr="$lr" --set train.min_lr=0 \
        --set train.warmup=0 --set train.eval_every=0 --set checkpoint.dir='' \
        --set checkpoint.every=0 --set checkpoint.minutes=0 --set output.log_every=1 \
        --set offload.optimizer="$home" --set offload.params="$params_home" \
        --set offload.nvme_path="$dir" --set offload.block_mb="$block_mb" \
        --set offload.queue_depth="$depth" > "$dir/headline.log" 2>&1 &
  pid=$! least=$free0
  while kill -0 "$pid" 2> /dev/null; do
    now=$(df -B1 --output=avail "$dir" | tail -1)
    if [ "$now" -lt "$least" ]; then least=$now; fi
    sleep 2
  done
  out=$(cat "$dir/headline.log")
  wait "$pid" || { echo "$out" | tail -5; echo "error: the $name run failed"; continue; }
  params=$(grep -o '| [0-9.]* M params' <<<"$out" | awk '{print $2}')
  printf '%-7s %9.0fM %16.2f %10s %10s %12s %8.1fG  %s\n' "$name" "$params" \
    "$(echo "$params * 1000000 * 16 / $ram" | bc -l)" \
    "$(grep -o 'arenas [0-9.]* [KMG]iB' <<<"$out" | cut -d' ' -f2-)" \
    "$(grep -o 'process RSS [0-9.]* [KMG]iB' <<<"$out" | cut -d' ' -f3-)" \
    "$(median_step "$out")" "$(echo "($free0 - $least) / 1000000000" | bc -l)" \
    "$(grep -E '^step ' <<<"$out" | sed -E 's/.*loss ([0-9.]+).*/\1/' | tr '\n' ' ')"
done
