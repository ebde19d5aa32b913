#!/usr/bin/python3
"""perf/run_compare.py: metrics within and beyond tolerance, step windows, missing
steps, and checkpoints that differ in one element."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

COMPARE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "perf", "run_compare.py")


def write_metrics(path, losses, norms):
    with open(path, "w") as f:
        for step, (loss, norm) in enumerate(zip(losses, norms), start=1):
            f.write(json.dumps({"step": step, "loss": loss, "grad_norm": norm}) + "\n")


def compare(*args):
    return subprocess.run([sys.executable, COMPARE, *args], capture_output=True, text=True)


class Metrics(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.a, self.b = os.path.join(self.dir, "a.jsonl"), os.path.join(self.dir, "b.jsonl")
        write_metrics(self.a, [5.0, 4.0, 3.0, 2.0], [1.0, 1.0, 1.0, 1.0])

    def test_identical_runs_pass_at_zero(self):
        write_metrics(self.b, [5.0, 4.0, 3.0, 2.0], [1.0, 1.0, 1.0, 1.0])
        r = compare("metrics", self.a, self.b, "--tol", "0")
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("loss 0.00e+00", r.stdout)

    def test_worst_error_against_each_tolerance(self):
        write_metrics(self.b, [5.0, 4.0, 3.0 * (1 + 2e-4), 2.0], [1.0, 1.0 + 5e-3, 1.0, 1.0])
        self.assertEqual(compare("metrics", self.a, self.b, "--tol", "1e-3",
                                 "--grad-tol", "1e-2").returncode, 0)
        r = compare("metrics", self.a, self.b, "--tol", "1e-3")  # grad_norm held to 1e-3 too
        self.assertEqual(r.returncode, 1)
        self.assertIn("FAIL", r.stdout)
        self.assertEqual(compare("metrics", self.a, self.b, "--tol", "1e-4",
                                 "--grad-tol", "1e-2").returncode, 1)

    def test_step_window(self):
        write_metrics(self.b, [5.0, 4.0, 3.5, 2.5], [1.0, 1.0, 1.0, 1.0])
        r = compare("metrics", self.a, self.b, "--tol", "0", "--to-step", "2")
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("steps 1-2", r.stdout)
        self.assertEqual(compare("metrics", self.a, self.b, "--tol", "0", "--from-step", "3").returncode, 1)

    def test_missing_steps_fail(self):
        write_metrics(self.b, [5.0, 4.0, 3.0], [1.0, 1.0, 1.0])
        r = compare("metrics", self.a, self.b, "--tol", "1")
        self.assertEqual(r.returncode, 1)
        self.assertIn("steps differ", r.stdout)


class Checkpoints(unittest.TestCase):
    def test_one_element_differs(self):
        try:
            import h5py
            import numpy as np
        except ImportError:
            self.skipTest("needs h5py and numpy")
        d = tempfile.mkdtemp()
        paths = [os.path.join(d, n) for n in ("a.h5", "b.h5", "c.h5")]
        for i, p in enumerate(paths):
            with h5py.File(p, "w") as f:
                x = np.arange(10, dtype=np.float32)
                if i == 2:
                    x[7] = np.nextafter(x[7], np.float32(100))
                f["params/w"] = x
                f["meta/step"] = np.int64(3)
        self.assertEqual(compare("checkpoint", paths[0], paths[1]).returncode, 0)
        r = compare("checkpoint", paths[0], paths[2])
        self.assertEqual(r.returncode, 1)
        self.assertIn("params/w", r.stdout)


if __name__ == "__main__":
    unittest.main()
