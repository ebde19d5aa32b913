#!/usr/bin/python3
"""Collects Trident runs into one scaling table (CSV and YAML) and plots it (PNG).

    perf/collect_runs.py [--mode strong|weak] [--out PREFIX] [--no-plot] DIR...

Each DIR is a run directory (trident.<deck>.<layout>.N<ranks>.<date>/, as the
jobscripts write them) or a directory holding such run directories (a study).
From every run it reads the figure-of-merit line (the last "FOM:" line of its *.out
files), the banner's tokens per step, and the metrics (*.jsonl; records from several
files, e.g. metrics.link<N>.jsonl of a restart chain, are merged by step, the higher
link winning).

Speedup and efficiency are relative to the run with the fewest ranks in the same
series, where a series is one deck with one tensor/pipeline layout (tp, pp) and
dp growing with the ranks:
    speedup     S = tokens/s(N) / tokens/s(N0)
    ideal       N / N0
    efficiency  E = S / (N / N0) = (tokens/s/rank)(N) / (tokens/s/rank)(N0)
Strong scaling (fixed global batch) and weak scaling (global batch grows with dp)
use the same formula: with a fixed batch, tokens/s is inverse time to solution, so E
is T(N0)·N0 / (T(N)·N); with a fixed batch per rank, E is per-rank throughput kept.
The mode (from --mode, else the study's study.env, else inferred from tokens per
step) only labels the table and the plot. Several runs at one rank count (repeats)
each get a row; the baseline is their median.

Writes PREFIX.csv, PREFIX.yaml and PREFIX.png (gnuplot, Debian: gnuplot-nox).
PREFIX defaults to DIR/scaling for a single study directory, else ./scaling.
Needs only the Python 3 standard library.
"""
import argparse
import csv
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

NAME_RE = re.compile(r"^trident\.(?P<deck>.+)\.(?P<layout>tp\d+-pp\d+-dp\d+)\.N(?P<ranks>\d+)\.(?P<date>[^.]+)$")
FOM_RE = re.compile(
    r"^FOM: (?P<tps>[0-9.]+) tokens/s \| (?P<tpr>[0-9.]+) tokens/s/rank \| MFU (?P<mfu>[0-9.]+%|n/a)"
    r" \| (?P<ranks>\d+) ranks TP\((?P<tp>\d+)\)-PP\((?P<pp>\d+)\)-DP\((?P<dp>\d+)\) \| deck (?P<deck>.*)$")
BANNER_RE = re.compile(r"^train: (?P<steps>\d+) steps, batch \d+ x \d+ tokens = (?P<tokens>\d+) tokens/step")

COLUMNS = ["run", "deck", "layout", "tp", "pp", "dp", "ranks", "nodes", "job_id", "date", "status",
           "steps", "tokens_per_step", "tokens_per_s", "tokens_per_s_per_rank", "mfu_percent",
           "speedup", "ideal_speedup", "efficiency", "baseline_ranks", "final_loss",
           "final_val_loss", "step_ms_median", "peak_mem_mib"]


def read_env(path):
    env = {}
    if os.path.isfile(path):
        for line in open(path, errors="replace"):
            key, sep, value = line.rstrip("\n").partition("=")
            if sep:
                env[key] = value
    return env


def find_runs(dirs):
    runs = []
    for d in dirs:
        d = d.rstrip("/")
        if not os.path.isdir(d):
            sys.exit("collect_runs: %s is not a directory" % d)
        if NAME_RE.match(os.path.basename(d)) or os.path.isfile(os.path.join(d, "run.env")):
            runs.append(d)
        else:
            runs += sorted(p for p in glob.glob(os.path.join(d, "trident.*")) if os.path.isdir(p))
    return runs


def natural(path):
    """Sort key: metrics.link10.jsonl after metrics.link9.jsonl."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", os.path.basename(path))]


def read_metrics(run_dir):
    by_step = {}
    for path in sorted(glob.glob(os.path.join(run_dir, "*.jsonl")), key=natural):
        for line in open(path, errors="replace"):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut short by a killed job
            if isinstance(rec, dict) and "step" in rec:
                by_step[int(rec["step"])] = rec
    return [by_step[s] for s in sorted(by_step)]


def read_run(run_dir):
    name = os.path.basename(run_dir.rstrip("/"))
    row = {c: "" for c in COLUMNS}
    row["run"] = name
    m = NAME_RE.match(name)
    if m:
        row.update(deck=m["deck"], layout=m["layout"], ranks=int(m["ranks"]), date=m["date"])
        row.update(zip(("tp", "pp", "dp"), (int(x) for x in re.findall(r"\d+", m["layout"]))))
    env = read_env(os.path.join(run_dir, "run.env"))
    row["job_id"] = env.get("job_id", "")
    row["nodes"] = int(env["nodes"]) if env.get("nodes", "").isdigit() else ""

    fom, errors, tokens_per_step = None, 0, ""
    for path in sorted(glob.glob(os.path.join(run_dir, "*.out")), key=natural):
        for line in open(path, errors="replace"):
            f = FOM_RE.match(line.rstrip("\n"))
            if f:
                fom = f
            b = BANNER_RE.match(line)
            if b:
                tokens_per_step = int(b["tokens"])
            if line.startswith("error"):
                errors += 1
    row["tokens_per_step"] = tokens_per_step
    if fom:
        row.update(tokens_per_s=float(fom["tps"]), tokens_per_s_per_rank=float(fom["tpr"]),
                   ranks=int(fom["ranks"]), tp=int(fom["tp"]), pp=int(fom["pp"]), dp=int(fom["dp"]))
        row["layout"] = "tp%d-pp%d-dp%d" % (row["tp"], row["pp"], row["dp"])
        if fom["mfu"] != "n/a":
            row["mfu_percent"] = float(fom["mfu"].rstrip("%"))
        if not row["deck"]:
            row["deck"] = os.path.basename(fom["deck"]).rsplit(".toml", 1)[0]
    row["status"] = "ok" if fom else ("failed" if errors else "incomplete")

    recs = read_metrics(run_dir)
    if recs:
        row["steps"] = recs[-1]["step"]
        row["final_loss"] = recs[-1].get("loss", "")
        vals = [r["val_loss"] for r in recs if "val_loss" in r]
        row["final_val_loss"] = vals[-1] if vals else ""
        times = [r["step_ms"] for r in recs if "step_ms" in r and r["step"] > 1]
        row["step_ms_median"] = round(statistics.median(times), 3) if times else ""
        mems = [r["peak_mem_bytes"] for r in recs if "peak_mem_bytes" in r]
        row["peak_mem_mib"] = round(max(mems) / 2**20, 2) if mems else ""
    return row


def series_key(row):
    return (row["deck"], row["tp"], row["pp"])


def series_label(key):
    deck, tp, pp = key
    return "%s tp%s-pp%s" % (deck, tp, pp)


def add_scaling(rows):
    """Speedup, ideal speedup and efficiency against each series' smallest run."""
    series = {}
    for r in rows:
        if r["status"] == "ok":
            series.setdefault(series_key(r), []).append(r)
    for members in series.values():
        n0 = min(r["ranks"] for r in members)
        base = statistics.median(r["tokens_per_s"] for r in members if r["ranks"] == n0)
        for r in members:
            s = r["tokens_per_s"] / base
            ideal = r["ranks"] / n0
            r.update(speedup=round(s, 4), ideal_speedup=round(ideal, 4),
                     efficiency=round(s / ideal, 4), baseline_ranks=n0)
    return series


def infer_mode(rows, dirs):
    for d in dirs:
        env = read_env(os.path.join(d, "study.env"))
        if env.get("scaling") in ("strong", "weak"):
            return env["scaling"]
    for d in find_runs(dirs):
        env = read_env(os.path.join(d, "run.env"))
        if env.get("scaling") in ("strong", "weak"):
            return env["scaling"]
    # Fixed tokens per step across a series: strong; growing with dp: weak.
    ok = [r for r in rows if r["status"] == "ok" and r["tokens_per_step"]]
    if len({r["tokens_per_step"] for r in ok}) > 1 and all(
            r["tokens_per_step"] % r["dp"] == 0 for r in ok) and len(
            {r["tokens_per_step"] // r["dp"] for r in ok}) == 1:
        return "weak"
    return "strong"


def yaml_scalar(v):
    if v == "" or v is None:
        return "null"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))  # a JSON string is a valid YAML double-quoted scalar


def write_yaml(path, rows, mode, dirs):
    with open(path, "w") as f:
        f.write("# Trident scaling table (perf/collect_runs.py)\n")
        f.write("mode: %s\n" % mode)
        f.write("sources: [%s]\n" % ", ".join(yaml_scalar(os.path.abspath(d)) for d in dirs))
        f.write("baseline: the run with the fewest ranks in each series (deck, tp, pp)\n")
        f.write("efficiency: speedup / (ranks / baseline_ranks)\n")
        f.write("runs:\n" if rows else "runs: []\n")
        for r in rows:
            f.write("  - " + "\n    ".join("%s: %s" % (c, yaml_scalar(r[c])) for c in COLUMNS) + "\n")


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)


def plot(prefix, series, mode):
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        sys.exit("collect_runs: gnuplot not found (Debian: apt-get install gnuplot-nox); "
                 "use --no-plot for the table alone")
    data = prefix + ".dat"
    keys = sorted(series, key=lambda k: [str(x) for x in k])
    with open(data, "w") as f:
        for k in keys:
            f.write("# %s: ranks tokens/s efficiency%% ideal_tokens/s\n" % series_label(k))
            members = sorted(series[k], key=lambda r: r["ranks"])
            n0 = members[0]["baseline_ranks"]
            base = members[0]["tokens_per_s"] / members[0]["speedup"]
            for r in members:
                f.write("%d %.6g %.6g %.6g\n" % (r["ranks"], r["tokens_per_s"], 100 * r["efficiency"],
                                                 base * r["ranks"] / n0))
            f.write("\n\n")
    tp_plots = ", ".join(
        "'{d}' index {i} using 1:2 with linespoints lw 2 pt 7 lc {c} title '{t}', "
        "'{d}' index {i} using 1:4 with lines dt 2 lc {c} notitle".format(
            d=data, i=i, c=i + 1, t=series_label(k)) for i, k in enumerate(keys))
    eff_plots = ", ".join(
        "'{d}' index {i} using 1:3 with linespoints lw 2 pt 7 lc {c} title '{t}'".format(
            d=data, i=i, c=i + 1, t=series_label(k)) for i, k in enumerate(keys))
    script = """
set termoption noenhanced
set output '{png}'
set multiplot layout 1,2 title '{mode} scaling (dashed: ideal)'
set logscale x 2
set xlabel 'MPI ranks'
set grid
set key top left
set ylabel 'tokens/s'
set logscale y
plot {tp}
unset logscale y
set ylabel 'parallel efficiency (%)'
set yrange [0:*]
set key bottom left
plot {eff}, 100 with lines dt 2 lc 'gray' notitle
unset multiplot
""".format(png=prefix + ".png", mode=mode.capitalize(), tp=tp_plots, eff=eff_plots)
    for terminal in ("pngcairo size 1200,480 font ',10'", "png size 1200,480"):
        res = subprocess.run([gnuplot], input="set terminal %s\n%s" % (terminal, script),
                             universal_newlines=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if res.returncode == 0:
            os.remove(data)
            return
    sys.exit("collect_runs: gnuplot failed:\n" + res.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", metavar="DIR", help="run directories or directories of runs")
    ap.add_argument("--mode", choices=["strong", "weak"], help="label (default: from study.env or inferred)")
    ap.add_argument("--out", help="output prefix (default: DIR/scaling for one DIR, else ./scaling)")
    ap.add_argument("--no-plot", action="store_true", help="write the CSV and YAML only")
    args = ap.parse_args()

    runs = find_runs(args.dirs)
    if not runs:
        sys.exit("collect_runs: no run directories (trident.<deck>.<layout>.N<ranks>.<date>) in %s"
                 % " ".join(args.dirs))
    rows = sorted((read_run(d) for d in runs),
                  key=lambda r: (str(r["deck"]), str(r["tp"]), str(r["pp"]), r["ranks"] or 0, r["date"]))
    series = add_scaling(rows)
    mode = args.mode or infer_mode(rows, args.dirs)
    prefix = args.out or (os.path.join(args.dirs[0], "scaling") if len(args.dirs) == 1
                          and not NAME_RE.match(os.path.basename(args.dirs[0].rstrip("/"))) else "scaling")

    write_csv(prefix + ".csv", rows)
    write_yaml(prefix + ".yaml", rows, mode, args.dirs)
    outputs = [prefix + ".csv", prefix + ".yaml"]
    if not args.no_plot and series:
        plot(prefix, series, mode)
        outputs.append(prefix + ".png")

    print("%s scaling, %d runs (%d ok)" % (mode, len(rows), sum(r["status"] == "ok" for r in rows)))
    print("%-48s %6s %14s %14s %8s %7s  %s" % ("run", "ranks", "tokens/s", "tokens/s/rank", "speedup",
                                               "eff", "status"))
    for r in rows:
        num = lambda v, fmt: (fmt % v) if v != "" else "-"
        print("%-48s %6s %14s %14s %8s %7s  %s" % (
            r["run"], r["ranks"], num(r["tokens_per_s"], "%.1f"), num(r["tokens_per_s_per_rank"], "%.1f"),
            num(r["speedup"], "%.2f"), num(r["efficiency"] * 100 if r["efficiency"] != "" else "", "%.1f%%"),
            r["status"]))
    print("wrote " + ", ".join(outputs))
    return 0 if any(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
