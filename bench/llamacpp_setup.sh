#!/usr/bin/env bash
# llama.cpp, the anchor of the CPU decode benchmarks (not a test oracle: the model tests use
# transformers), built from source by PyPI's llama-cpp-python (its sdist vendors llama.cpp):
#  - pip builds libllama/libggml for this CPU into .venv-llamacpp (git-ignored; ~10 min on 2 cores)
#  - the same sdist's llama.cpp headers and gguf-py go to .cache/llama.cpp
#  - tools/llamacpp/bench.c is compiled against both into .cache/llama.cpp/bin
# Idempotent: done steps are skipped. Prints the environment bench/llamacpp_bench.sh needs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VERSION=0.3.36
VENV=$ROOT/.venv-llamacpp
SRC=$ROOT/.cache/llama.cpp
BIN=$SRC/bin
if [[ ! -f $VENV/.installed-$VERSION ]]; then
  [[ -x $VENV/bin/python ]] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q numpy pyyaml  # the GGUF converter (gguf-py) needs both
  # From source (no prebuilt wheel for this Python); GGML_NATIVE: the CPU's own instructions.
  CMAKE_ARGS="-DGGML_NATIVE=ON" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "$VENV/bin/pip" install -q --no-binary llama-cpp-python "llama-cpp-python==$VERSION"
  touch "$VENV/.installed-$VERSION"
fi
if [[ ! -f $SRC/.from-$VERSION ]]; then
  rm -rf "$SRC" && mkdir -p "$SRC"
  "$VENV/bin/pip" download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$SRC/sdist"
  tar xzf "$SRC"/sdist/llama_cpp_python-$VERSION.tar.gz -C "$SRC" --strip-components=3 \
    "llama_cpp_python-$VERSION/vendor/llama.cpp/include" "llama_cpp_python-$VERSION/vendor/llama.cpp/ggml/include" \
    "llama_cpp_python-$VERSION/vendor/llama.cpp/gguf-py"
  rm -rf "$SRC/sdist"
  touch "$SRC/.from-$VERSION"
fi
LIBS=$("$VENV/bin/python" -c 'import llama_cpp, os; print(os.path.join(os.path.dirname(llama_cpp.__file__), "lib"))')
mkdir -p "$BIN"
CFLAGS=(-O2 -std=c11 -Wall -Wextra -I"$SRC/include" -I"$SRC/ggml/include" -DORACLE_BACKEND_DIR="\"$LIBS\"")
LDFLAGS=(-L"$LIBS" -lllama -lggml -lggml-base -Wl,-rpath,"$LIBS" -lm)
for name in bench; do
  src=$ROOT/tools/llamacpp/$name.c out=$BIN/llamacpp-$name
  if [[ ! -x $out || $src -nt $out || $ROOT/tools/llamacpp/oracle_common.h -nt $out ]]; then
    cc "${CFLAGS[@]}" "$src" -o "$out" "${LDFLAGS[@]}"
  fi
done
echo "LLAMACPP_BIN=$BIN LLAMACPP_PY=$VENV/bin/python LLAMACPP_GGUF_PY=$SRC/gguf-py"
