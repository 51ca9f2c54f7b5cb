#!/usr/bin/python3
"""Random Hugging Face checkpoints (config.json + model.safetensors) for the oracle tests
(tools/hf/oracle.py) and the benches, written with numpy alone (independently of the project's
C++ writer). LoRA adapters for the tests are made by PEFT itself (tools/hf/oracle.py peft-lora).

  random_hf.py model SHAPE OUT_DIR [--seed S] [--std X] [--dtype F32|BF16|F16]

Shapes: qwen2.5-0.5b and small (Qwen2, tied, qkv biases: bench shapes), tiny-llama (GQA,
untied), tiny-qwen2 (biases, tied), tiny-qwen3 (q_norm/k_norm, head_dim != hidden/heads); with
RoPE scaling (transformers 4's rope_scaling): tiny-llama3 (Llama 3.x's llama3), tiny-qwen2-yarn,
tiny-qwen3-linear; tiny-mistral (no biases, head_dim != hidden/heads) and tiny-mistral-sw
(sliding_window 64).
Weights ~ N(0, std), norm weights ~ 1 + N(0, 0.1), biases ~ N(0, std); seeded, in a fixed order.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hfio  # noqa: E402

_QWEN2 = dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], vocab_size=151936,
              tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6,
              max_position_embeddings=32768, hidden_act="silu")

SHAPES = {
    "qwen2.5-0.5b": dict(_QWEN2, hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, intermediate_size=4864, head_dim=64),
    "small": dict(_QWEN2, hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
                  num_key_value_heads=2, intermediate_size=1408, head_dim=64),
    "tiny-llama": dict(model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=131,
                       hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=96, head_dim=16,
                       rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                       attention_bias=False, mlp_bias=False, max_position_embeddings=512,
                       hidden_act="silu"),
    "tiny-qwen2": dict(_QWEN2, vocab_size=120, hidden_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, intermediate_size=112,
                       head_dim=16, max_position_embeddings=512),
    "tiny-qwen3": dict(model_type="qwen3", architectures=["Qwen3ForCausalLM"], vocab_size=140,
                       hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=80, head_dim=32,
                       rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                       attention_bias=False, max_position_embeddings=512, hidden_act="silu"),
}
# Mistral: Llama's layout without biases; head_dim != hidden/heads as in Mistral-Nemo; with a
# sliding window wider than the tests' sequences (where it hides nothing).
SHAPES["tiny-mistral"] = dict(model_type="mistral", architectures=["MistralForCausalLM"], vocab_size=128,
                              hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, intermediate_size=96, head_dim=24,
                              rope_theta=1000000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                              sliding_window=None, max_position_embeddings=512, hidden_act="silu")
SHAPES["tiny-mistral-sw"] = dict(SHAPES["tiny-mistral"], sliding_window=64)
# RoPE scalings at tiny contexts, so that they change the frequencies a 40-token test reaches.
SHAPES["tiny-llama3"] = dict(SHAPES["tiny-llama"], rope_scaling=dict(
    rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64))
SHAPES["tiny-qwen2-yarn"] = dict(SHAPES["tiny-qwen2"], rope_scaling=dict(
    type="yarn", factor=4.0, original_max_position_embeddings=128))
SHAPES["tiny-qwen3-linear"] = dict(SHAPES["tiny-qwen3"], rope_scaling=dict(rope_type="linear", factor=2.0))
# Tiny shapes get a larger init so attention is far from uniform and RoPE matters.
DEFAULT_STD = {s: 0.1 for s in SHAPES if s.startswith("tiny-")}


def tensor_shapes(h):
    """[(hf_name, shape, kind)] in file order; kind: w (weight), n (norm), b (bias)."""
    C, V, F = h["hidden_size"], h["vocab_size"], h["intermediate_size"]
    D, nh, nkv = h["head_dim"], h["num_attention_heads"], h["num_key_value_heads"]
    out = [("model.embed_tokens.weight", (V, C), "w")]
    for i in range(h["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out.append((p + "input_layernorm.weight", (C,), "n"))
        for proj, o, inn in (("q", nh * D, C), ("k", nkv * D, C), ("v", nkv * D, C), ("o", C, nh * D)):
            out.append((p + f"self_attn.{proj}_proj.weight", (o, inn), "w"))
            if (proj != "o" and h["qkv_bias"]) or (proj == "o" and h["o_bias"]):
                out.append((p + f"self_attn.{proj}_proj.bias", (o,), "b"))
        if h["qk_norm"]:
            out.append((p + "self_attn.q_norm.weight", (D,), "n"))
            out.append((p + "self_attn.k_norm.weight", (D,), "n"))
        out.append((p + "post_attention_layernorm.weight", (C,), "n"))
        for proj, o, inn in (("gate", F, C), ("up", F, C), ("down", C, F)):
            out.append((p + f"mlp.{proj}_proj.weight", (o, inn), "w"))
            if h["mlp_bias"]:
                out.append((p + f"mlp.{proj}_proj.bias", (o,), "b"))
    out.append(("model.norm.weight", (C,), "n"))
    if not h["tie_word_embeddings"]:
        out.append(("lm_head.weight", (V, C), "w"))
    return out


def write_model(shape, out_dir, seed, std, dtype):
    if shape not in SHAPES:
        raise SystemExit(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    cfg = dict(SHAPES[shape])
    cfg["torch_dtype"] = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[dtype]
    std = DEFAULT_STD.get(shape, 0.02) if std is None else std
    h = hfio.hparams(cfg)
    rng = np.random.default_rng(seed)

    def producer(shp, kind):
        def make():
            x = rng.standard_normal(shp, dtype=np.float32)
            if kind == "n":
                return 1.0 + 0.1 * x
            return std * x
        return make

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    hfio.write_safetensors(os.path.join(out_dir, "model.safetensors"),
                           [(n, s, producer(s, k)) for n, s, k in tensor_shapes(h)], dtype)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("model")
    m.add_argument("shape")
    m.add_argument("out_dir")
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--std", type=float, default=None)
    m.add_argument("--dtype", default="F32", choices=["F32", "BF16", "F16"])
    a = ap.parse_args()
    write_model(a.shape, a.out_dir, a.seed, a.std, a.dtype)


if __name__ == "__main__":
    main()
