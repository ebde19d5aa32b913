#!/usr/bin/python3
"""Check Trident's numbers against an independent float64 PyTorch rebuild.

Usage: /usr/bin/python3 compare_with_torch.py REF.h5

REF.h5 is written by Trident's C++ reference dumper. We rebuild the same model
in float64 on the CPU from its definitions (GPT-2, or any of the Llama family's
choices REF.h5 names: RoPE, RMSNorm, SwiGLU, grouped-query attention, no
biases, an untied head), load Trident's initial weights, check that Trident's
parameter table is the definitions' tensor for tensor, and compare the step-0
loss and gradients, the per-step training losses and gradient norms, and the
final parameters. Exit code 0 when every check passes, 1 otherwise.
"""
import math
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

# Tolerances. Trident computes in float32 and we compute in float64, so the
# one-pass quantities (step-0 loss and gradients) must agree to near float32
# rounding; multi-step quantities get looser bounds because small float32
# differences are amplified by Adam over the training run.
TOL_STEP0_LOSS = 1e-5   # relative error of the step-0 loss
TOL_STEP0_GRAD = 1e-5   # norm-wise relative error of each step-0 gradient
TOL_TRAIN_LOSS = 1e-4   # relative error of each per-step training loss
TOL_GRAD_NORM = 1e-4    # relative error of each per-step global grad norm
TOL_FINAL_PARAM = 1e-4  # norm-wise relative error of each final parameter

DTYPE = torch.float64


def param_shapes(cfg):
    """Every parameter's PyTorch shape, by Trident's name, from the definitions:
    no position table with RoPE, no norm biases with RMSNorm, no linear biases
    with bias off, [gate | up] rows in mlp.fc.w for SwiGLU, and an untied head
    lm_head.w. attn.qkv.w holds the q rows (heads * hs), then k's and v's
    (kv_heads * hs each)."""
    C, V, F_ = cfg["d_model"], cfg["vocab"], cfg["ffn_hidden"]
    hs = C // cfg["heads"]
    qkv = C + 2 * cfg["kv_heads"] * hs
    fc = 2 * F_ if cfg["mlp"] == "swiglu" else F_
    norm_b, bias = cfg["norm"] == "layernorm", cfg["bias"]
    shapes = {"wte": (V, C)}
    if cfg["positions"] == "learned":
        shapes["wpe"] = (cfg["seq_len"], C)
    for l in range(cfg["layers"]):
        p = f"h.{l}."
        block = [("ln1.w", (C,), True), ("ln1.b", (C,), norm_b),
                 ("attn.qkv.w", (qkv, C), True), ("attn.qkv.b", (qkv,), bias),
                 ("attn.proj.w", (C, C), True), ("attn.proj.b", (C,), bias),
                 ("ln2.w", (C,), True), ("ln2.b", (C,), norm_b),
                 ("mlp.fc.w", (fc, C), True), ("mlp.fc.b", (fc,), bias),
                 ("mlp.proj.w", (C, F_), True), ("mlp.proj.b", (C,), bias)]
        shapes.update({p + n: shape for n, shape, present in block if present})
    shapes["lnf.w"] = (C,)
    if norm_b:
        shapes["lnf.b"] = (C,)
    if not cfg["tied_embeddings"]:
        shapes["lm_head.w"] = (V, C)
    return shapes


def gelu_tanh(u):
    # Written out explicitly so the formula is exactly the one Trident uses.
    return 0.5 * u * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * u ** 3)))


def norm(x, P, name, cfg):
    """LayerNorm (biased variance, weight and bias) or RMSNorm (Zhang & Sennrich
    2019: x / sqrt(mean(x^2) + eps) * w, no mean, no bias)."""
    eps = cfg["norm_eps"]
    if cfg["norm"] == "rmsnorm":
        return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * P[name + ".w"]
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * P[name + ".w"] + P[name + ".b"]


def linear(x, P, name):
    """x W^T (+ b where the model has biases)."""
    y = x @ P[name + ".w"].t()
    return y + P[name + ".b"] if name + ".b" in P else y


def rope_tables(T, hs, theta):
    """cos and sin (T, hs) of Llama's reference code: angle pos * theta^(-2i/hs)
    for i < hs/2, the same angle repeated for element i + hs/2."""
    inv_freq = 1.0 / theta ** (torch.arange(0, hs, 2, dtype=DTYPE) / hs)
    angles = torch.outer(torch.arange(T, dtype=DTYPE), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate_half(x):
    """(x1, x2) -> (-x2, x1) over the halves of the head: element i pairs with
    i + hs/2 (Hugging Face's Llama; RoFormer's rotation of each pair)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def attention(a, P, p, cfg):
    """Causal attention with grouped-query heads: query head h reads key/value
    head h // (heads / kv_heads) (Ainslie et al. 2023), each kv head repeated."""
    B, T, C = a.shape
    H, KVH = cfg["heads"], cfg["kv_heads"]
    hs = C // H
    q, k, v = linear(a, P, p + "attn.qkv").split([H * hs, KVH * hs, KVH * hs], dim=-1)
    q = q.view(B, T, H, hs).transpose(1, 2)  # [B,H,T,hs]; head h owns columns h*hs:(h+1)*hs
    k, v = (t.view(B, T, KVH, hs).transpose(1, 2) for t in (k, v))
    if cfg["positions"] == "rope":
        cos, sin = rope_tables(T, hs, cfg["rope_theta"])
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
    k, v = (t.repeat_interleave(H // KVH, dim=1) for t in (k, v))
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, C)
    return linear(y, P, p + "attn.proj")


def mlp(m, P, p, cfg):
    """gelu(x W1) W2, or SwiGLU (Shazeer 2020): (silu(x Wg) * x Wu) W2."""
    u = linear(m, P, p + "mlp.fc")
    if cfg["mlp"] == "swiglu":
        gate, up = u.split(cfg["ffn_hidden"], dim=-1)
        h = gate * torch.sigmoid(gate) * up
    else:
        h = gelu_tanh(u)
    return linear(h, P, p + "mlp.proj")


def gpt_loss(P, cfg, tokens, targets):
    """Mean cross-entropy of the model defined by parameter dict P."""
    T = tokens.shape[1]
    x = P["wte"][tokens]
    if cfg["positions"] == "learned":
        x = x + P["wpe"][:T]
    for l in range(cfg["layers"]):
        p = f"h.{l}."
        x = x + attention(norm(x, P, p + "ln1", cfg), P, p, cfg)
        x = x + mlp(norm(x, P, p + "ln2", cfg), P, p, cfg)
    x = norm(x, P, "lnf", cfg)
    logits = x @ (P["wte"] if cfg["tied_embeddings"] else P["lm_head.w"]).t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def lr_at(step, cfg):
    """Warm-up then cosine decay, the same schedule Trident uses."""
    lr, warmup, steps, min_lr = cfg["lr"], cfg["warmup"], cfg["steps"], cfg["min_lr"]
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= steps:
        return min_lr
    ratio = (step - warmup) / (steps - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def fresh_params(init, names):
    return {n: init[n].clone().requires_grad_(True) for n in names}


def run_torch(cfg, init, names, tokens, targets):
    """Step-0 gradients plus the full training loop, all in float64."""
    # Step 0 on the initial weights, gradients before any clipping.
    P = fresh_params(init, names)
    loss0 = gpt_loss(P, cfg, tokens[0], targets[0])
    loss0.backward()
    grads0 = {n: P[n].grad.detach().clone() for n in names}

    # Training loop from the same initial weights.
    P = fresh_params(init, names)
    decay = [P[n] for n in names if P[n].dim() == 2]       # tables, the head, linear weights
    no_decay = [P[n] for n in names if P[n].dim() != 2]    # biases, norm weights
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
    losses, norms = [], []
    for s in range(cfg["steps"]):
        opt.zero_grad(set_to_none=True)
        loss = gpt_loss(P, cfg, tokens[s], targets[s])
        loss.backward()
        grads = [P[n].grad for n in names]
        grad_norm = torch.sqrt(sum((g * g).sum() for g in grads))
        losses.append(loss.item())
        norms.append(grad_norm.item())
        if cfg["grad_clip"] > 0:
            coef = cfg["grad_clip"] / (grad_norm.item() + 1e-6)
            if coef < 1.0:
                for g in grads:
                    g.mul_(coef)
        for group in opt.param_groups:
            group["lr"] = lr_at(s, cfg)
        opt.step()
    final = {n: P[n].detach().clone() for n in names}
    return loss0.item(), grads0, losses, norms, final


class Report:
    """Collects checks and prints one compact table line per check."""

    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.worst = {}  # kind of check (step0, train, final) -> its errors
        print(f"{'check':<34} {'rel_err':>11} {'tol':>8}  result")

    def add(self, label, err, tol, note=""):
        ok = err is not None and math.isfinite(err) and err <= tol
        if err is not None:
            self.worst.setdefault(label.split("/")[0].split("[")[0], []).append(err)
        self.passed += ok
        self.failed += not ok
        shown = "missing" if err is None else f"{err:.3e}"
        print(f"{label:<34} {shown:>11} {tol:>8.0e}  {'ok' if ok else 'FAIL'} {note}".rstrip())


def rel_norm_err(ours, ref):
    return (ours - ref).norm().item() / max(ref.norm().item(), 1e-30)


def rel_scalar_err(ours, ref):
    return abs(ours - ref) / max(abs(ref), 1e-30)


def read_tensor(group, name, shape):
    """Dataset as a float64 tensor, or None if absent or the wrong shape."""
    if name not in group or tuple(group[name].shape) != tuple(shape):
        return None
    return torch.from_numpy(np.asarray(group[name][()], dtype=np.float64))


def read_config(attrs):
    """The run's architecture and optimiser settings from REF.h5's attributes."""
    cfg = {k: int(attrs[k]) for k in ("layers", "d_model", "heads", "seq_len", "vocab", "kv_heads",
                                       "ffn_hidden", "micro_batch", "steps", "warmup")}
    cfg.update({k: float(attrs[k]) for k in ("lr", "min_lr", "weight_decay", "grad_clip", "beta1",
                                              "beta2", "eps", "rope_theta", "norm_eps")})
    for k in ("positions", "norm", "mlp"):
        v = attrs[k]
        cfg[k] = v.decode() if isinstance(v, bytes) else str(v)
    cfg.update({k: bool(attrs[k]) for k in ("bias", "tied_embeddings")})
    return cfg


def check_table(rep, group, shapes):
    """One failed check per tensor the definitions expect that the file lacks
    (or holds in another shape), and per tensor the definitions do not know.
    True when the table is the definitions' exactly."""
    ok = True
    for n, shape in shapes.items():
        if n not in group or tuple(group[n].shape) != shape:
            got = tuple(group[n].shape) if n in group else "absent"
            rep.add(f"table/{n}", None, 0, f"expected {shape}, file has {got}")
            ok = False
    for n in sorted(set(group) - set(shapes)):
        rep.add(f"table/{n}", None, 0, "not in the model's definition")
        ok = False
    return ok


def key_bias_rows(cfg):
    """The rows of attn.qkv.b that are the key bias."""
    kv = cfg["kv_heads"] * (cfg["d_model"] // cfg["heads"])
    return torch.arange(cfg["d_model"], cfg["d_model"] + kv)


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2])
        return 2
    torch.set_default_dtype(DTYPE)
    rep = Report()
    with h5py.File(sys.argv[1], "r") as f:
        cfg = read_config(f.attrs)
        print("config: " + " ".join(f"{k}={v}" for k, v in cfg.items()))
        shapes = param_shapes(cfg)
        if not check_table(rep, f["init"], shapes):
            print(f"{rep.passed} passed, {rep.failed} failed")
            return 1
        names = list(shapes)
        init = {n: torch.from_numpy(np.asarray(f["init"][n][()], dtype=np.float64)) for n in names}
        tokens = torch.from_numpy(np.asarray(f["batch/tokens"][()], dtype=np.int64))
        targets = torch.from_numpy(np.asarray(f["batch/targets"][()], dtype=np.int64))
        t_loss0 = float(f["step0/loss"][()])
        t_grads0 = {n: read_tensor(f["step0/grad"], n, init[n].shape) for n in names}
        t_losses = np.asarray(f["train/losses"][()], dtype=np.float64)
        t_norms = np.asarray(f["train/grad_norms"][()], dtype=np.float64)
        t_final = {n: read_tensor(f["final"], n, init[n].shape) for n in names}

    loss0, grads0, losses, norms, final = run_torch(cfg, init, names, tokens, targets)

    rep.add("step0/loss", rel_scalar_err(t_loss0, loss0), TOL_STEP0_LOSS,
            f"trident={t_loss0:.7f} torch={loss0:.7f}")
    for n in names:
        g = t_grads0[n]
        rep.add(f"step0/grad/{n}", None if g is None else rel_norm_err(g, grads0[n]), TOL_STEP0_GRAD)
    for s in range(cfg["steps"]):
        err = rel_scalar_err(t_losses[s], losses[s]) if s < len(t_losses) else None
        rep.add(f"train/loss[{s}]", err, TOL_TRAIN_LOSS, f"torch={losses[s]:.6f}")
    for s in range(cfg["steps"]):
        err = rel_scalar_err(t_norms[s], norms[s]) if s < len(t_norms) else None
        rep.add(f"train/grad_norm[{s}]", err, TOL_GRAD_NORM, f"torch={norms[s]:.6f}")
    key = key_bias_rows(cfg)
    for n in names:
        p, ref, note = t_final[n], final[n], ""
        if p is not None and n.endswith("attn.qkv.b"):
            # The key bias adds the same q.b_k to every score of a softmax row,
            # so its true gradient is exactly 0 and only rounding noise remains,
            # which Adam normalises into arbitrary-looking updates. It cannot
            # change any output, so compare only the query and value slices.
            keep = torch.ones(p.shape[0], dtype=torch.bool)
            keep[key] = False
            drift = (p[key] - ref[key]).norm().item()
            p, ref, note = p[keep], ref[keep], f"(q,v only; key-bias diff {drift:.1e})"
        rep.add(f"final/{n}", None if p is None else rel_norm_err(p, ref), TOL_FINAL_PARAM, note)
    worst = {k: max(v) for k, v in rep.worst.items()}
    print("worst: " + " ".join(f"{k} {v:.1e}" for k, v in worst.items()))
    print(f"{rep.passed} passed, {rep.failed} failed")
    return 0 if rep.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
