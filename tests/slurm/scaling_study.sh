#!/usr/bin/env bash
# A tiny strong-scaling study as users run one: jobscripts/strong_scaling.sh submits
# 1, 2 and 4 ranks and a collecting job; the table (CSV, YAML) and the plot (PNG) appear.
#   usage: scaling_study.sh CLUSTER_DIR TRIDENT_BINARY FIXTURE_DIR WORK_DIR
set -euo pipefail
CLUSTER=$1 bin=$2 fixtures=$3 work=$4
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/tests/slurm/common.sh"
rm -rf "$work" && mkdir -p "$work" && cd "$work"
export TRIDENT_ROOT=$root TRIDENT_BIN=$bin PYTHON=/usr/bin/python3
study=$work/study

RANKS="1 2 4" STEPS=15 STUDY_DIR=$study "$root/jobscripts/strong_scaling.sh" "$fixtures/tiny.toml" \
  --set model.d_model=64 --set train.eval_every=0 --set data.val='[]' | tee submit.out
collect=$(sed -n 's/^collect_job=//p' "$study/study.env")
mapfile -t jobs < <(sed -n 's/^jobs=//p' "$study/study.env" | tr ' ' '\n')
[ ${#jobs[@]} = 3 ] || fail "expected 3 run jobs, got: ${jobs[*]}"
[ -n "$collect" ] || fail "no collecting job"
wait_jobs 240 "${jobs[@]}" "$collect"
echo "--- collecting job's log"; cat "$study/collect-$collect.out" || fail "no log from the collecting job"
for id in "${jobs[@]}" "$collect"; do
  [ "$(job_field "$id" ExitCode)" = 0:0 ] || fail "job $id exited $(job_field "$id" ExitCode)"
done

for n in 1 2 4; do
  ls -d "$study"/trident.tiny.tp1-pp1-dp$n.N$n.* >/dev/null 2>&1 || fail "no run directory for $n ranks"
done
/usr/bin/python3 - "$study" <<'PY'
import csv, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(d + "/scaling.csv")))
assert [int(r["ranks"]) for r in rows] == [1, 2, 4], [r["ranks"] for r in rows]
for r in rows:
    assert r["status"] == "ok", r
    tps, n = float(r["tokens_per_s"]), int(r["ranks"])
    assert abs(float(r["tokens_per_s_per_rank"]) - tps / n) <= 0.1 + 1e-3 * tps / n, r
    s = tps / float(rows[0]["tokens_per_s"])
    assert abs(float(r["speedup"]) - s) < 1e-3 and abs(float(r["efficiency"]) - s / n) < 1e-3, r
    assert r["tokens_per_step"] == rows[0]["tokens_per_step"], "strong scaling keeps the global batch"
y = open(d + "/scaling.yaml").read()
assert y.startswith("# Trident scaling table") and "mode: strong" in y and y.count("  - run: ") == 3, y[:300]
png = open(d + "/scaling.png", "rb").read()
assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000, "scaling.png is not a PNG"
print("ok: 3 runs; speedup " + ", ".join("%s@%s" % (r["speedup"], r["ranks"]) for r in rows)
      + "; scaling.csv, scaling.yaml, scaling.png (%d bytes)" % len(png))
PY
