"""The float64 reference model of tests/torch_reference, written from the
definitions: GPT-2 (learned positions, LayerNorm, tanh-GELU, tied head) and
each choice of the Llama family (RoPE as Llama's reference code pairs it,
RMSNorm, SwiGLU, grouped-query attention, no biases, an untied head).
compare_with_torch.py runs it against Trident's dump; cfg is the dump's
configuration (compare_with_torch.read_config)."""
import math

import torch
import torch.nn.functional as F

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
