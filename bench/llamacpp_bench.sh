#!/usr/bin/env bash
# llama.cpp throughput anchors for BENCHMARKS.md: for each shape, a random HF checkpoint
# (tools/hf/random_hf.py), converted to GGUF (tools/llamacpp/hf_to_gguf.py), then
# llamacpp-bench (tools/llamacpp/bench.c on the libllama that bench/llamacpp_setup.sh builds
# from PyPI's llama-cpp-python): prompt 64, decode 1 sequence, decode a group of 8 sharing the
# prompt (32 new tokens each), medians over REPS repeats.
#   bench/llamacpp_bench.sh [SHAPE...]      (default: small qwen2.5-0.5b)
#   env: THREADS (2), REPS (5), OUTTYPE (f32 | bf16 | f16)
# GGUFs are cached in .cache/llamacpp-bench/ (git-ignored; the 0.5B F32 one is ~2 GB).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
THREADS=${THREADS:-2} REPS=${REPS:-5} OUTTYPE=${OUTTYPE:-f32}
eval "$(bench/llamacpp_setup.sh | tail -1)"
export PYTHONPATH=$LLAMACPP_GGUF_PY
CACHE=$ROOT/.cache/llamacpp-bench
mkdir -p "$CACHE"
shapes=("$@")
[[ ${#shapes[@]} -gt 0 ]] || shapes=(small qwen2.5-0.5b)
for shape in "${shapes[@]}"; do
  gguf=$CACHE/$shape-$OUTTYPE.gguf
  if [[ ! -f $gguf ]]; then
    hf=$CACHE/$shape-hf
    "$LLAMACPP_PY" tools/hf/random_hf.py model "$shape" "$hf" --seed 1
    "$LLAMACPP_PY" tools/llamacpp/hf_to_gguf.py model "$hf" "$gguf.tmp" --outtype "$OUTTYPE"
    mv "$gguf.tmp" "$gguf"
    rm -rf "$hf"  # only the GGUF is needed again
  fi
  echo "== llama.cpp $shape $OUTTYPE threads $THREADS"
  # The KV cache in the weights' type, as bucketrl keeps it (F32 weights: F32 cache; BF16: BF16).
  "$LLAMACPP_BIN/llamacpp-bench" "$gguf" --threads "$THREADS" --prompt 64 --gen 32 --group 8 --reps "$REPS" --kv "$OUTTYPE"
done
