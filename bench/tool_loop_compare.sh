#!/usr/bin/env bash
# The host work of a round of tool calling, ours beside TRL's: grpo::run_tool_loop
# (build/tool_loop_bench) and TRL 1.16's GRPOTrainer._tool_call_loop with the first turns'
# parse_response (tools/trl/tool_loop.py time), generation stubbed out on both sides, on the same
# 64 completions (one call each, then an answer) with the same model folder (the shared test
# data's tokenizer, TRL's chat template). TRL calls its tools in-process; ours runs the tool
# command (one process a round), timed apart too.
#   bench/tool_loop_compare.sh [qwen3|llama3] [repeats]
set -euo pipefail
cd "$(dirname "$0")/.."
family=${1:-qwen3} repeats=${2:-7}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
BRL_TOKENIZERS=${BRL_TOKENIZERS:-$PWD/../shared/testdata/tokenizers} .venv/bin/python tools/trl/tool_loop.py model "$tmp/model" "$family"
ours=$(build/tool_loop_bench --model "$tmp/model" --repeats "$repeats" --cases "$tmp/cases.json")
echo "$ours" | head -2
trl=$(.venv/bin/python tools/trl/tool_loop.py time "$repeats" < "$tmp/cases.json")
.venv/bin/python - "$(echo "$ours" | tail -1)" "$trl" <<'PY'
import json, sys
ours, trl = json.loads(sys.argv[1]), json.loads(sys.argv[2])[0]
print(f"TRL's loop: {trl['whole_ms']:.2f} ms; ours {ours['whole_ms']:.2f} ms "
      f"({trl['whole_ms'] / ours['whole_ms']:.1f}x faster; without the tool command's process "
      f"{trl['whole_ms'] / (ours['whole_ms'] - ours['command_ms']):.1f}x)")
PY
