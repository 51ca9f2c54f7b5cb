#!/usr/bin/env bash
# bucketrl's GRPO beside TRL's GRPOTrainer on the same work: one base folder (`bucketrl pretrain
# --recipe`), the same prompts (`bucketrl dataset`), the same reward rule and the same settings
# (the recipe's run config, read by bench/trl_grpo.py as it is). Per seed, four arms:
#   trl     TRL GRPOTrainer + PEFT LoRA (.venv, scripts/setup.sh --test), one process
#   train   `bucketrl train`, one process
#   run2    `bucketrl run --workers 2` over a directory bucket (proxy + evaluator as well)
#   run4    `bucketrl run --workers 4`
# Every arm sees the same number of samples (steps x completions per step; a run's workers
# share them). Then bench/trl_compare_report.py draws OUT/compare.svg and writes OUT/compare.md.
#
# Usage: bench/trl_compare.sh [--recipe fast|skill] [--seeds "1 2 3"] [--steps N] [--eval-steps K]
#                             [--arms "trl train run2 run4"] [--out DIR] [--set section.key=value]...
# Timings: one arm at a time on this machine; threads as the recipe sets them (train.threads = 1;
# TRL gets torch.set_num_threads(1)). On 2 cores, 4 workers + proxy + evaluator share 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BRL=${BRL:-build/bucketrl}
PY=${BRL_PYTHON:-.venv/bin/python}
recipe=fast seeds="1 2 3" steps=60 eval_steps=5 arms="trl train run2 run4" out="" sets=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --recipe) recipe=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --eval-steps) eval_steps=$2; shift 2 ;;
    --arms) arms=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    *) echo "trl_compare.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
out=${out:-runs/trl-compare-$recipe}
mkdir -p "$out"
[[ -x $BRL ]] || { echo "trl_compare.sh: $BRL is missing: build first (scripts/setup.sh)" >&2; exit 2; }
[[ -x $PY ]] || { echo "trl_compare.sh: $PY is missing: scripts/setup.sh --test installs TRL" >&2; exit 2; }

base=$out/base
if [[ ! -f $base/model.safetensors ]]; then
  echo "== base model ($recipe recipe) -> $base"
  "$BRL" pretrain --recipe "$recipe" --out "$base" --threads 1 > "$out/pretrain.log" 2>&1
  tail -1 "$out/pretrain.log"
fi
cfg=$out/run.json
"$BRL" demo --recipe "$recipe" --print-config --set "model.path=$base" "${sets[@]}" > "$cfg"
per_step=$("$PY" -c "import json,sys; g=json.load(open(sys.argv[1]))['grpo']; print(-(-g['per_device_train_batch_size'] * g['gradient_accumulation_steps'] // g['num_generations']))" "$cfg")
"$BRL" dataset --config "$cfg" --num $((steps * per_step)) > "$out/train.jsonl"
"$BRL" dataset --config "$cfg" --split eval > "$out/eval.jsonl"

for s in $seeds; do
  for arm in $arms; do
    dir=$out/$arm-s$s
    rm -rf "$dir"
    mkdir -p "$dir"
    echo "== $arm, seed $s -> $dir"
    t0=$SECONDS
    case $arm in
      trl)
        "$PY" bench/trl_grpo.py --config "$cfg" --train "$out/train.jsonl" --eval "$out/eval.jsonl" --out "$dir" \
          --seed "$s" --max-steps "$steps" --eval-steps "$eval_steps" --threads 1 > "$dir/log" 2>&1 ;;
      train)
        "$BRL" train --config "$cfg" --set "grpo.seed=$s" --set "grpo.max_steps=$steps" \
          --set "train.eval_steps=$eval_steps" --set "train.output_dir=$dir" --set train.eval_pass_k=0 \
          --set train.save_steps=0 > "$dir/log" 2>&1 ;;
      run*)
        w=${arm#run}
        "$BRL" run --config "$cfg" --workers "$w" --set "grpo.seed=$s" --set "grpo.max_steps=$((steps / w))" \
          --set "train.output_dir=$dir" --set train.eval_pass_k=0 --eval-interval 1 --http off > "$dir/log" 2>&1
        "$BRL" status --bucket "$dir/bucket" --recent 1000000 --json > "$dir/status.json" ;;
      *) echo "trl_compare.sh: unknown arm $arm" >&2; exit 2 ;;
    esac
    echo "   $((SECONDS - t0)) s"
  done
done
"$PY" bench/trl_compare_report.py --out "$out" --recipe "$recipe" --seeds "$seeds" --arms "$arms" --steps "$steps"
