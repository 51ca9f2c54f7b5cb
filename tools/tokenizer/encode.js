// HF's own tokenizer (Rust `tokenizers` through @anush008/tokenizers) as a line-oriented
// oracle: reads JSON lines on stdin, writes one JSON line per input line.
//   {"text": "...", "add_special": false}  ->  {"ids": [...], "decoded": "...", "decoded_skip": "..."}
//   {"ids": [...]}                          ->  {"decoded": "...", "decoded_skip": "..."}
// Usage: node encode.js TOKENIZER_JSON   (oracles from scripts/oracles/tokenizers.sh)
'use strict';
const path = require('path');
const readline = require('readline');
const root = process.env.BRL_TOK_ORACLE_DIR || path.join(__dirname, '../../.oracles/npm-tok');
const {Tokenizer} = require(path.join(root, 'node_modules/@anush008/tokenizers'));
const file = process.argv[2];
if (!file) {
  console.error('usage: node encode.js TOKENIZER_JSON < lines.jsonl');
  process.exit(2);
}
const tok = Tokenizer.fromFile(file);
const rl = readline.createInterface({input: process.stdin, crlfDelay: Infinity});
(async () => {
  const out = [];
  for await (const line of rl) {
    if (!line.trim()) continue;
    const q = JSON.parse(line);
    const r = {};
    let ids = q.ids;
    if (q.text !== undefined) {
      const e = await tok.encode(q.text, null, {addSpecialTokens: !!q.add_special});
      ids = Array.from(e.getIds());
      r.ids = ids;
    }
    r.decoded = await tok.decode(ids, false);
    r.decoded_skip = await tok.decode(ids, true);
    out.push(JSON.stringify(r));
  }
  process.stdout.write(out.join('\n') + (out.length ? '\n' : ''));
})().catch(e => {
  console.error(e);
  process.exit(1);
});
