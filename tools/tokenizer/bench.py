#!/usr/bin/env python3
"""Encode throughput of HF's Rust tokenizer (PyPI `tokenizers`) on a text file, one encode per
line as `bucketrl tokenize --time` does: sequential calls (one core, includes the binding's
per-call cost) and encode_batch (Rust's own thread pool, all cores).
Usage: .venv/bin/python bench.py TOKENIZER_JSON TEXT_FILE [IDS_OUT]"""
import sys
import time

from tokenizers import Tokenizer

file, text = sys.argv[1], sys.argv[2]
ids_out = sys.argv[3] if len(sys.argv) > 3 else None
tok = Tokenizer.from_file(file)
with open(text, encoding="utf-8", errors="replace") as f:
    lines = f.read().split("\n")
if lines and lines[-1] == "":
    lines.pop()
nbytes = sum(len(l.encode()) + 1 for l in lines)
tok.encode("warm up", add_special_tokens=False)
t0 = time.perf_counter()
out, ntok = [], 0
for l in lines:
    ids = tok.encode(l, add_special_tokens=False).ids
    ntok += len(ids)
    if ids_out:
        out.append(" ".join(map(str, ids)))
s = time.perf_counter() - t0
print(f"HF sequential: {len(lines)} lines, {nbytes} bytes, {ntok} tokens in {s:.3f} s: {nbytes / 1e6 / s:.2f} MB/s")
if ids_out:
    with open(ids_out, "w") as f:
        f.write("\n".join(out) + "\n")
t0 = time.perf_counter()
enc = tok.encode_batch(lines, add_special_tokens=False)
s = time.perf_counter() - t0
print(f"HF encode_batch: {len(enc)} lines in {s:.3f} s: {nbytes / 1e6 / s:.2f} MB/s")
