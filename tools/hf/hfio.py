"""Hugging Face folder I/O for random_hf.py and the llama.cpp tools, numpy only (no torch here).

safetensors: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape,
data_offsets}}, then the data buffer. Written here independently of the project's C++ reader
so that a bug there cannot hide in both. BF16 is widened to F32 by shifting into the high half.
"""
import json
import mmap
import os
import struct

import numpy as np

_NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64,
       "I32": np.int32, "U8": np.uint8, "I8": np.int8}


def read_safetensors(path):
    """-> {name: np.ndarray} (BF16/F16 widened to float32)."""
    # mmap: a 2 GB checkpoint is paged in as tensors are used, not read whole up front.
    with open(path, "rb") as f:
        raw = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if len(raw) < 8:
        raise SystemExit(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = memoryview(raw)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        shape = tuple(info["shape"])
        dt = info["dtype"]
        if dt == "BF16":
            u16 = np.frombuffer(data[b:e], dtype="<u2")
            arr = (u16.astype(np.uint32) << 16).view(np.float32)
        elif dt in _NP:
            arr = np.frombuffer(data[b:e], dtype=np.dtype(_NP[dt]).newbyteorder("<"))
        else:
            raise SystemExit(f"{path}: tensor {name} has unsupported dtype {dt}")
        arr = arr.reshape(shape)
        if arr.dtype in (np.float16, np.float64):
            arr = arr.astype(np.float32)
        out[name] = arr
    return out


def read_model_tensors(folder):
    """All tensors of an HF folder: model.safetensors or the shards of its index."""
    single = os.path.join(folder, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(single)
    index = os.path.join(folder, "model.safetensors.index.json")
    if not os.path.exists(index):
        raise SystemExit(f"{folder}: no model.safetensors nor model.safetensors.index.json")
    with open(index) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for fn in files:
        out.update(read_safetensors(os.path.join(folder, fn)))
    return out


def _bf16_bits(a):
    """float32 -> bf16 bits, round to nearest even (as torch does)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    r = ((u >> 16) & 1) + 0x7FFF
    return ((u + r) >> 16).astype("<u2")


def write_safetensors(path, tensors, dtype="F32", metadata=None):
    """tensors: list of (name, shape, producer) where producer() -> float32 array (called once,
    in order, so a 2 GB checkpoint never sits in memory whole), or (name, array)."""
    items = []
    for t in tensors:
        if len(t) == 2:
            name, arr = t
            items.append((name, tuple(arr.shape), (lambda a=arr: a)))
        else:
            items.append(t)
    width = {"F32": 4, "F16": 2, "BF16": 2}[dtype]
    header, off = {}, 0
    for name, shape, _ in items:
        n = int(np.prod(shape)) * width
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    if metadata:
        header["__metadata__"] = metadata
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for name, shape, produce in items:
            a = np.asarray(produce(), dtype=np.float32).reshape(shape)
            if dtype == "F32":
                f.write(a.astype("<f4").tobytes())
            elif dtype == "F16":
                f.write(a.astype("<f2").tobytes())
            else:
                f.write(_bf16_bits(a).tobytes())


def read_config(folder):
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    mt = cfg.get("model_type")
    if mt not in ("llama", "qwen2", "qwen3"):
        raise SystemExit(f"{path}: model_type {mt!r} is not one of llama, qwen2, qwen3")
    return cfg


def hparams(cfg):
    """The derived hyper-parameters every tool here needs, with HF's defaults."""
    h = dict(cfg)
    h.setdefault("num_key_value_heads", cfg["num_attention_heads"])
    if not cfg.get("head_dim"):
        h["head_dim"] = cfg["hidden_size"] // cfg["num_attention_heads"]
    h.setdefault("rms_norm_eps", 1e-6)
    # transformers 5 keeps rope_theta (and partial_rotary_factor) inside rope_parameters.
    for k in ("rope_theta", "partial_rotary_factor"):
        if k in (cfg.get("rope_parameters") or {}):
            h[k] = cfg["rope_parameters"][k]
    h.setdefault("rope_theta", 10000.0)
    h.setdefault("tie_word_embeddings", False)
    h.setdefault("max_position_embeddings", 32768)
    h.setdefault("partial_rotary_factor", 1.0)
    rot = int(h["head_dim"] * h["partial_rotary_factor"])
    h["n_rot"] = rot - rot % 2
    mt = cfg["model_type"]
    h["qkv_bias"] = True if mt == "qwen2" else bool(cfg.get("attention_bias", False))
    h["o_bias"] = mt == "llama" and bool(cfg.get("attention_bias", False))
    h["mlp_bias"] = mt == "llama" and bool(cfg.get("mlp_bias", False))
    h["qk_norm"] = mt == "qwen3"
    return h
