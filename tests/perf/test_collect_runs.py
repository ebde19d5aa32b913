#!/usr/bin/python3
"""perf/collect_runs.py on synthetic run directories: parsing, the scaling arithmetic,
merged metrics of a restart chain, failed runs, and the three output files."""
import csv
import json
import os
import subprocess
import sys
import tempfile
import unittest

COLLECT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "perf", "collect_runs.py")


def make_run(study, name, tps=None, ranks=1, tp=1, tokens_per_step=1024, metrics=None, error=False,
             scaling=""):
    d = os.path.join(study, name)
    os.makedirs(d)
    with open(os.path.join(d, "run.env"), "w") as f:
        f.write("job_id=42\nnodes=1\nscaling=%s\n" % scaling)
    with open(os.path.join(d, "trident.out"), "w") as f:
        f.write("train: 10 steps, batch 8 x 128 tokens = %d tokens/step, micro_batch 4\n" % tokens_per_step)
        if error:
            f.write("error: something went wrong\n")
        if tps is not None:
            f.write("FOM: %.1f tokens/s | %.1f tokens/s/rank | MFU 12.50%% | %d ranks TP(%d)-PP(1)-DP(%d) | "
                    "deck input/x.toml\n" % (tps, tps / ranks, ranks, tp, ranks // tp))
    for i, recs in enumerate(metrics or []):
        with open(os.path.join(d, "metrics.link%d.jsonl" % (i + 1)), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in recs)
    return d


def collect(*args):
    res = subprocess.run([sys.executable, COLLECT] + list(args), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, universal_newlines=True)
    return res.returncode, res.stdout


class CollectRuns(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.study = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def rows(self):
        with open(os.path.join(self.study, "scaling.csv")) as f:
            return {r["run"]: r for r in csv.DictReader(f)}

    def test_strong_scaling_per_series(self):
        make_run(self.study, "trident.x.tp1-pp1-dp1.N1.20250101-000000", tps=1000, ranks=1)
        make_run(self.study, "trident.x.tp1-pp1-dp2.N2.20250101-000001", tps=1800, ranks=2)
        make_run(self.study, "trident.x.tp1-pp1-dp4.N4.20250101-000002", tps=3000, ranks=4)
        # A tp=2 series: its own baseline, the 2-rank run.
        make_run(self.study, "trident.x.tp2-pp1-dp1.N2.20250101-000003", tps=1500, ranks=2, tp=2)
        make_run(self.study, "trident.x.tp2-pp1-dp2.N4.20250101-000004", tps=2700, ranks=4, tp=2)
        code, out = collect("--mode", "strong", "--no-plot", self.study)
        self.assertEqual(code, 0, out)
        rows = self.rows()
        r = rows["trident.x.tp1-pp1-dp4.N4.20250101-000002"]
        self.assertAlmostEqual(float(r["speedup"]), 3.0)
        self.assertAlmostEqual(float(r["efficiency"]), 0.75)
        self.assertEqual(r["tokens_per_s_per_rank"], "750.0")
        self.assertEqual(r["mfu_percent"], "12.5")
        r = rows["trident.x.tp2-pp1-dp2.N4.20250101-000004"]
        self.assertEqual(r["baseline_ranks"], "2")
        self.assertAlmostEqual(float(r["speedup"]), 1.8)
        self.assertAlmostEqual(float(r["ideal_speedup"]), 2.0)
        self.assertAlmostEqual(float(r["efficiency"]), 0.9)

    def test_weak_scaling_inferred(self):
        for n, tps in ((1, 1000), (2, 1900), (4, 3600)):
            make_run(self.study, "trident.x.tp1-pp1-dp%d.N%d.20250101-00000%d" % (n, n, n), tps=tps, ranks=n,
                     tokens_per_step=1024 * n)
        code, out = collect("--no-plot", self.study)
        self.assertEqual(code, 0, out)
        self.assertIn("weak scaling", out)
        r = self.rows()["trident.x.tp1-pp1-dp4.N4.20250101-000004"]
        # Weak-scaling efficiency: tokens/s per rank against the 1-rank run.
        self.assertAlmostEqual(float(r["efficiency"]), 900 / 1000)
        with open(os.path.join(self.study, "scaling.yaml")) as f:
            self.assertIn("mode: weak", f.read())

    def test_chain_metrics_merge_and_failures(self):
        link1 = [{"step": s, "loss": 5.0 - s / 10, "step_ms": 10.0, "peak_mem_bytes": 2**20} for s in range(1, 8)]
        link2 = [{"step": s, "loss": 4.0 - s / 10, "step_ms": 12.0, "peak_mem_bytes": 2**21} for s in range(6, 11)]
        link2[-1]["val_loss"] = 2.5
        make_run(self.study, "trident.x.tp1-pp1-dp2.N2.20250101-000000", tps=2000, ranks=2,
                 metrics=[link1, link2])
        make_run(self.study, "trident.x.tp1-pp1-dp4.N4.20250101-000001", error=True, ranks=4)
        make_run(self.study, "trident.x.tp1-pp1-dp8.N8.20250101-000002", ranks=8)
        code, out = collect("--no-plot", self.study)
        self.assertEqual(code, 0, out)
        rows = self.rows()
        r = rows["trident.x.tp1-pp1-dp2.N2.20250101-000000"]
        self.assertEqual(r["steps"], "10")
        self.assertAlmostEqual(float(r["final_loss"]), 3.0)  # link 2's record for step 10
        self.assertEqual(r["final_val_loss"], "2.5")
        self.assertEqual(r["peak_mem_mib"], "2.0")
        self.assertEqual(r["speedup"], "1.0")
        self.assertEqual(rows["trident.x.tp1-pp1-dp4.N4.20250101-000001"]["status"], "failed")
        self.assertEqual(rows["trident.x.tp1-pp1-dp8.N8.20250101-000002"]["status"], "incomplete")
        self.assertEqual(rows["trident.x.tp1-pp1-dp8.N8.20250101-000002"]["speedup"], "")

    def test_yaml_is_yaml(self):
        make_run(self.study, 'trident.odd"name.tp1-pp1-dp1.N1.20250101-000000', tps=10, ranks=1)
        code, out = collect("--no-plot", "--out", os.path.join(self.study, "t"), self.study)
        self.assertEqual(code, 0, out)
        try:
            import yaml
        except ImportError:
            self.skipTest("python3-yaml is not installed")
        with open(os.path.join(self.study, "t.yaml")) as f:
            doc = yaml.safe_load(f)
        self.assertEqual(doc["runs"][0]["run"], 'trident.odd"name.tp1-pp1-dp1.N1.20250101-000000')
        self.assertEqual(doc["runs"][0]["tokens_per_s"], 10.0)

    def test_plot(self):
        make_run(self.study, "trident.x.tp1-pp1-dp1.N1.20250101-000000", tps=1000, ranks=1)
        make_run(self.study, "trident.x.tp1-pp1-dp2.N2.20250101-000001", tps=1800, ranks=2)
        code, out = collect(self.study)
        if "gnuplot not found" in out:
            self.skipTest("gnuplot is not installed")
        self.assertEqual(code, 0, out)
        with open(os.path.join(self.study, "scaling.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_no_runs_is_an_error(self):
        code, out = collect("--no-plot", self.study)
        self.assertEqual(code, 1)
        self.assertIn("no run directories", out)


if __name__ == "__main__":
    unittest.main()
