#!/usr/bin/env bash
# llama.cpp oracle (see ../shared/notes/oracles.md, "Model forward pass and LoRA"):
#  - node-llama-cpp 3.21.1 + @node-llama-cpp/linux-x64: prebuilt libllama/libggml (CPU) in
#    .oracles/llamacpp/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
#  - its bundled llama.cpp source (the SAME version) in .oracles/llama.cpp: headers, gguf-py
#  - tools/llamacpp/*.c compiled against both into .oracles/bin/ (llamacpp-logits, -bench)
#  - Debian's python3-numpy for the converter (tools/llamacpp/hf_to_gguf.py)
# Idempotent and fast when done: each step is skipped when its output is newer than its input.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
NPM_DIR=$ROOT/.oracles/llamacpp
SRC=$ROOT/.oracles/llama.cpp
BIN=$ROOT/.oracles/bin
LIBS=$NPM_DIR/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
VERSION=3.21.1

if [[ ! -x /usr/bin/python3 ]] || ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  echo "llama.cpp oracle: needs Debian's python3-numpy: apt-get install -y python3-numpy" >&2
  exit 1
fi
if [[ ! -f $LIBS/libllama.v0.4.0.so || ! -f $NPM_DIR/.installed-$VERSION ]]; then
  command -v npm >/dev/null || { echo "npm is missing: apt-get install -y npm" >&2; exit 1; }
  mkdir -p "$NPM_DIR"
  npm install --ignore-scripts --omit=optional --no-audit --no-fund --prefix "$NPM_DIR" \
    node-llama-cpp@$VERSION @node-llama-cpp/linux-x64@$VERSION
  touch "$NPM_DIR/.installed-$VERSION"
fi
BUNDLE=$NPM_DIR/node_modules/node-llama-cpp/llama/gitRelease.bundle
if [[ ! -f $SRC/include/llama.h || $BUNDLE -nt $SRC/include/llama.h ]]; then
  rm -rf "$SRC"
  git clone -q "$BUNDLE" "$SRC"
fi
# The prebuilt libraries and the headers must be the same llama.cpp release.
tag_bin=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["buildOptions"]["llamaCpp"]["release"])' "$LIBS/_nlcBuildMetadata.json")
tag_src=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tag"])' "$NPM_DIR/node_modules/node-llama-cpp/llama/llama.cpp.info.json")
if [[ $tag_bin != "$tag_src" ]]; then
  echo "llama.cpp oracle: prebuilt binaries are $tag_bin but the bundled source is $tag_src" >&2
  exit 1
fi

mkdir -p "$BIN"
CFLAGS=(-O2 -std=c11 -Wall -Wextra -I"$SRC/include" -I"$SRC/ggml/include"
        -DORACLE_BACKEND_DIR="\"$LIBS\"")
LDFLAGS=(-L"$LIBS" -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so -Wl,-rpath,"$LIBS" -lm)
for name in logits bench; do
  src=$ROOT/tools/llamacpp/$name.c
  out=$BIN/llamacpp-$name
  if [[ ! -x $out || $src -nt $out || $ROOT/tools/llamacpp/oracle_common.h -nt $out || $0 -nt $out ]]; then
    cc "${CFLAGS[@]}" "$src" -o "$out" "${LDFLAGS[@]}"
  fi
done

# Self-check (a few seconds): tiny random Llama (q/k permutation, with a LoRA adapter) and Qwen3
# (q/k norm) through converter + driver, against the numpy reference tools/llamacpp/ref_forward.py.
CHECK=$ROOT/.oracles/llamacpp/selfcheck
newer() { for f in "$ROOT"/tools/llamacpp/*.py "$BIN/llamacpp-logits"; do [[ $f -nt $CHECK/ok ]] && return 0; done; return 1; }
if [[ ! -f $CHECK/ok ]] || newer; then
  rm -rf "$CHECK" && mkdir -p "$CHECK"
  export PYTHONPATH=$SRC/gguf-py
  PY=/usr/bin/python3 T=$ROOT/tools/llamacpp TOK=5,17,3,99,42,7,0,64,12,88,23,1
  for s in tiny-llama tiny-qwen3; do
    $PY "$T/random_hf.py" model $s "$CHECK/$s"
    $PY "$T/hf_to_gguf.py" model "$CHECK/$s" "$CHECK/$s.gguf"
    "$BIN/llamacpp-logits" "$CHECK/$s.gguf" $TOK "$CHECK/$s.f32" >/dev/null
    echo -n "llama.cpp oracle: self-check $s: "
    $PY "$T/ref_forward.py" --check "$CHECK/$s" $TOK "$CHECK/$s.f32" --tol 1e-5
  done
  $PY "$T/random_hf.py" lora "$CHECK/tiny-llama" "$CHECK/lora"
  $PY "$T/hf_to_gguf.py" lora "$CHECK/lora" "$CHECK/tiny-llama" "$CHECK/lora.gguf"
  "$BIN/llamacpp-logits" "$CHECK/tiny-llama.gguf" $TOK "$CHECK/lora.f32" --lora "$CHECK/lora.gguf" >/dev/null
  echo -n "llama.cpp oracle: self-check tiny-llama + LoRA: "
  $PY "$T/ref_forward.py" --check "$CHECK/tiny-llama" $TOK "$CHECK/lora.f32" --lora "$CHECK/lora" --tol 1e-5
  touch "$CHECK/ok"
fi
echo "llama.cpp oracle: ready ($BIN/llamacpp-logits, $BIN/llamacpp-bench; PYTHONPATH=$SRC/gguf-py)"
