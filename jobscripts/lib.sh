# Helpers shared by the jobscripts; sourced, not run. Needs only bash, awk, sed, date
# and the Slurm commands, so it works on compute nodes without Python.
#
# Slurm runs a copy of the batch script from its spool directory, so a jobscript
# cannot find this file next to itself: it sources $TRIDENT_ROOT/jobscripts/lib.sh,
# where TRIDENT_ROOT defaults to the directory the job was submitted from.
#
# Run naming: every run writes into RUNS_DIR/trident.<deck>.<layout>.N<ranks>.<date>/
#   <deck>   the deck's file name without .toml           e.g. default
#   <layout> tp<T>-pp<P>-dp<D> as the run resolves it     e.g. tp1-pp1-dp4
#   <ranks>  MPI ranks (= Slurm tasks)                     e.g. 4
#   <date>   job start, YYYYmmdd-HHMMSS (-2, -3, ... when two runs start in the same second)
# perf/collect_runs.py parses these names, so a study is a directory listing.

# deck_get FILE SECTION KEY: the value of `KEY = value` in [SECTION] of a TOML deck,
# quotes and trailing comments removed; empty when absent. Enough for the flat
# scalar keys the jobscripts need (train.steps, parallel.tp, parallel.pp).
deck_get() {
  awk -v want_sec="$2" -v want_key="$3" '
    /^[[:space:]]*\[/ { sec = $0; gsub(/^[[:space:]]*\[|\][[:space:]]*(#.*)?$/, "", sec); next }
    sec == want_sec {
      line = $0; sub(/#.*/, "", line)
      if (match(line, "^[[:space:]]*" want_key "[[:space:]]*=")) {
        val = substr(line, RLENGTH + 1); gsub(/^[[:space:]]+|[[:space:]]+$/, "", val); gsub(/"/, "", val)
        print val; exit
      }
    }' "$1"
}

# set_value KEY ARGS...: the value of the last `--set KEY=value` (or --set=KEY=value) in ARGS.
set_value() {
  local key=$1 val="" prev="" a
  shift
  for a in "$@"; do
    if [ "$prev" = --set ] && [ "${a%%=*}" = "$key" ]; then val=${a#*=}; fi
    case $a in --set="$key"=*) val=${a#--set="$key"=} ;; esac
    prev=$a
  done
  printf '%s' "${val//\"/}"
}

# trident_value SECTION.KEY DECK ARGS...: the override from ARGS, else the deck's value.
trident_value() {
  local key=$1 deck=$2 v
  shift 2
  v=$(set_value "$key" "$@")
  [ -n "$v" ] || v=$(deck_get "$deck" "${key%%.*}" "${key#*.}")
  printf '%s' "$v"
}

# trident_layout DECK RANKS ARGS...: tp<T>-pp<P>-dp<D>, resolved as trident does
# (dp defaults to ranks / (tp * pp)).
trident_layout() {
  local deck=$1 ranks=$2 tp pp dp
  shift 2
  tp=$(trident_value parallel.tp "$deck" "$@"); tp=${tp:-1}
  pp=$(trident_value parallel.pp "$deck" "$@"); pp=${pp:-1}
  dp=$(trident_value parallel.dp "$deck" "$@")
  [ -n "$dp" ] || dp=$(( ranks / (tp * pp) ))
  printf 'tp%s-pp%s-dp%s' "$tp" "$pp" "$dp"
}

# trident_make_run_dir RUNS_DIR DECK LAYOUT RANKS: creates a fresh run directory
# (mkdir is atomic, so jobs starting in the same second get distinct names) and prints it.
trident_make_run_dir() {
  local runs=$1 deck=$2 layout=$3 ranks=$4 base name n=1
  mkdir -p "$runs"
  base="trident.$(basename "$deck" .toml).$layout.N$ranks.$(date +%Y%m%d-%H%M%S)"
  name=$base
  until mkdir "$runs/$name" 2>/dev/null; do
    n=$((n + 1)); name="$base-$n"
    [ "$n" -lt 100 ] || { echo "error: cannot create a run directory under $runs" >&2; return 1; }
  done
  printf '%s/%s' "$(cd "$runs" && pwd)" "$name"
}

# max_metrics_step FILE...: the largest "step" recorded in JSONL metrics files (0 if none).
max_metrics_step() {
  local f s max=0
  for f in "$@"; do
    [ -s "$f" ] || continue
    s=$(sed -n 's/.*"step":[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$f" | sort -n | tail -n 1)
    [ -n "$s" ] && [ "$s" -gt "$max" ] && max=$s
  done
  echo "$max"
}

# trident_setup DECK ARGS...: the common start of every jobscript. Checks the binary
# and the deck, exports what srun needs, and sets DECK, RANKS, LAYOUT.
trident_setup() {
  TRIDENT_BIN=${TRIDENT_BIN:-$TRIDENT_ROOT/build/src/trident}
  RUNS_DIR=${RUNS_DIR:-$TRIDENT_ROOT/runs}
  DECK=${1:-}
  [ -n "$DECK" ] || { echo "error: no deck; usage: sbatch JOBSCRIPT DECK.toml [trident train options]" >&2; exit 2; }
  shift
  [ -f "$DECK" ] || { echo "error: deck '$DECK' not found (relative paths start at $PWD)" >&2; exit 2; }
  [ -x "$TRIDENT_BIN" ] || { echo "error: TRIDENT_BIN=$TRIDENT_BIN is not an executable; build first or set TRIDENT_BIN" >&2; exit 2; }
  RANKS=${SLURM_NTASKS:?not inside a Slurm job (SLURM_NTASKS is unset)}
  LAYOUT=$(trident_layout "$DECK" "$RANKS" "$@")
  # Since Slurm 22.05, srun no longer inherits --cpus-per-task from the job: pass it on.
  if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK; fi
}

# trident_write_run_info RUN_DIR DECK ARGS...: what ran, where, for the collector and for humans.
trident_write_run_info() {
  local dir=$1 deck=$2
  shift 2
  {
    echo "job_id=${SLURM_JOB_ID:-}"
    echo "job_name=${SLURM_JOB_NAME:-}"
    echo "nodes=${SLURM_JOB_NUM_NODES:-1}"
    echo "nodelist=${SLURM_JOB_NODELIST:-}"
    echo "ranks=$RANKS"
    echo "ranks_per_node=${SLURM_NTASKS_PER_NODE:-}"
    echo "cpus_per_task=${SLURM_CPUS_PER_TASK:-}"
    echo "gpus_per_node=${SLURM_GPUS_PER_NODE:-}"
    echo "deck=$deck"
    echo "layout=$LAYOUT"
    echo "binary=$TRIDENT_BIN"
    printf 'args='; printf '%q ' "$@"; echo
    echo "started=$(date -Iseconds)"
    echo "scaling=${TRIDENT_SCALING:-}"
  } > "$dir/run.env"
}

# trident_check_one_rank_per_gpu: warn when ranks per node and GPUs per node differ
# (a rank without its own GPU would share one; a GPU without a rank idles).
trident_check_one_rank_per_gpu() {
  local gpn=${SLURM_GPUS_PER_NODE:-} tpn=${SLURM_NTASKS_PER_NODE:-}
  gpn=${gpn##*:}  # "a100:4" -> "4"
  if [ -n "$gpn" ] && [ -n "$tpn" ] && [ "$gpn" != "$tpn" ]; then
    echo "warning: $tpn ranks per node but $gpn GPUs per node; trident wants one rank per GPU" >&2
  fi
}

# submit_study strong|weak DECK [trident train options]: submits one job per (tp, ranks)
# of a scaling study, then a job that collects the table and plot once they are all
# over. Knobs are documented in strong_scaling.sh and weak_scaling.sh.
submit_study() {
  local mode=$1 deck=${2:-}
  [ -n "$deck" ] || { echo "usage: ${0##*/} DECK.toml [trident train options]" >&2; return 2; }
  shift 2
  [ -f "$deck" ] || { echo "error: deck '$deck' not found" >&2; return 2; }
  local root=${TRIDENT_ROOT:-$PWD}
  local jobscript=${JOBSCRIPT:-$root/jobscripts/train_cpu.sbatch}
  local ranks_list=${RANKS:-1 2 4 8} tp_list=${TP:-1} rpn=${RANKS_PER_NODE:-4}
  local gpr=${GPUS_PER_RANK:-0} steps=${STEPS:-50}
  local study=${STUDY_DIR:-$root/runs/study.$mode.$(basename "$deck" .toml).$(date +%Y%m%d-%H%M%S)}
  local name=${JOB_NAME:-trident-$mode}
  [ -f "$jobscript" ] || { echo "error: JOBSCRIPT=$jobscript not found" >&2; return 2; }
  mkdir -p "$study"
  study=$(cd "$study" && pwd)

  # Batch sizes. strong: the global batch is fixed (BATCH, default the deck's) and so is
  # the micro-batch (MICRO, default BATCH / the largest dp), so every run does the same
  # work per forward pass. weak: each data-parallel rank keeps BATCH_PER_DP sequences per
  # step (default the deck's micro_batch, else 4), so the global batch grows with dp.
  local tp ranks dp max_dp=1 batch micro per_dp
  for tp in $tp_list; do for ranks in $ranks_list; do
    [ $((ranks % tp)) -eq 0 ] && [ $((ranks / tp)) -gt "$max_dp" ] && max_dp=$((ranks / tp))
  done; done
  if [ "$mode" = strong ]; then
    batch=${BATCH:-$(trident_value train.batch "$deck" "$@")}
    batch=${batch:-8}
    micro=${MICRO:-$((batch / max_dp))}
    [ "$micro" -ge 1 ] || { echo "error: BATCH=$batch is smaller than the largest dp ($max_dp); raise BATCH" >&2; return 2; }
  else
    per_dp=${BATCH_PER_DP:-$(trident_value train.micro_batch "$deck" "$@")}
    per_dp=${per_dp:-4}
    micro=${MICRO:-$per_dp}
  fi

  {
    echo "scaling=$mode"; echo "deck=$deck"; echo "jobscript=$jobscript"
    echo "ranks=$ranks_list"; echo "tp=$tp_list"; echo "ranks_per_node=$rpn"; echo "steps=$steps"
    echo "batch=${batch:-}"; echo "batch_per_dp=${per_dp:-}"; echo "micro_batch=$micro"
    printf 'args='; printf '%q ' "$@"; echo
    echo "submitted=$(date -Iseconds)"
  } > "$study/study.env"

  local ids=() nodes tpn id opts
  for tp in $tp_list; do
    for ranks in $ranks_list; do
      if [ "$tp" -gt "$ranks" ] || [ $((ranks % tp)) -ne 0 ]; then
        echo "skip: tp=$tp does not divide $ranks ranks"; continue
      fi
      dp=$((ranks / tp))
      [ "$mode" = strong ] || batch=$((per_dp * dp))
      if [ $((batch % (dp * micro))) -ne 0 ]; then
        echo "skip: batch $batch is not a multiple of dp*micro_batch = $dp*$micro at $ranks ranks (tp=$tp)"; continue
      fi
      if [ "$ranks" -gt "$rpn" ] && [ $((ranks % rpn)) -ne 0 ]; then
        echo "skip: $ranks ranks do not fill nodes of RANKS_PER_NODE=$rpn"; continue
      fi
      nodes=$(( (ranks + rpn - 1) / rpn ))
      tpn=$(( ranks < rpn ? ranks : rpn ))
      opts=(--parsable --job-name="$name" --nodes="$nodes" --ntasks="$ranks" --ntasks-per-node="$tpn"
            --export="ALL,RUNS_DIR=$study,TRIDENT_SCALING=$mode,TRIDENT_ROOT=$root")
      [ "$gpr" -eq 0 ] || opts+=(--gpus-per-node=$((tpn * gpr)))
      [ "${EXCLUSIVE:-1}" = 0 ] || opts+=(--exclusive)
      # shellcheck disable=SC2206  # SBATCH_ARGS is a list of options, split on purpose
      opts+=(${SBATCH_ARGS:-})
      id=$(sbatch "${opts[@]}" "$jobscript" "$deck" "$@" --set parallel.tp="$tp" \
             --set train.steps="$steps" --set train.batch="$batch" --set train.micro_batch="$micro")
      id=${id%%;*}
      ids+=("$id")
      echo "submitted job $id: $ranks ranks on $nodes node(s), tp$tp-pp1-dp$dp, batch $batch, micro_batch $micro"
    done
  done
  [ ${#ids[@]} -gt 0 ] || { echo "error: nothing to submit" >&2; return 2; }
  echo "jobs=${ids[*]}" >> "$study/study.env"

  local collect="${PYTHON:-python3} $root/perf/collect_runs.py --mode $mode $study"
  if [ "${COLLECT:-1}" != 0 ]; then
    local deps
    deps=$(IFS=:; echo "${ids[*]}")
    # shellcheck disable=SC2086  # SBATCH_ARGS is a list of options, split on purpose
    id=$(sbatch --parsable --job-name="$name-collect" --dependency="afterany:$deps" --ntasks=1 \
           --output="$study/collect-%j.out" ${SBATCH_ARGS:-} --wrap="$collect")
    id=${id%%;*}
    echo "collect_job=$id" >> "$study/study.env"
    echo "submitted job $id: collects the table and plot when the runs are over ($study/collect-$id.out)"
  fi
  echo "study: $study"
  echo "table: $study/scaling.csv, $study/scaling.yaml; plot: $study/scaling.png"
  echo "collect again any time: $collect"
}
