#!/usr/bin/env bash
# Checks the oracles the tests compare against: Hugging Face's own libraries from PyPI in the
# project's virtual environment (installed by scripts/setup.sh --test from
# requirements/oracles.txt), and the shared test data (real tokenizer files, golden ids).
# llama.cpp, the anchor of the CPU decode benchmarks, is separate: bench/llamacpp_setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${BRL_PYTHON:-.venv/bin/python}
DATA=${BRL_TESTDATA_DIR:-../shared/testdata}
"$PY" - <<'PY'
import importlib
for m in ("torch", "transformers", "peft", "trl", "tokenizers", "safetensors", "numpy"):
    mod = importlib.import_module(m)
    print(f"oracles: {m} {getattr(mod, '__version__', '?')}")
PY
[[ -f $DATA/tokenizers/qwen3/tokenizer.json ]] || {
  echo "oracles: shared test data missing at $DATA (set BRL_TESTDATA_DIR)" >&2
  exit 1
}
echo "oracles: ready ($PY; test data $DATA)"
