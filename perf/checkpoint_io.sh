#!/usr/bin/env bash
# Checkpoint write and read bandwidth against fio's sequential write and read of
# the same number of bytes on the same disk, in the same run; prints both and
# the ratio (target >= 0.8).
#   usage: perf/checkpoint_io.sh [RANKS] [DIR] [REPEATS] [OWNER]
# Trident side: build/perf/bench_checkpoint saves and loads the training state of
# GPT-2 124M (parameters and both Adam moments: 1.49 GB) through the trainer's
# own save_checkpoint / load_checkpoint: temporary file, parallel HDF5, checksums,
# flush, rename, `latest`. OWNER root: every rank holds everything (data
# parallelism: the replicas share the writing and the reading); spread:
# every rank holds and writes 1/RANKS of each tensor (ZeRO).
# fio side: one job, 1 MiB blocks, write ended by fsync (as a checkpoint is),
# both through the page cache and direct (O_DIRECT, as trident moves its bulk,
# with as many requests in flight): the ratio is against the faster of the two,
# the disk's own speed either way.
# The page cache is dropped before every write and read when this runs as root,
# so reads come from the disk. A virtual disk's speed drifts from minute to
# minute, so each trident transfer runs right next to fio's direct one (in
# alternating order), each repeat gives its own ratio, and the figure is the
# median of the REPEATS ratios (GB/s columns: medians too). An even REPEATS
# gives each order as often: the first transfer after the last repeat's
# files were deleted runs slower on a disk mounted with online discard.
set -euo pipefail
ranks=${1:-1} dir=${2:-/tmp/trident_ckpt_bench} repeats=${3:-4} owner=${4:-root}
bench=${TRIDENT_BUILD:-build}/perf/bench_checkpoint
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$bench" ] || { echo "error: $bench not found; build first (cmake --build build)"; exit 2; }
command -v fio > /dev/null || { echo "error: fio not found (Debian: apt-get install fio)"; exit 2; }
mkdir -p "$dir"
# Each rank gets its share of the node's cores, as srun --cpus-per-task gives
# it (mpirun's default binds one rank to one core, however many are free).
cores=$(nproc)
if [ "$ranks" -le "$cores" ]; then
  placement=(--map-by "slot:PE=$((cores / ranks))" --bind-to core)
else
  placement=(--oversubscribe --bind-to none)
fi

drop_caches() {  # and give the device time to finish the last writes (VM disks lag)
  sync
  if [ -w /proc/sys/vm/drop_caches ]; then echo 3 > /proc/sys/vm/drop_caches; fi
  sleep "${SETTLE_S:-3}"
}
fio_gbps() {  # fio JSON -> GB/s of the one job's write or read
  python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0][sys.argv[1]]; print(j["bw_bytes"]/1e9)' "$1"
}
median() {  # of an even count: the mean of the middle two
  printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (a[int((NR+1)/2)] + a[int(NR/2)+1]) / 2}'
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/ {print $2}') GiB"
echo "disk: $(df -hT "$dir" | awk 'NR==2 {print $1, $2, $3}') at $dir"
echo "versions: $(mpirun --version | head -1), HDF5 $(h5dump --version 2>/dev/null | awk '{print $NF}'), $(fio --version), kernel $(uname -r)"
[ -w /proc/sys/vm/drop_caches ] || echo "note: not root, page cache not dropped: reads may come from memory"
echo "command: mpirun -np $ranks ${placement[*]} $bench write|read $dir/ck --owner $owner; fio --rw=write|read --bs=1M --end_fsync=1 [--direct=1 --ioengine=io_uring --iodepth=${FIO_DEPTH:-8}]"
echo "load: $(uptime | sed 's/.*load/load/')"

tw=() tr=() fw=() fr=() dw=() dr=() rw=() rr=()
trident_run() {  # write|read -> GB/s
  mpirun -np "$ranks" "${placement[@]}" "$bench" "$1" "$dir/ck" --owner "$owner" | awk '{print $6}'
}
# Direct I/O with FIO_DEPTH (default 8) requests in flight through io_uring, as
# Trident keeps 8 buffers in flight; buffered I/O one request at a time (the
# page cache does the queueing).
fio_run() {  # RW DIRECT -> GB/s
  local engine=(--ioengine=psync)
  [ "$2" = 1 ] && engine=(--ioengine=io_uring --iodepth="${FIO_DEPTH:-8}")
  fio --name="$1" --filename="$dir/fio.dat" --rw="$1" --bs=1M --size="$bytes" --direct="$2" \
      "${engine[@]}" --end_fsync=1 --output-format=json | fio_gbps "$1"
}
ratio() { python3 -c 'import sys; t, a, b = map(float, sys.argv[1:]); print(f"{t / max(a, b):.2f}")' "$@"; }
# A first write learns the checkpoint's size for fio (and warms the disk).
rm -rf "$dir/ck"
drop_caches
bytes=$(mpirun -np "$ranks" "${placement[@]}" "$bench" write "$dir/ck" --owner "$owner" | awk '{print $2}')
rm -rf "$dir/ck"
for r in $(seq 1 "$repeats"); do
  rm -rf "$dir/ck" "$dir/fio.dat"
  # Each pair back to back, alternating which goes first.
  for op in write read; do
    if [ $((r % 2)) = 1 ]; then
      drop_caches; t=$(trident_run "$op"); drop_caches; d=$(fio_run "$op" 1)
    else
      drop_caches; d=$(fio_run "$op" 1); drop_caches; t=$(trident_run "$op")
    fi
    if [ "$op" = write ]; then tw+=("$t") dw+=("$d"); else tr+=("$t") dr+=("$d"); fi
  done
  rm -rf "$dir/ck" "$dir/fio.dat"
  drop_caches; fw+=("$(fio_run write 0)")
  drop_caches; fr+=("$(fio_run read 0)")
  rm -f "$dir/fio.dat"
  rw+=("$(ratio "${tw[-1]}" "${dw[-1]}" "${fw[-1]}")")
  rr+=("$(ratio "${tr[-1]}" "${dr[-1]}" "${fr[-1]}")")
  printf 'repeat %d: trident write %.2f read %.2f | fio direct write %.2f read %.2f | fio write %.2f read %.2f GB/s | ratio write %s read %s | %s\n' \
    "$r" "${tw[-1]}" "${tr[-1]}" "${dw[-1]}" "${dr[-1]}" "${fw[-1]}" "${fr[-1]}" "${rw[-1]}" "${rr[-1]}" \
    "$(uptime | sed 's/.*load/load/')"
done
rmdir "$dir" 2>/dev/null || true
python3 - "$bytes" "$ranks" "$owner" "$(median "${tw[@]}")" "$(median "${tr[@]}")" \
  "$(median "${fw[@]}")" "$(median "${fr[@]}")" "$(median "${dw[@]}")" "$(median "${dr[@]}")" \
  "$(median "${rw[@]}")" "$(median "${rr[@]}")" <<'PY'
import sys
b, ranks, owner = int(sys.argv[1]), sys.argv[2], sys.argv[3]
tw, tr, fw, fr, dw, dr, rw, rr = map(float, sys.argv[4:12])
print(f"\ncheckpoint of {b / 1e9:.2f} GB, {ranks} rank(s), owner {owner} (medians)")
print(f"{'':8}{'trident GB/s':>14}{'fio GB/s':>10}{'fio direct':>12}{'ratio':>8}")
print(f"{'write':8}{tw:>14.2f}{fw:>10.2f}{dw:>12.2f}{rw:>8.2f}")
print(f"{'read':8}{tr:>14.2f}{fr:>10.2f}{dr:>12.2f}{rr:>8.2f}")
print("ratio: the median over repeats of trident / the faster fio of the same repeat")
PY
