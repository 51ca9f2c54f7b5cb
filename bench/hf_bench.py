#!/usr/bin/env python3
"""The Hugging Face side of the GPU comparisons (issues 16 and 17), on the same shapes as
bench/generate_bench and bench/train_step_bench, random weights:

  hf_bench.py generate [--shape qwen2.5-0.5b] [--prompts 8] [--group 8] [--prompt 64]
                       [--new-tokens 256] [--repeats 1] [--device cuda] [--dtype bf16]
      transformers `generate` (sampling at T = 1, eager, every sequence new-tokens long):
      tokens/s.
  hf_bench.py step [--shape qwen2.5-0.5b] [--batch 8] [--prompt 64] [--completion 128]
                   [--r 16] [--repeats 3] [--device cuda] [--dtype bf16] [--profile T.json]
      PEFT LoRA r on every linear module: log-probabilities of the completion tokens (logits
      of those positions only, log-softmax over the vocabulary in f32), the clipped GRPO
      objective, backward, gradient clipping, AdamW on the adapter: seconds per step. --profile
      writes a trace of one more step (bench/trace_summary.py puts it beside ours).

Prints one JSON line. Run with the GPU machine's python (torch, transformers, peft there) or
.venv/bin/python here (CPU, small shapes).
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
import transformers

SHAPES = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=112, vocab_size=256),
    # The 0.5B's 24 layers at tiny widths: the step's host-side cost (Python, dispatch,
    # autograd, launches) with next to no arithmetic.
    "thin24": dict(hidden_size=64, num_hidden_layers=24, num_attention_heads=4, num_key_value_heads=2,
                   intermediate_size=128, vocab_size=256),
    "small": dict(hidden_size=512, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=2,
                  intermediate_size=1408, vocab_size=151936),
    "qwen2.5-0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                         intermediate_size=4864, vocab_size=151936),
    "qwen2.5-1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                         intermediate_size=8960, vocab_size=151936),
    "qwen2.5-7b": dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                       intermediate_size=18944, vocab_size=152064, tie_word_embeddings=False),
}


def build(shape, dtype, device):
    kw = dict(tie_word_embeddings=True, rope_theta=1e6, rms_norm_eps=1e-6, max_position_embeddings=32768)
    kw.update(SHAPES[shape])
    cfg = transformers.Qwen2Config(**kw, torch_dtype=dtype)
    torch.manual_seed(1)
    with torch.device(device):
        m = transformers.Qwen2ForCausalLM(cfg).to(dtype)
    return m.eval()


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def bench_generate(a, dtype):
    m = build(a.shape, dtype, a.device)
    ids = torch.randint(0, m.config.vocab_size, (a.prompts, a.prompt), device=a.device)
    rates = []
    for r in range(a.repeats + 1):  # r == 0 warms up on a short run
        n = a.new_tokens if r > 0 else 8
        sync(a.device)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = m.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_k=0,
                             top_p=1.0, num_return_sequences=a.group, max_new_tokens=n, min_new_tokens=n,
                             pad_token_id=0)
        sync(a.device)
        if r > 0:
            rates.append((out.shape[1] - a.prompt) * out.shape[0] / (time.perf_counter() - t0))
    return {"impl": "transformers.generate", "torch": torch.__version__, "transformers": transformers.__version__,
            "device": a.device, "dtype": a.dtype, "shape": a.shape, "sequences": a.prompts * a.group,
            "prompt": a.prompt, "new_tokens": a.new_tokens, "tokens_per_second": statistics.median(rates)}


def bench_step(a, dtype):
    import peft
    m = build(a.shape, dtype, a.device)
    m = peft.get_peft_model(m, peft.LoraConfig(r=a.r, lora_alpha=2 * a.r, target_modules="all-linear", lora_dropout=0.0))
    for n, p in m.named_parameters():  # B is zero at init: give the adapter a value, as the C++ side
        if p.requires_grad:
            with torch.no_grad():
                p.normal_(0, 0.01)
    params = [p for p in m.parameters() if p.requires_grad]
    if a.gradient_checkpointing:  # as TRL's gradient_checkpointing=True sets it up for PEFT
        m.enable_input_require_grads()
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    opt = torch.optim.AdamW(params, lr=1e-6)
    L = a.prompt + a.completion
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, m.config.vocab_size, (a.batch, L), generator=g).to(a.device)
    adv = torch.randn(a.batch, generator=g).to(a.device)
    targets = ids[:, a.prompt:]

    def logps():
        # Logits of the positions that predict the completion (TRL's logits_to_keep), f32 log-softmax.
        logits = m(input_ids=ids, logits_to_keep=a.completion + 1).logits[:, :-1]
        return torch.log_softmax(logits.float(), -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)

    with torch.no_grad():
        old = logps()

    def step():
        opt.zero_grad(set_to_none=True)
        lp = logps()
        ratio = torch.exp(lp - old)
        per_tok = -torch.min(ratio * adv[:, None], torch.clamp(ratio, 0.8, 1.2) * adv[:, None])
        loss = per_tok.mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss.item()

    if a.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    step()  # warm-up
    times = []
    for _ in range(a.repeats):
        sync(a.device)
        t0 = time.perf_counter()
        step()
        sync(a.device)
        times.append(time.perf_counter() - t0)
    sec = statistics.median(times)
    if a.profile:  # one more step under torch.profiler: host ops, and on a GPU kernels and copies
        acts = [torch.profiler.ProfilerActivity.CPU]
        if a.device.startswith("cuda"):
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
            step()
            sync(a.device)
        prof.export_chrome_trace(a.profile)
    return {"impl": "peft", "torch": torch.__version__, "peft": peft.__version__, "device": a.device, "dtype": a.dtype,
            "shape": a.shape, "batch": a.batch, "prompt": a.prompt, "completion": a.completion, "r": a.r,
            "step_seconds": sec, "tokens_per_second": a.batch * L / sec,
            "gradient_checkpointing": a.gradient_checkpointing,
            "peak_memory_gb": torch.cuda.max_memory_allocated() / 1e9 if a.device.startswith("cuda") else None}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["generate", "step"])
    p.add_argument("--shape", default="qwen2.5-0.5b", choices=sorted(SHAPES))
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--completion", type=int, default=128)
    p.add_argument("--r", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--profile", default="", help="step: write a chrome trace of one more step here")
    a = p.parse_args()
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    out = bench_generate(a, dtype) if a.what == "generate" else bench_step(a, dtype)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
