#!/usr/bin/env bash
# Run ON the GPU machine (the device tool), in one call: build what the GPU checks need, run
# the GPU tests, then the benchmarks of issues 16 and 17 side by side with Hugging Face's
# (transformers generate, PEFT) on that machine's torch, then a demo over a directory bucket
# with GPU workers. Each step has its own time limit; a failed step does not stop the later
# ones. $OUT gets all.log, build.log and the demo's logs (demo-logs.tgz). From here:
#   run(command="scripts/gpu_check.sh", carry=[".cache/gpu-debs", ".cache/demo-base"], timeout_s=560)
# (scripts/gpu_debs.sh makes both here; .cache/demo-base, the demo's base pretrained here, saves
# the call the minute or more of pretraining it on that machine's CPU.)
# GPU_CHECK_STEPS picks steps (default, in this order: build tests train hf_step prof demo gen
# hf_gen windows lmhead: issue 17's first, so a call cut short loses the rollouts; also big (1.5B and
# 7B shapes), nsys, hf_gen64)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
PY=${BRL_PYTHON:-/opt/torch/.venv/bin/python3}
STEPS=${GPU_CHECK_STEPS:-build tests train hf_step prof demo gen hf_gen windows lmhead}
B=build-gpu
export LD_LIBRARY_PATH=/tmp/brl-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
has() { [[ " $STEPS " == *" $1 "* ]]; }
step() {  # step NAME SECONDS CMD...: runs CMD under a time limit, output to stdout and $OUT/all.log
  local name=$1 secs=$2; shift 2
  echo "=== $(date +%T) $name: $*"
  local t0=$SECONDS
  local log=$OUT/all.log
  [[ $name == build ]] && log=$OUT/build.log
  timeout -k 5 "$secs" "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name rc=$rc in $((SECONDS - t0)) s" | tee -a "$OUT/all.log"
  return "$rc"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$OUT/all.log"
if has build; then
  BRL_TARGETS="bucketrl cuda_test generate_cuda_test trainer_cuda_test generate_bench train_step_bench" \
    step build 330 scripts/gpu_build.sh || { tail -40 "$OUT/build.log"; exit 1; }
fi
step version 30 $B/bucketrl version
if has tests; then
  for t in cuda_test generate_cuda_test trainer_cuda_test; do step tests 120 $B/tests/$t; done
fi
SHAPE=(--shape qwen2.5-0.5b --device cuda --dtype bf16)
if has train; then
  step train 90 $B/train_step_bench "${SHAPE[@]}" --batch 8 --prompt 64 --completion 128 --repeats 5 --json
  step train 120 $B/train_step_bench "${SHAPE[@]}" --batch 64 --prompt 64 --completion 256 --repeats 5 --json
  step train 120 $B/train_step_bench "${SHAPE[@]}" --batch 64 --prompt 64 --completion 256 --repeats 3 --json --gradient-checkpointing
fi
if has hf_step; then
  step hf_step 90 "$PY" bench/hf_bench.py step --batch 8 --prompt 64 --completion 128 --repeats 5
  step hf_step 90 "$PY" bench/hf_bench.py step --batch 64 --prompt 64 --completion 256 --repeats 5
  # The 0.5B's 24 layers at tiny widths: what a step costs the host (dispatch, autograd, launches).
  step hf_step 60 $B/train_step_bench --shape thin24 --device cuda --dtype bf16 --batch 8 --prompt 64 --completion 128 --repeats 5 --json
  step hf_step 60 "$PY" bench/hf_bench.py step --shape thin24 --batch 8 --prompt 64 --completion 128 --repeats 5
fi
if has prof; then
  # One step of each side under the profiler (Kineto: host ops, kernels, copies), side by side:
  # where the GPU time goes and how much of the step it idles waiting for the host.
  for bc in "8 128" "64 256"; do
    read -r n c <<<"$bc"
    step prof 90 $B/train_step_bench "${SHAPE[@]}" --batch $n --prompt 64 --completion $c --repeats 1 --profile /tmp/ours-$n.json
    step prof 90 "$PY" bench/hf_bench.py step --batch $n --prompt 64 --completion $c --repeats 1 --profile /tmp/peft-$n.json
    step prof 60 "$PY" bench/trace_summary.py ours=/tmp/ours-$n.json peft=/tmp/peft-$n.json --top 20
    gzip -c /tmp/ours-$n.json >"$OUT/ours-$n.json.gz"
    gzip -c /tmp/peft-$n.json >"$OUT/peft-$n.json.gz"
  done
fi
if has demo; then
  # The demo's recipe with two GPU workers and a GPU evaluator over a directory bucket; the
  # base is pretrained on the CPU (on the one here, when carried: the demo reuses a base marked
  # with its recipe). Exit 0 = target reached and `bucketrl verify` ok.
  if [[ -f .cache/demo-base/model.safetensors ]]; then mkdir -p /tmp/brl-demo && cp -r .cache/demo-base /tmp/brl-demo/base; fi
  step demo 170 $B/bucketrl demo --device cuda --workers 2 --time-limit 150 --out /tmp/brl-demo --http off
  tar czf "$OUT/demo-logs.tgz" -C /tmp/brl-demo --exclude='*.safetensors' --exclude=bucket . 2>/dev/null || true
fi
if has gen; then
  step gen 120 $B/generate_bench "${SHAPE[@]}" --prompts 8 --group 8 --prompt 64 --new-tokens 256 --repeats 3
  step gen 120 $B/generate_bench "${SHAPE[@]}" --prompts 32 --group 8 --prompt 64 --new-tokens 256 --repeats 3
  # As a worker generates: with its adapter on (r 16, all seven modules, applied on the fly).
  step gen 120 $B/generate_bench "${SHAPE[@]}" --prompts 8 --group 8 --prompt 64 --new-tokens 256 --repeats 3 --lora-r 16
fi
if has hf_gen; then
  step hf_gen 90 "$PY" bench/hf_bench.py generate --prompts 32 --group 8 --prompt 64 --new-tokens 256 --repeats 1
fi
if has windows; then
  # A shuffled generation batch of varied lengths in micro-batches of 8 (gradient accumulation or
  # steps_per_generation 8): each forwarding its rows' window vs the whole width.
  step windows 120 $B/train_step_bench "${SHAPE[@]}" --batch 64 --prompt 64 --completion 256 --micro-batch 8 \
    --varied-lengths --repeats 3
fi
if has lmhead; then
  # What the ScaleRL / TRL mismatch knobs cost in the step (the mismatch itself: trainer_cuda_test's
  # SamplerMismatchPerDtype in the tests step): the f32 LM head, and the correction's weights.
  step lmhead 90 $B/train_step_bench "${SHAPE[@]}" --batch 64 --prompt 64 --completion 256 --repeats 3 --json --cast-lm-head-fp32
  step lmhead 90 $B/train_step_bench "${SHAPE[@]}" --batch 64 --prompt 64 --completion 256 --repeats 3 --json --sampling-correction
fi
if has big; then
  # Issue 16/17's larger shapes, ours and Hugging Face's (weights drawn on the GPU).
  for shape in qwen2.5-1.5b qwen2.5-7b; do
    S=(--shape $shape --device cuda --dtype bf16)
    step big 150 $B/generate_bench "${S[@]}" --prompts 32 --group 8 --prompt 64 --new-tokens 256 --repeats 2
    step big 120 $B/train_step_bench "${S[@]}" --batch 8 --prompt 64 --completion 128 --repeats 3 --json
    step big 120 $B/train_step_bench "${S[@]}" --batch 64 --prompt 64 --completion 256 --repeats 3 --json
    step big 120 "$PY" bench/hf_bench.py step --shape $shape --batch 8 --prompt 64 --completion 128 --repeats 3
    step big 120 "$PY" bench/hf_bench.py step --shape $shape --batch 64 --prompt 64 --completion 256 --repeats 3
    # Activations of 64 x 320 tokens through 28 layers: with gradient checkpointing, both sides.
    step big 150 $B/train_step_bench "${S[@]}" --batch 64 --prompt 64 --completion 256 --repeats 3 --json --gradient-checkpointing
    step big 150 "$PY" bench/hf_bench.py step --shape $shape --batch 64 --prompt 64 --completion 256 --repeats 3 --gradient-checkpointing
    step big 150 "$PY" bench/hf_bench.py generate --shape $shape --prompts 32 --group 8 --prompt 64 --new-tokens 256 --repeats 1
  done
fi
if has nsys && command -v nsys >/dev/null; then
  # Kernel time by kernel, for the two places below the goals (the step vs PEFT, decode vs bandwidth).
  step nsys 120 nsys profile -o /tmp/step --force-overwrite true --stats=true $B/train_step_bench "${SHAPE[@]}" --batch 8 --prompt 64 --completion 128 --repeats 3
fi
if has hf_gen64; then
  step hf_gen 60 "$PY" bench/hf_bench.py generate --prompts 8 --group 8 --prompt 64 --new-tokens 256 --repeats 1
fi
echo "=== $(date +%T) done"
