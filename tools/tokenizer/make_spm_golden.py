#!/usr/bin/env python3
"""Writes tests/tokenizer/data/mistral_golden.jsonl: llama.cpp's 46 golden strings (from
ggml-vocab-llama-spm.gguf.inp) plus tricky ones, each encoded with and without special tokens
by HF's Rust tokenizer (PyPI `tokenizers`) on Mistral-7B's tokenizer.json (a
sentencepiece-style BPE with byte fallback), both from ../shared/testdata/tokenizers.
Usage: .venv/bin/python tools/tokenizer/make_spm_golden.py > tests/tokenizer/data/mistral_golden.jsonl"""
import json
import os
import sys

from tokenizers import Tokenizer

data = os.environ.get("BRL_TESTDATA_DIR", os.path.join(os.path.dirname(__file__), "../../../shared/testdata"))
tok = Tokenizer.from_file(os.path.join(data, "tokenizers/mistral/tokenizer.json"))
with open(os.path.join(data, "tokenizers/llama.cpp-vocab/ggml-vocab-llama-spm.gguf.inp"), encoding="utf-8") as f:
    texts = f.read().split("\n__ggml_vocab_test__\n")[:-1]
texts += ["<s>hello</s>", "hi<s>there", " <s> x", "a</s>b<unk>c", "▁hello ▁", "<0x41>B", "e\u0301 é",
          "🇺🇸👨‍👩‍👧 ok", "\u0085\u00a0\u3000x", "   leading", "trailing   ", "\n\n\nnewlines\n", "ſ İ ß",
          "Ⅻ ½ ﬁ", "x\ty\r\nz", "日本語のテキスト", "", " "]
for text in texts:
    for add_special in (False, True):
        ids = tok.encode(text, add_special_tokens=add_special).ids
        sys.stdout.write(json.dumps({"text": text, "add_special": add_special, "ids": ids,
                                     "decoded": tok.decode(ids, skip_special_tokens=False)},
                                    ensure_ascii=False, separators=(",", ":")) + "\n")
