#!/usr/bin/python3
"""Minimal Hugging Face -> GGUF converter for the llama.cpp benchmarks (bench/llamacpp_bench.sh;
numpy + llama.cpp's gguf-py, no torch/transformers).

  hf_to_gguf.py model HF_DIR OUT.gguf [--outtype f32|f16|bf16]

Architectures llama, qwen2, qwen3. Llama: llama.cpp applies RoPE to interleaved pairs
(x[2i], x[2i+1]) while HF rotates halves (x[i], x[i+D/2]); the q/k rows (and biases) are permuted per head so both compute the same function. Qwen2/3 use NEOX-style
RoPE, which is HF's, and need no permutation. Tied embeddings: no output.weight (llama.cpp then
reuses token_embd). No tokenizer: tokenizer.ggml.model = "none" with {arch}.vocab_size.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hf"))
import hfio  # noqa: E402

import gguf  # noqa: E402  (from the bundled llama.cpp source, via PYTHONPATH)

_ATTN = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
         "q_norm": "attn_q_norm", "k_norm": "attn_k_norm"}
_MLP = {"gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
_LAYER = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def gguf_name(hf):
    """model.layers.3.self_attn.q_proj.weight -> blk.3.attn_q.weight (None if unknown)."""
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    p = hf.split(".")
    if len(p) >= 5 and p[0] == "model" and p[1] == "layers":
        i, rest = p[2], p[3:]
        if rest[0] in _LAYER and len(rest) == 2:
            return f"blk.{i}.{_LAYER[rest[0]]}.{rest[1]}"
        table = {"self_attn": _ATTN, "mlp": _MLP}.get(rest[0], {})
        if len(rest) == 3 and rest[1] in table:
            return f"blk.{i}.{table[rest[1]]}.{rest[2]}"
    return None


def rope_permute(w, n_heads):
    """HF rotate-half rows -> interleaved pairs, per head: [H, 2, D/2, ...] -> [H, D/2, 2, ...]."""
    shape = w.shape
    return w.reshape(n_heads, 2, shape[0] // n_heads // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def permute_heads(h, hf_name):
    """How many heads to permute hf_name's rows over (llama q/k only), else None."""
    if h["model_type"] != "llama":
        return None
    if ".self_attn.q_proj." in hf_name:
        return h["num_attention_heads"]
    if ".self_attn.k_proj." in hf_name:
        return h["num_key_value_heads"]
    return None


def add_hparams(w, h):
    w.add_context_length(int(h["max_position_embeddings"]))
    w.add_embedding_length(int(h["hidden_size"]))
    w.add_block_count(int(h["num_hidden_layers"]))
    w.add_feed_forward_length(int(h["intermediate_size"]))
    w.add_head_count(int(h["num_attention_heads"]))
    w.add_head_count_kv(int(h["num_key_value_heads"]))
    w.add_key_length(int(h["head_dim"]))
    w.add_value_length(int(h["head_dim"]))
    w.add_rope_dimension_count(int(h["n_rot"]))
    w.add_rope_freq_base(float(h["rope_theta"]))
    w.add_layer_norm_rms_eps(float(h["rms_norm_eps"]))
    w.add_vocab_size(int(h["vocab_size"]))
    w.add_tokenizer_model("none")


def convert_model(hf_dir, out, outtype):
    cfg = hfio.read_config(hf_dir)
    h = hfio.hparams(cfg)
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}  # transformers 4's key, 5's
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise SystemExit(f"{hf_dir}/config.json: RoPE scaling {rope} is not supported")
    if h["model_type"] == "llama" and h["n_rot"] != h["head_dim"]:
        raise SystemExit(f"{hf_dir}/config.json: llama with partial rotary is not supported")
    tensors = hfio.read_model_tensors(hf_dir)
    w = gguf.GGUFWriter(out, h["model_type"])
    w.add_name(os.path.basename(os.path.normpath(hf_dir)))
    w.add_file_type({"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                     "bf16": gguf.LlamaFileType.MOSTLY_BF16}[outtype])
    add_hparams(w, h)
    if h["tie_word_embeddings"]:
        tensors.pop("lm_head.weight", None)  # some writers store the tied copy too
    for name, arr in tensors.items():
        g = gguf_name(name)
        if g is None:
            raise SystemExit(f"{hf_dir}: tensor {name} has no GGUF name (unsupported layout?)")
        a = np.asarray(arr, dtype=np.float32)
        heads = permute_heads(h, name)
        if heads:
            a = rope_permute(a, heads)
        a = np.ascontiguousarray(a)
        if outtype == "f32" or a.ndim == 1:  # norms and biases stay F32, as llama.cpp's own converter
            w.add_tensor(g, a)
        elif outtype == "f16":
            w.add_tensor(g, a.astype(np.float16))
        else:
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.BF16)
            w.add_tensor(g, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.BF16)
    write(w)


def write(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("model")
    m.add_argument("hf_dir")
    m.add_argument("out")
    m.add_argument("--outtype", default="f32", choices=["f32", "f16", "bf16"])
    a = ap.parse_args()
    convert_model(a.hf_dir, a.out, a.outtype)


if __name__ == "__main__":
    main()
