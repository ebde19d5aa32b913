#!/usr/bin/env python3
"""Helpers for perf/plan_vs_measured.sh (stdlib only).

  sets LAYOUT        the `--set` arguments that train a planner layout string
  unmeasured TOP DIR the planner's top-1 layout (from `plan --top 1 --json`), if DIR lacks a run of it
  table DIR          predicted vs measured per layout, then top-1 vs fastest
"""
import glob
import json
import os
import re
import statistics
import sys

TIME_TOL, MEMORY_TOL = 0.20, 0.10
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def layout_sets(layout):
    """The deck keys `trident plan --layout` sets, as `trident train --set` arguments."""
    keys = {"tp": "parallel.tp", "pp": "parallel.pp", "dp": "parallel.dp",
            "v": "parallel.virtual_stages", "mb": "train.micro_batch", "zero": "zero.stage",
            "sp": "parallel.sequence_parallel", "recompute": "train.recompute",
            "schedule": "parallel.schedule"}
    fields = dict(item.split("=", 1) for item in layout.split(","))
    out = []
    for key, value in fields.items():
        if key == "offload":  # none, nvme, cpu or cpu:RATIO
            home, _, ratio = value.partition(":")
            out.append(f'offload.optimizer="{home}"')
            if ratio:
                out.append(f"offload.ratio={ratio}")
            continue
        if key == "sp":
            value = "true" if value == "1" else "false"
        if key == "recompute" or key == "schedule":
            value = f'"{value}"'
        out.append(f"{keys[key]}={value}")
    if int(fields.get("v", "1")) > 1 and "schedule" not in fields:
        out.append('parallel.schedule="interleaved"')
    return out


def runs(out_dir):
    for run_dir in sorted(glob.glob(os.path.join(out_dir, "run-*"))):
        with open(os.path.join(run_dir, "plan.json")) as f:
            yield run_dir, json.load(f)


def same_layout(a, b):
    return a["layout"] == b["layout"] and a["schedule"] == b["schedule"]


def unmeasured(top_file, out_dir):
    with open(top_file) as f:
        top = json.load(f)
    best = top["best"][0]
    if any(plan["gpus"] == top["gpus"] and same_layout(plan["prediction"], best)
           for _, plan in runs(out_dir)):
        return ""
    return best["layout"] + f",schedule={best['schedule']}" * (best["pp"] > 1)


def measured(run_dir):
    """Median step ms after the first step (warm-up), and the arena peak (max over ranks)."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        steps = [json.loads(line) for line in f if line.strip()]
    step_ms = statistics.median(s["step_ms"] for s in steps[1:])
    with open(os.path.join(run_dir, "train.log")) as f:
        m = re.search(r"arenas ([\d.]+) (B|KiB|MiB|GiB)", f.read())
    return step_ms, float(m.group(1)) * UNITS[m.group(2)]


def table(out_dir):
    rows = []
    for run_dir, plan in runs(out_dir):
        p = plan["prediction"]
        ms, mem = measured(run_dir)
        rows.append({"ranks": plan["gpus"], "layout": p["layout"], "schedule": p["schedule"],
                     "pred_ms": 1e3 * p["step_s"], "meas_ms": ms,
                     "pred_mem": p["memory_bytes"], "meas_mem": mem})
    rows.sort(key=lambda r: (r["ranks"], r["meas_ms"]))
    mib = float(1 << 20)
    print("| ranks | layout | schedule | step ms pred / meas | ratio | peak MiB pred / meas "
          "| ratio | time ±20% | memory ±10% |")
    print("|---|---|---|---|---|---|---|---|---|")
    passed = 0
    for r in rows:
        t, m = r["pred_ms"] / r["meas_ms"], r["pred_mem"] / r["meas_mem"]
        ok_t, ok_m = abs(t - 1) <= TIME_TOL, abs(m - 1) <= MEMORY_TOL
        passed += ok_t and ok_m
        print(f"| {r['ranks']} | {r['layout']} | {r['schedule']} | {r['pred_ms']:.0f} / "
              f"{r['meas_ms']:.0f} | {t:.2f} | {r['pred_mem'] / mib:.1f} / "
              f"{r['meas_mem'] / mib:.1f} | {m:.2f} | {'pass' if ok_t else 'FAIL'} | "
              f"{'pass' if ok_m else 'FAIL'} |")
    print(f"\n{passed} of {len(rows)} layouts within both tolerances\n")
    print("| ranks | planner top-1 | its measured ms | fastest measured | its ms | top-1 / fastest |")
    print("|---|---|---|---|---|---|")
    for top_file in sorted(glob.glob(os.path.join(out_dir, "top1-*.json"))):
        with open(top_file) as f:
            top = json.load(f)
        ranks, layout = top["gpus"], top["best"][0]["layout"]
        same = [r for r in rows if r["ranks"] == ranks]
        mine = [r for r in same if same_layout(r, top["best"][0])]
        fastest = min(same, key=lambda r: r["meas_ms"])
        if not mine:
            print(f"| {ranks} | {layout} | not measured | {fastest['layout']} | "
                  f"{fastest['meas_ms']:.0f} | - |")
            continue
        ratio = mine[0]["meas_ms"] / fastest["meas_ms"]
        print(f"| {ranks} | {layout} | {mine[0]['meas_ms']:.0f} | {fastest['layout']} | "
              f"{fastest['meas_ms']:.0f} | {ratio:.2f} {'pass' if ratio <= 1.10 else 'FAIL'} |")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "sets":
        print("\n".join(layout_sets(sys.argv[2])))
    elif len(sys.argv) == 4 and sys.argv[1] == "unmeasured":
        print(unmeasured(sys.argv[2], sys.argv[3]))
    elif len(sys.argv) == 3 and sys.argv[1] == "table":
        table(sys.argv[2])
    else:
        sys.exit(__doc__)
