#!/usr/bin/env python3
"""The GRPO+LoRA training step of bench/train_step_bench.cpp written the usual PyTorch way:
a Qwen2/Llama decoder in torch.nn (random weights, frozen), LoRA on every linear module, the
LM head on completion positions only (as TRL's logits_to_keep), log-softmax over the whole
vocabulary, the clipped GRPO objective with old log-probs from a no-grad pass, backward,
gradient clipping, AdamW on the adapter. Same shapes, batch and FLOPs as the C++ side.

The .venv's torch (PyPI's 2.11 wheel, the libtorch bucketrl links): run with .venv/bin/python.
Attention is torch 2.x's fused scaled_dot_product_attention (the usual way now).
  train_step_torch.py [--shape demo|small|qwen2.5-0.5b] [--batch N] [--prompt Lp]
                      [--completion Lc] [--r 16] [--repeats 3] [--threads N] [--json]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

SHAPES = {
    # hidden, layers, heads, kv heads, intermediate, vocab, qkv bias, rope theta, rms eps
    "demo": (128, 4, 4, 2, 352, 257, False, 1e4, 1e-5),
    "small": (512, 8, 8, 2, 1408, 151936, True, 1e6, 1e-6),
    "qwen2.5-0.5b": (896, 24, 14, 2, 4864, 151936, True, 1e6, 1e-6),
}


class LoraLinear(torch.nn.Module):
    def __init__(self, i, o, bias, r, alpha):
        super().__init__()
        self.base = torch.nn.Linear(i, o, bias=bias)
        self.base.requires_grad_(False)
        self.A = torch.nn.Parameter(torch.randn(r, i) * 0.01)
        self.B = torch.nn.Parameter(torch.randn(o, r) * 0.01)
        self.scale = alpha / r

    def forward(self, x):
        return self.base(x) + (x @ self.A.t() @ self.B.t()) * self.scale


class RMSNorm(torch.nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(n), requires_grad=False)
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w


def rope(x, cos, sin):  # x [N, H, S, D]; rotate halves (HF's rotate_half)
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-b, a), dim=-1) * sin


class Layer(torch.nn.Module):
    def __init__(self, h, nh, nkv, inter, bias, r, alpha, eps):
        super().__init__()
        d = h // nh
        self.nh, self.nkv, self.d = nh, nkv, d
        self.q = LoraLinear(h, nh * d, bias, r, alpha)
        self.k = LoraLinear(h, nkv * d, bias, r, alpha)
        self.v = LoraLinear(h, nkv * d, bias, r, alpha)
        self.o = LoraLinear(nh * d, h, False, r, alpha)
        self.gate = LoraLinear(h, inter, False, r, alpha)
        self.up = LoraLinear(h, inter, False, r, alpha)
        self.down = LoraLinear(inter, h, False, r, alpha)
        self.n1, self.n2 = RMSNorm(h, eps), RMSNorm(h, eps)

    def forward(self, x, cos, sin, mask):
        N, S, _ = x.shape
        y = self.n1(x)
        q = self.q(y).view(N, S, self.nh, self.d).transpose(1, 2)
        k = self.k(y).view(N, S, self.nkv, self.d).transpose(1, 2)
        v = self.v(y).view(N, S, self.nkv, self.d).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        rep = self.nh // self.nkv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(N, S, -1)
        x = x + self.o(y)
        y = self.n2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Model(torch.nn.Module):
    def __init__(self, shape, r):
        super().__init__()
        h, L, nh, nkv, inter, vocab, bias, theta, eps = SHAPES[shape]
        self.embed = torch.nn.Embedding(vocab, h)
        torch.nn.init.normal_(self.embed.weight, std=0.02)
        self.embed.requires_grad_(False)
        self.layers = torch.nn.ModuleList(Layer(h, nh, nkv, inter, bias, r, 2.0 * r, eps) for _ in range(L))
        for m in self.modules():
            if isinstance(m, torch.nn.Linear):
                torch.nn.init.normal_(m.weight, std=0.02)
        self.norm = RMSNorm(h, eps)
        self.d, self.theta = h // nh, theta

    def forward(self, ids, attn, keep):  # hidden states of the `keep` positions before the last
        N, S = ids.shape
        inv = 1.0 / (self.theta ** (torch.arange(0, self.d, 2, dtype=torch.float32) / self.d))
        f = torch.outer(torch.arange(S, dtype=torch.float32), inv)
        emb = torch.cat((f, f), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        # Causal and padding mask, [N, 1, S, S] additive (as transformers builds it from attention_mask).
        allowed = torch.ones(S, S, dtype=torch.bool).tril() & attn[:, None, None, :]
        mask = torch.zeros(N, 1, S, S).masked_fill(~allowed, float("-inf"))
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.norm(x[:, S - keep - 1:S - 1])

    def logps(self, ids, attn, keep):  # log-probability of each completion token (tied LM head)
        logits = self.forward(ids, attn, keep) @ self.embed.weight.t()  # [N, keep, V]
        return torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, -keep:].unsqueeze(-1)).squeeze(-1)


def grpo_loss(logps, old, adv, mask, eps=0.2):
    ratio = torch.exp(logps - old)
    a = adv.unsqueeze(1)
    per_token = -torch.min(ratio * a, torch.clamp(ratio, 1 - eps, 1 + eps) * a)
    return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="small", choices=sorted(SHAPES))
    p.add_argument("--batch", type=int, default=-1)
    p.add_argument("--prompt", type=int, default=-1)
    p.add_argument("--completion", type=int, default=-1)
    p.add_argument("--r", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    demo = a.shape == "demo"
    batch = a.batch if a.batch > 0 else (64 if demo else 8)
    prompt = a.prompt if a.prompt > 0 else (12 if demo else 64)
    completion = a.completion if a.completion > 0 else (4 if demo else 128)
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    print(f"building random {a.shape}, LoRA r={a.r} on all linear modules...", file=sys.stderr)
    m = Model(a.shape, a.r)
    params = [q for q in m.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-6)
    vocab = SHAPES[a.shape][5]
    ids = torch.randint(0, vocab, (batch, prompt + completion))
    adv = torch.randn(batch)
    attn = torch.ones(batch, prompt + completion, dtype=torch.bool)
    mask = torch.ones(batch, completion)
    with torch.no_grad():
        old = m.logps(ids, attn, completion)

    def step():
        opt.zero_grad()
        loss = grpo_loss(m.logps(ids, attn, completion), old, adv, mask)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss.item()

    step()  # warm-up
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    sec = statistics.median(times)
    tokens = batch * (prompt + completion)
    preload = os.environ.get("LD_PRELOAD", "")
    out = {"impl": "pytorch", "allocator": "tcmalloc" if "tcmalloc" in preload else "glibc", "shape": a.shape,
           "batch": batch, "prompt": prompt, "completion": completion, "r": a.r, "threads": a.threads,
           "step_seconds": round(sec, 4), "tokens_per_second": round(tokens / sec, 1), "loss": loss}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{a.shape} (PyTorch {torch.__version__}, {out['allocator']}): {batch} x {prompt + completion} tokens, "
              f"step {sec:.3f} s (median of {a.repeats}), {tokens / sec:.0f} tokens/s")


if __name__ == "__main__":
    main()
