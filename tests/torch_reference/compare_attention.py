#!/usr/bin/python3
"""Check Trident's flash attention kernels against PyTorch autograd in float64.

Usage: /usr/bin/python3 compare_attention.py DIR

DIR holds what dump_attention wrote: per case, qkv and dout (inputs) and
Trident's out, lse and dqkv in float32. We rebuild causal attention in float64
as the GPT reference does (masked softmax of q k^T / sqrt(hs), then @ v),
backpropagate dout, and compare. Exit code 0 when every check passes.
"""
import math
import os
import sys

import numpy as np
import torch

TOL = 1e-5  # norm-wise relative error: float32 kernels against float64


def load(d, name, what, shape):
    return torch.from_numpy(np.fromfile(os.path.join(d, f"{name}_{what}.bin"),
                                        dtype=np.float32).astype(np.float64).reshape(shape))


def rel(a, b):
    return (a - b).norm().item() / max(b.norm().item(), 1e-30)


def main():
    d = sys.argv[1]
    failures = 0
    for line in open(os.path.join(d, "cases.txt")):
        name, B, T, C, H = line.split()
        B, T, C, H = int(B), int(T), int(C), int(H)
        hs = C // H
        qkv = load(d, name, "qkv", (B, T, 3 * C)).requires_grad_(True)
        dout = load(d, name, "dout", (B, T, C))
        q, k, v = (x.view(B, T, H, hs).transpose(1, 2) for x in qkv.split(C, dim=2))
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        scores = ((q @ k.transpose(-2, -1)) / math.sqrt(hs)).masked_fill(~causal, float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)  # (B, H, T)
        y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        y.backward(dout)
        checks = {"out": (load(d, name, "out", (B, T, C)), y.detach()),
                  "lse": (load(d, name, "lse", (B, H, T)), lse.detach()),
                  "dqkv": (load(d, name, "dqkv", (B, T, 3 * C)), qkv.grad)}
        for what, (mine, ref) in checks.items():
            err = rel(mine, ref)
            ok = err <= TOL
            failures += not ok
            print(f"{name} B={B} T={T} C={C} heads={H} {what:<5} rel err {err:.2e} "
                  f"{'ok' if ok else 'FAIL'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
