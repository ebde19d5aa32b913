#!/usr/bin/env python3
"""Compares two Trident runs: their metrics files step by step, or two
checkpoints dataset by dataset. Prints the worst relative error and exits 1
when it is above the tolerance (0: bit for bit).

  run_compare.py metrics A.jsonl B.jsonl --tol 1e-4 [--grad-tol T] [--from-step N] [--to-step N]
  run_compare.py checkpoint A.h5 B.h5 [--attributes]
      every dataset bit for bit (needs h5py); --attributes: every attribute of
      every object too, the root's `deck` text without its `--set checkpoint.*`
      and `--set output.*` lines (how and where a run saved and logged is not
      what it saved)
"""
import argparse
import json
import sys


def read_metrics(path, first, last):
    with open(path) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    return {r["step"]: r for r in recs if "loss" in r and first <= r["step"] <= last}


def compare_metrics(args):
    last = args.to_step or float("inf")
    a, b = read_metrics(args.a, args.from_step, last), read_metrics(args.b, args.from_step, last)
    if not a or sorted(a) != sorted(b):
        print(f"steps differ: {sorted(a)} vs {sorted(b)}")
        return 1
    worst = {"loss": 0.0, "grad_norm": 0.0}
    for step in sorted(a):
        for key in worst:
            x, y = a[step][key], b[step][key]
            err = abs(x - y) / max(abs(x), 1e-30)
            worst[key] = max(worst[key], err)
    tol = {"loss": args.tol, "grad_norm": args.tol if args.grad_tol is None else args.grad_tol}
    ok = all(worst[k] <= tol[k] for k in worst)
    print(f"steps {min(a)}-{max(a)}: worst relative error loss {worst['loss']:.2e} "
          f"(tolerance {tol['loss']:g}), grad_norm {worst['grad_norm']:.2e} "
          f"(tolerance {tol['grad_norm']:g}): {'pass' if ok else 'FAIL'}")
    return 0 if ok else 1


def checkpoint_differences(path_a, path_b, attributes=False):
    """(summary line, names of the datasets and attributes that differ)."""
    import h5py
    import numpy as np

    def datasets(path):
        out = {}
        with h5py.File(path, "r") as f:
            f.visititems(lambda name, obj: out.__setitem__(name, obj[()])
                         if isinstance(obj, h5py.Dataset) else None)
        return out

    def attrs(path):
        out = {}

        def add(name, obj):
            for key, value in obj.attrs.items():
                if name == "/" and key == "deck":
                    value = "\n".join(line for line in str(value).splitlines()
                                      if not line.startswith(("# --set checkpoint.",
                                                              "# --set output.")))
                out[f"{name}@{key}"] = np.asarray(value).tobytes()
        with h5py.File(path, "r") as f:
            add("/", f)
            f.visititems(add)
        return out

    a, b = datasets(path_a), datasets(path_b)
    if sorted(a) != sorted(b):
        return f"dataset names differ: {sorted(set(a) ^ set(b))}", sorted(set(a) ^ set(b))
    differ = [n for n in a if np.asarray(a[n]).tobytes() != np.asarray(b[n]).tobytes()]
    line = f"{len(a)} datasets, {len(differ)} differ" + (f": {differ[:5]}" if differ else "")
    if attributes:
        x, y = attrs(path_a), attrs(path_b)
        odd = sorted(set(x) ^ set(y)) + [k for k in sorted(set(x) & set(y)) if x[k] != y[k]]
        line += f"; {len(x)} attributes, {len(odd)} differ" + (f": {odd[:5]}" if odd else "")
        differ += odd
    return line, differ


def compare_checkpoints(args):
    line, differ = checkpoint_differences(args.a, args.b, args.attributes)
    print(line)
    return 1 if differ else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    m = sub.add_parser("metrics")
    m.add_argument("a")
    m.add_argument("b")
    m.add_argument("--tol", type=float, required=True)
    m.add_argument("--grad-tol", type=float, help="grad_norm's tolerance (default: --tol)")
    m.add_argument("--from-step", type=int, default=0)
    m.add_argument("--to-step", type=int, default=0, help="last step compared (0: all)")
    c = sub.add_parser("checkpoint")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--attributes", action="store_true",
                   help="every attribute too (the deck text without --set checkpoint.*, output.*)")
    args = p.parse_args()
    return compare_metrics(args) if args.what == "metrics" else compare_checkpoints(args)


if __name__ == "__main__":
    sys.exit(main())
