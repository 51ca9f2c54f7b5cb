#!/usr/bin/env bash
# TRL's steps_per_generation on the demo recipe, one process (`bucketrl train`): per setting and
# seed, the time per optimizer step, the held-out greedy accuracy every EVAL steps and the
# mean clip ratio (0 on-policy; the later steps of a generation batch are off-policy). Every
# setting trains the same completions per optimizer step (per_device_train_batch_size); a larger
# steps_per_generation samples them in fewer, larger generation batches.
#   bench/steps_per_generation.sh [SEEDS]   (default 5)
#   env: SPG ("1 2 4"), STEPS (30), EVAL (5), OUT (runs/spg-bench), EXE (build/bucketrl)
# The runs share OUT/base (the demo's base model; made first, not timed).
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${1:-5}
SPG=${SPG:-1 2 4} STEPS=${STEPS:-30} EVAL=${EVAL:-5} OUT=${OUT:-runs/spg-bench} EXE=${EXE:-build/bucketrl}
mkdir -p "$OUT"
source bench/demo_util.sh
demo_base "$OUT"
"$EXE" demo --print-config >"$OUT/run.json"
for ((seed = 1; seed <= SEEDS; ++seed)); do
  for spg in $SPG; do
    run=$OUT/seed$seed-spg$spg
    rm -rf "$run"
    "$EXE" train --config "$OUT/run.json" --set model.path="$OUT/base" --set grpo.seed=$seed \
      --set grpo.steps_per_generation=$spg --set grpo.max_steps="$STEPS" --set train.eval_steps="$EVAL" \
      --set train.save_steps=0 --set train.output_dir="$run" >"$run.log" 2>&1 ||
      { tail -n 20 "$run.log" >&2; echo "bench: the run failed (log $run.log)" >&2; exit 1; }
    python3 - "$run/metrics.jsonl" "$seed" "$spg" <<'PY'
import json, sys
path, seed, spg = sys.argv[1:]
lines = [json.loads(l) for l in open(path)]
steps = [l for l in lines if "loss" in l]
evals = " ".join(f"{l['eval_accuracy']:.3f}" for l in lines if "eval_accuracy" in l)
ms = steps[-1]["time_s"] / len(steps) * 1000
clip = sum(l["clip_ratio"] for l in steps) / len(steps)
print(f"seed {seed} steps_per_generation {spg}: {ms:.0f} ms/step, clip {clip:.4f}, held-out accuracy {evals}")
PY
  done
done
