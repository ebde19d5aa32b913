#!/usr/bin/env python3
"""PyTorch baseline for Trident's throughput benchmarks (CPU or one GPU).

Trains the same model as Trident on random tokens, written the way a PyTorch
2.x user would: nn.Linear, F.scaled_dot_product_attention(is_causal=True),
fused AdamW (grad clip 1.0), and optionally torch.compile. --model gpt2 (the
default): float32, tied embeddings, pre-LayerNorm blocks, fused qkv,
tanh-GELU. --model llama: nn.RMSNorm, rotary positions (Llama's rotate_half),
grouped-query attention (SDPA with enable_gqa=True, --kv-heads), a SwiGLU MLP
of --ffn-hidden, no biases, an untied head (PyTorch 2.5 or later).
perf/compare_pytorch.sh runs it from PyPI's current PyTorch on the CPU,
perf/gpu_gpt2.sh on the GPU (--device cuda).

Example:
  python perf/pytorch_gpt.py --layers 4 --d-model 256 --heads 4 --seq-len 128 \
      --vocab 8192 --micro-batch 8 --steps 20 --warmup-steps 3 --threads 8 [--compile] [--bf16]
  python perf/pytorch_gpt.py --model llama --kv-heads 2 --ffn-hidden 688 ...

Prints one line:
  pytorch tokens_per_s=<float> step_ms=<float> threads=<K> torch=<version> mode=<eager|compiled>
      dtype=<fp32|bf16-autocast> model=<gpt2|llama>
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model, eps=1e-5)
        self.qkv = nn.Linear(d_model, 3 * d_model)  # fused q,k,v projection
        self.attn_proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model, eps=1e-5)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.mlp_proj = nn.Linear(4 * d_model, d_model)

    def attention(self, x):
        B, T, C = x.shape
        hs = C // self.heads
        q, k, v = self.qkv(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.heads, hs).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.attn_proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.mlp_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, d_model, heads, seq_len, vocab):
        super().__init__()
        self.wte = nn.Parameter(torch.randn(vocab, d_model) * 0.02)
        self.wpe = nn.Parameter(torch.randn(seq_len, d_model) * 0.02)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(d_model, eps=1e-5)
        for name, p in self.blocks.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        x = self.wte[tokens] + self.wpe[:T]
        for block in self.blocks:
            x = block(x)
        logits = self.lnf(x) @ self.wte.t()  # tied output projection
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


class LlamaBlock(nn.Module):
    def __init__(self, d_model, heads, kv_heads, ffn_hidden):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads
        hs = d_model // heads
        self.norm1 = nn.RMSNorm(d_model, eps=1e-5)
        self.qkv = nn.Linear(d_model, (heads + 2 * kv_heads) * hs, bias=False)  # q, k, v rows
        self.attn_proj = nn.Linear(d_model, d_model, bias=False)
        self.norm2 = nn.RMSNorm(d_model, eps=1e-5)
        self.gate_up = nn.Linear(d_model, 2 * ffn_hidden, bias=False)  # SwiGLU's two in one
        self.down = nn.Linear(ffn_hidden, d_model, bias=False)

    def attention(self, x, cos, sin):
        B, T, C = x.shape
        hs = C // self.heads
        kv = self.kv_heads * hs
        q, k, v = self.qkv(x).split([C, kv, kv], dim=-1)
        q = q.view(B, T, self.heads, hs).transpose(1, 2)
        k, v = (t.view(B, T, self.kv_heads, hs).transpose(1, 2) for t in (k, v))
        q, k = (t * cos + rotate_half(t) * sin for t in (q, k))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.attn_proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x, cos, sin):
        x = x + self.attention(self.norm1(x), cos, sin)
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class Llama(nn.Module):
    def __init__(self, layers, d_model, heads, seq_len, vocab, kv_heads, ffn_hidden, rope_theta):
        super().__init__()
        self.wte = nn.Parameter(torch.randn(vocab, d_model) * 0.02)
        self.blocks = nn.ModuleList(LlamaBlock(d_model, heads, kv_heads, ffn_hidden)
                                    for _ in range(layers))
        self.norm = nn.RMSNorm(d_model, eps=1e-5)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)  # untied
        for p in self.parameters():
            if p.dim() == 2 and p is not self.wte:
                nn.init.normal_(p, 0.0, 0.02)
        # RoPE's angles pos * theta^(-2i/hs), once (Llama's rotate_half pairing).
        hs = d_model // heads
        inv_freq = rope_theta ** (-torch.arange(0, hs, 2, dtype=torch.float32) / hs)
        angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq).repeat(1, 2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        x = self.wte[tokens]
        for block in self.blocks:
            x = block(x, self.cos[:T], self.sin[:T])
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def make_optimizer(model, lr, weight_decay):
    # Same grouping as Trident: decay 2-D matrices only, not biases/LayerNorm.
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)


def parse_args():
    ap = argparse.ArgumentParser(description="PyTorch GPT training baseline")
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--d-model", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--model", choices=["gpt2", "llama"], default="gpt2")
    ap.add_argument("--kv-heads", type=int, default=0, help="llama: key/value heads (0: heads)")
    ap.add_argument("--ffn-hidden", type=int, default=0, help="llama: SwiGLU width (0: 8/3 d)")
    ap.add_argument("--rope-theta", type=float, default=10000.0, help="llama: RoPE's base")
    ap.add_argument("--micro-batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True, help="timed steps")
    ap.add_argument("--warmup-steps", type=int, default=2, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--bf16", action="store_true",
                    help="forward and backward under torch.autocast to bfloat16 (fp32 weights)")
    args = ap.parse_args()
    if args.d_model % args.heads != 0:
        ap.error("--d-model must be divisible by --heads")
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    args.kv_heads = args.kv_heads or args.heads
    args.ffn_hidden = args.ffn_hidden or (8 * args.d_model // 3 + 255) // 256 * 256
    if args.heads % args.kv_heads != 0:
        ap.error("--kv-heads must divide --heads")
    return args


def main():
    args = parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    if args.model == "llama":
        model = Llama(args.layers, args.d_model, args.heads, args.seq_len, args.vocab,
                      args.kv_heads, args.ffn_hidden, args.rope_theta).to(dev)
    else:
        model = GPT(args.layers, args.d_model, args.heads, args.seq_len, args.vocab).to(dev)
    model.train()
    forward = torch.compile(model) if args.compile else model
    opt = make_optimizer(model, args.lr, args.weight_decay)

    # Pre-generate every batch so token sampling is not part of the timing.
    total = args.warmup_steps + args.steps
    shape = (total, args.micro_batch, args.seq_len)
    tokens = torch.randint(0, args.vocab, shape, device=dev)
    targets = torch.randint(0, args.vocab, shape, device=dev)

    def train_step(i):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.bf16):
            loss = forward(tokens[i], targets[i])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    for i in range(args.warmup_steps):
        train_step(i)
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    start = time.perf_counter()
    for i in range(args.warmup_steps, total):
        loss = train_step(i)
    loss.item()  # make sure the last step is finished before stopping the clock
    elapsed = time.perf_counter() - start

    tokens_per_s = args.steps * args.micro_batch * args.seq_len / elapsed
    step_ms = 1000.0 * elapsed / args.steps
    peak = (f" peak_gib={torch.cuda.max_memory_allocated() / 2**30:.2f}"
            if dev.type == "cuda" else "")
    print(f"pytorch tokens_per_s={tokens_per_s:.2f} step_ms={step_ms:.3f} "
          f"threads={args.threads} device={args.device}{peak} torch={torch.__version__} "
          f"mode={'compiled' if args.compile else 'eager'} "
          f"dtype={'bf16-autocast' if args.bf16 else 'fp32'} model={args.model}")


if __name__ == "__main__":
    main()
