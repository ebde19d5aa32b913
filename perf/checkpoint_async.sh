#!/usr/bin/env bash
# Asynchronous checkpoints (checkpoint.async) against synchronous ones, side by
# side in one run: the same training without checkpoints, saving synchronously
# every K steps and saving asynchronously every K steps. GPT-2 124M (a save is
# 1.49 GB: parameters and both Adam moments) under ZeRO-1 at dp 2 in fp32, at a
# short sequence so a step takes seconds, not minutes, on a small machine.
# Per periodic save it prints the synchronous save's time, the training loop's
# time blocked by an asynchronous one (its own report: creating the file,
# waiting or copying before the optimizer step, completing it) and each mode's
# extra wall time over the run without checkpoints, with the ratios the issue
# sets (blocked <= 5% and extra <= 15% of the synchronous save's time), the
# CPU time the drain's two threads used, and where each mode's extra went on
# the machine as a whole (user, kernel, interrupt, steal and idle seconds per
# save over the run without checkpoints, from /proc/stat).
# MODEL=1b: a GPT-2-shaped model of 1.01 B parameters (18 layers, d_model
# 2048, 16 heads) under ZeRO-3 at dp 2 with the Adam moments offloaded to a
# swap file (offload.optimizer = "nvme"), so it fits a 23 GiB machine: fp32
# parameters and gradients sharded (1.88 GiB each a rank) and the moments
# (3.76 GiB a rank) on disk; `trident estimate` puts a rank's RSS at 6.46 GiB
# with the async staging at the default staging_mb (13 GiB for both), against
# 24.8 GiB for ZeRO-1 and 18.4 GiB for ZeRO-3 with the moments in memory (12.41
# and 9.20 GiB a rank, before staging and page cache for the 12 GB saves).
# It also measures what the issue adds: an asynchronous save reads the
# offloaded moments through the swap's own path in waves of staging_mb. A
# save is 12 GB (parameters and both moments); checkpoint.keep = 1.
# MODEL=tiny: the 1b run's layout at 2 layers of 128, to check the script.
# The save after the last step is synchronous in both modes: its time is taken
# out of the extra wall time. A VM's speed drifts, so the modes run in turn,
# REPEATS times (default 2), and the wall times are medians; each mode's extra is
# also paired with the run without checkpoints of its own repeat.
#   usage: [REPEATS=N] [MODEL=124m|1b|tiny] perf/checkpoint_async.sh [STEPS] [EVERY] [DIR] [SEQ_LEN] [BATCH] [MODE...]
#   MODE: none sync async (default all three; staging_mb=N adds an async run with it)
set -euo pipefail
steps=${1:-16} every=${2:-4} dir=${3:-/tmp/trident_ckpt_async} seq=${4:-128} batch=${5:-4}
shift $(( $# < 5 ? $# : 5 ))
modes=("${@:-none sync async}")
read -r -a modes <<<"${modes[*]}"
bin=${TRIDENT_BUILD:-build}/src/trident
here=$(cd "$(dirname "$0")" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$bin" ] || { echo "error: $bin not found; build first (cmake --build build)"; exit 2; }
mkdir -p "$dir"
data="$dir/train.bin"
if [ ! -s "$data" ]; then  # any text will do: the speed does not depend on it
  cat /usr/share/common-licenses/* > "$dir/text.txt"
  "$bin" tokenize "$dir/text.txt" "$data" > /dev/null
fi
cores=$(nproc)
placement=(--map-by "slot:PE=$(( cores >= 2 ? cores / 2 : 1 ))" --bind-to core)
[ "$cores" -ge 2 ] || placement=(--oversubscribe --bind-to none)
common=(--set "data.train=\"$data\"" --set "data.val=[]" --set train.steps="$steps"
        --set model.seq_len="$seq" --set train.batch="$batch" --set train.micro_batch=1
        --set train.eval_every=0 --set train.warmup=1 --set zero.stage="$([ "${MODEL:-124m}" = 124m ] && echo 1 || echo 3)" --set output.log_every=1
        --set system.threads=$(( cores >= 2 ? cores / 2 : 1 ))
        --set checkpoint.minutes=0 --set checkpoint.every=0 --set "checkpoint.dir=\"\"")
case ${MODEL:-124m} in
  124m) ;;
  1b|tiny)
    [ "${MODEL}" = 1b ] && shape=(--set model.layers=18 --set model.d_model=2048 --set model.heads=16)
    [ "${MODEL}" = tiny ] && shape=(--set model.layers=2 --set model.d_model=128 --set model.heads=4)
    mkdir -p "$dir/swap"
    common+=("${shape[@]}" --set offload.optimizer=nvme
             --set "offload.nvme_path=\"$dir/swap\"" --set checkpoint.keep=1) ;;
  *) echo "error: MODEL=${MODEL}: choose 124m, 1b or tiny"; exit 2 ;;
esac

echo "model: ${MODEL:-124m}"
echo "machine: $cores cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/ {print $2}') GiB"
echo "disk: $(df -hT "$dir" | awk 'NR==2 {print $1, $2, $3}') at $dir"
echo "command: mpirun -np 2 ${placement[*]} $bin train input/gpt2-124m.toml ${common[*]} [--set checkpoint.dir=... --set checkpoint.every=$every [--set checkpoint.async=true]]"
echo "load: $(uptime | sed 's/.*load/load/')"

repeats=${REPEATS:-2}
run() {  # MODE REPEAT -> $dir/MODE.REPEAT.out
  local mode=$1 r=$2 sets=()
  rm -rf "$dir/ck"
  case $mode in
    none) ;;
    sync) sets=(--set "checkpoint.dir=\"$dir/ck\"" --set checkpoint.every="$every") ;;
    async) sets=(--set "checkpoint.dir=\"$dir/ck\"" --set checkpoint.every="$every" --set checkpoint.async=true) ;;
    staging_mb=*) sets=(--set "checkpoint.dir=\"$dir/ck\"" --set checkpoint.every="$every" --set checkpoint.async=true
                        --set "checkpoint.$mode") ;;
  esac
  sync; [ -w /proc/sys/vm/drop_caches ] && echo 3 > /proc/sys/vm/drop_caches; sleep 3
  head -1 /proc/stat > "$dir/$mode.$r.stat"  # the machine's CPU time by kind, before and after
  mpirun -np 2 "${placement[@]}" "$bin" train "$here/../input/gpt2-124m.toml" "${common[@]}" "${sets[@]}" \
    --metrics "$dir/$mode.$r.jsonl" \
    > "$dir/$mode.$r.out" 2>&1 || { tail -20 "$dir/$mode.$r.out"; exit 1; }
  head -1 /proc/stat >> "$dir/$mode.$r.stat"
}
for r in $(seq 1 "$repeats"); do for m in "${modes[@]}"; do run "$m" "$r"; done; done
rm -rf "$dir/ck"

python3 - "$dir" "$steps" "$repeats" "${modes[@]}" <<'PY'
import re, statistics, sys
d, steps, repeats, modes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
def parse_one(path):
    text = open(path).read()
    wall = float(re.search(r"^  total +[0-9.]+ +[0-9.]+ +([0-9.]+)", text, re.M).group(1))
    saves = re.findall(r"^checkpoint: step (\d+) -> .*? in ([0-9.]+) s, ([0-9.]+) GB/s(?:; in the background, training held up ([0-9.]+) s: ([0-9.]+) starting, ([0-9.]+) at optimizer steps, ([0-9.]+) waiting, ([0-9.]+) completing(?:; [^;]*? written in place)?(?:; the drain's thread used ([0-9.]+) s of CPU(?:, its writer's ([0-9.]+))?)?)?", text, re.M)
    waited = [float(x) for x in re.findall(r"^checkpoint: waited ([0-9.]+) s", text, re.M)]
    final = [float(s[1]) for s in saves if int(s[0]) == steps]
    periodic = [s for s in saves if int(s[0]) != steps]
    return dict(wall=wall, final=sum(final), periodic=periodic, waited=waited)
def cpu_kinds(path):  # /proc/stat's cpu line before and after: seconds by kind
    before, after = ([int(x) for x in line.split()[1:9]] for line in open(path))
    kinds = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    got = {k: (a - b) / 100 for k, a, b in zip(kinds, after, before)}  # USER_HZ
    return {"user": got["user"] + got["nice"], "system": got["system"],
            "irq": got["irq"] + got["softirq"], "steal": got["steal"],
            "idle": got["idle"] + got["iowait"]}
def parse(mode):  # the repeats' periodic saves together, the median of their walls
    rs = [parse_one(f"{d}/{mode}.{r}.out") for r in range(1, repeats + 1)]
    cpu = [cpu_kinds(f"{d}/{mode}.{r}.stat") for r in range(1, repeats + 1)]
    return dict(wall=statistics.median(r["wall"] - r["final"] for r in rs), final=0,
                periodic=[s for r in rs for s in r["periodic"]], waited=[w for r in rs for w in r["waited"]],
                n=len(rs[0]["periodic"]), walls=[round(r["wall"] - r["final"], 1) for r in rs],
                wall_list=[r["wall"] - r["final"] for r in rs],
                cpu={k: statistics.median(c[k] for c in cpu) for k in cpu[0]})
runs = {m: parse(m) for m in modes}
base = runs.get("none")
sync = runs.get("sync")
sync_save = sum(float(s[1]) for s in sync["periodic"]) / len(sync["periodic"]) if sync and sync["periodic"] else None
print(f"{'run':<16} {'loop s':>8} {'saves':>5} {'save s':>7} {'blocked s':>9} {'extra s':>8} {'blocked/sync':>12} {'extra/sync':>10}  loop s per repeat")
for m, r in runs.items():
    k = len(r["periodic"])
    save = sum(float(s[1]) for s in r["periodic"]) / k if k else 0
    blocked = (sum(float(s[3]) for s in r["periodic"]) / k if r["periodic"][0][3] else save) if k else 0
    extra = (r["wall"] - base["wall"]) / r["n"] if base and r["n"] else 0
    ratio = lambda x: f"{x / sync_save:.1%}" if sync_save and k else "-"
    print(f"{m:<16} {r['wall']:8.2f} {r['n']:5d} {save:7.2f} {blocked:9.3f} {extra:8.2f} {ratio(blocked):>12} {ratio(extra):>10}  {r['walls']}")
    if base and r is not base and r["n"]:
        # Paired with the same repeat's run without checkpoints, minutes apart:
        # the machine's drift over the whole benchmark cancels more than in
        # the difference of the medians above.
        paired = [(w - b) / r["n"] for w, b in zip(r["wall_list"], base["wall_list"])]
        med = statistics.median(paired)
        print(f"  {m}: extra per save against the same repeat's run without checkpoints: " +
              ", ".join(f"{p:.2f}" for p in paired) + f" s; median {med:.2f} s" +
              (f" = {med / sync_save:.1%} of the synchronous save" if sync_save else ""))
    if k and r["periodic"][0][3]:
        parts = [sum(float(s[i]) for s in r["periodic"]) / k for i in range(4, 8)]
        print(f"  {m}: held up per save {parts[0]:.3f} s starting, {parts[1]:.3f} at optimizer steps, "
              f"{parts[2]:.3f} waiting for the previous save, {parts[3]:.3f} completing")
        if r["periodic"][0][8]:
            drain = sum(float(s[8]) for s in r["periodic"]) / k
            writer = sum(float(s[9] or 0) for s in r["periodic"]) / k
            # With every core computing, the run loses at least the CPU time of
            # the save's threads (copying and summing; the writer's system calls).
            print(f"  {m}: per save (rank 0) the drain's thread used {drain:.3f} s of CPU, its "
                  f"writer's {writer:.3f}" + (f"; together {(drain + writer) / sync_save:.1%} of the "
                                             "synchronous save" if sync_save else ""))
    if base and r is not base and r["n"]:
        # Where the extra went, per save against the run without checkpoints:
        # the machine's kernel, interrupt, steal and idle seconds (medians).
        extra_cpu = {k: (r["cpu"][k] - base["cpu"][k]) / r["n"] for k in r["cpu"]}
        print(f"  {m}: the machine's CPU per save over none: " +
              ", ".join(f"{k} {v:+.3f} s" for k, v in extra_cpu.items()))
    if r["waited"]:
        print(f"  {m}: waited for the previous save {len(r['waited'])} times, {sum(r['waited']):.2f} s in all")
PY
