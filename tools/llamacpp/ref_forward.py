#!/usr/bin/python3
"""Reference forward pass of a Llama/Qwen2/Qwen3 HF checkpoint in numpy float64, written from
the HF modeling code's definitions (rotate-half RoPE, GQA, Qwen2 qkv biases, Qwen3 per-head
q/k RMSNorm before RoPE, tied LM head), with an optional PEFT LoRA adapter
(W x + scale * B A x, scale = alpha / r or alpha / sqrt(r) with rsLoRA). It exists to check
the llama.cpp pipeline (hf_to_gguf.py + logits.c) end to end without any of our C++ code.

  ref_forward.py HF_DIR TOKENS OUT.f32 [--lora ADAPTER_DIR]
  ref_forward.py --check HF_DIR TOKENS LLAMACPP.f32 [--lora ADAPTER_DIR] [--tol 1e-5]
      prints the diff; exits 1 when max |diff| / max |logit| exceeds --tol
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hf"))
import hfio  # noqa: E402


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, theta, n_rot):
    """x [T, H, D]: HF rotate_half on the first n_rot dims."""
    inv = 1.0 / theta ** (np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)  # [n_rot/2]
    ang = pos[:, None] * inv[None, :]  # [T, n_rot/2]
    cos = np.concatenate([np.cos(ang)] * 2, axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, axis=-1)[:, None, :]
    xr, xp = x[..., :n_rot], x[..., n_rot:]
    half = n_rot // 2
    rot = np.concatenate([-xr[..., half:], xr[..., :half]], axis=-1)
    return np.concatenate([xr * cos + rot * sin, xp], axis=-1)


def load_lora(adapter_dir):
    if not adapter_dir:
        return {}, 0.0
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        c = json.load(f)
    r, alpha = c["r"], c["lora_alpha"]
    scale = alpha / math.sqrt(r) if c.get("use_rslora") else alpha / r
    t = hfio.read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    mods = {}
    for k, v in t.items():
        mod = k[len("base_model.model."):].rsplit(".lora_", 1)[0]
        mods.setdefault(mod, {})["A" if ".lora_A." in k else "B"] = v.astype(np.float64)
    return mods, scale


def forward(hf_dir, tokens, adapter_dir=None):
    h = hfio.hparams(hfio.read_config(hf_dir))
    W = {k: v.astype(np.float64) for k, v in hfio.read_model_tensors(hf_dir).items()}
    lora, scale = load_lora(adapter_dir)

    def linear(x, mod):
        y = x @ W[mod + ".weight"].T
        if mod + ".bias" in W:
            y = y + W[mod + ".bias"]
        if mod in lora:
            y = y + scale * ((x @ lora[mod]["A"].T) @ lora[mod]["B"].T)
        return y

    T = len(tokens)
    nh, nkv, D, eps = h["num_attention_heads"], h["num_key_value_heads"], h["head_dim"], h["rms_norm_eps"]
    pos = np.arange(T, dtype=np.float64)
    causal = np.triu(np.full((T, T), -np.inf), k=1)
    x = W["model.embed_tokens.weight"][np.asarray(tokens)]
    for i in range(h["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = linear(a, p + "self_attn.q_proj").reshape(T, nh, D)
        k = linear(a, p + "self_attn.k_proj").reshape(T, nkv, D)
        v = linear(a, p + "self_attn.v_proj").reshape(T, nkv, D)
        if h["qk_norm"]:
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k = rope(q, pos, h["rope_theta"], h["n_rot"]), rope(k, pos, h["rope_theta"], h["n_rot"])
        g = nh // nkv
        k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)  # head j uses kv head j // g
        s = np.einsum("thd,shd->hts", q, k) / math.sqrt(D) + causal  # [H, T, T]
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        o = np.einsum("hts,shd->thd", s, v).reshape(T, nh * D)
        x = x + linear(o, p + "self_attn.o_proj")
        m = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        gate, up = linear(m, p + "mlp.gate_proj"), linear(m, p + "mlp.up_proj")
        x = x + linear(gate / (1.0 + np.exp(-gate)) * up, p + "mlp.down_proj")
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if h["tie_word_embeddings"] else W["lm_head.weight"]
    return x @ head.T  # [T, V]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("hf_dir")
    ap.add_argument("tokens")
    ap.add_argument("file")
    ap.add_argument("--lora")
    ap.add_argument("--tol", type=float, default=1e-5)
    a = ap.parse_args()
    tokens = [int(t) for t in a.tokens.split(",")]
    ref = forward(a.hf_dir, tokens, a.lora)
    if not a.check:
        ref.astype("<f4").tofile(a.file)
        return
    other = np.fromfile(a.file, dtype="<f4").astype(np.float64)
    if other.size != ref.size:
        raise SystemExit(f"{a.file}: {other.size} floats, expected {ref.shape}")
    other = other.reshape(ref.shape)
    diff = np.abs(other - ref).max()
    rel = diff / np.abs(ref).max()
    print(f"max |diff| {diff:.3e}  max |logit| {np.abs(ref).max():.3e}  relative {rel:.3e}")
    if not rel <= a.tol:
        raise SystemExit(f"relative difference {rel:.3e} exceeds --tol {a.tol:g}")


if __name__ == "__main__":
    main()
