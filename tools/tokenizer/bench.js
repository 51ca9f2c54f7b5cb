// Encode throughput of HF's Rust tokenizer (via @anush008/tokenizers) on a text file, one
// encode per line as `bucketrl tokenize --time` does: sequential calls (one core, includes
// the Node binding's per-call cost) and encodeBatch (Rust's own thread pool, all cores).
// Usage: node bench.js TOKENIZER_JSON TEXT_FILE [IDS_OUT]
'use strict';
const fs = require('fs');
const path = require('path');
const root = process.env.BRL_TOK_ORACLE_DIR || path.join(__dirname, '../../.oracles/npm-tok');
const {Tokenizer} = require(path.join(root, 'node_modules/@anush008/tokenizers'));
const [file, text, idsOut] = process.argv.slice(2);
const tok = Tokenizer.fromFile(file);
let lines = fs.readFileSync(text, 'utf8').split('\n');
if (lines.length && lines[lines.length - 1] === '') lines.pop();
const bytes = lines.reduce((n, l) => n + Buffer.byteLength(l) + 1, 0);
(async () => {
  const opts = {addSpecialTokens: false};
  await tok.encode('warm up', null, opts);
  let t0 = process.hrtime.bigint(), ntok = 0;
  const out = [];
  for (const l of lines) {
    const ids = (await tok.encode(l, null, opts)).getIds();
    ntok += ids.length;
    if (idsOut) out.push(Array.from(ids).join(' '));
  }
  let s = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(`HF sequential: ${lines.length} lines, ${bytes} bytes, ${ntok} tokens in ${s.toFixed(3)} s: ${(bytes / 1e6 / s).toFixed(2)} MB/s`);
  if (idsOut) fs.writeFileSync(idsOut, out.join('\n') + '\n');
  t0 = process.hrtime.bigint();
  const enc = await tok.encodeBatch(lines, opts);
  s = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(`HF encodeBatch: ${enc.length} lines in ${s.toFixed(3)} s: ${(bytes / 1e6 / s).toFixed(2)} MB/s`);
})();
