#!/usr/bin/env bash
# Qwen3 encode throughput: `bucketrl tokenize --time` vs HF's Rust tokenizer (PyPI `tokenizers`,
# tools/tokenizer/bench.py) on the same ~4 MB of text (Python's stdlib sources and Debian's
# license texts), as short lines and as ~1.8 KB lines (50 lines joined); checks the ids match.
# Usage: tools/tokenizer/bench.sh BUILD_DIR   (after scripts/setup.sh --test)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:?usage: bench.sh BUILD_DIR}/bucketrl
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
M=${BRL_TESTDATA_DIR:-$ROOT/../shared/testdata}/tokenizers/qwen3
mkdir -p "$W/qwen3" && ln -s "$M/tokenizer.json" "$W/qwen3/" && cp "$M/tokenizer_config.json" "$W/qwen3/"
head -c 4000000 < <(cat /usr/lib/python3*/*.py /usr/share/common-licenses/* 2>/dev/null || true) > "$W/short.txt"
awk '{printf "%s ", $0} NR%50==0 {print ""}' "$W/short.txt" > "$W/long.txt"
for f in short long; do
  echo "== $f lines"
  "$B" tokenize --model "$W/qwen3" --time < "$W/$f.txt" > "$W/$f.ours"
  "$ROOT/.venv/bin/python" "$ROOT/tools/tokenizer/bench.py" "$W/qwen3/tokenizer.json" "$W/$f.txt" "$W/$f.hf"
  cmp -s "$W/$f.ours" "$W/$f.hf" && echo "ids identical" || echo "IDS DIFFER"
done
