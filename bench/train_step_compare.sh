#!/usr/bin/env bash
# The GRPO+LoRA training step, bucketrl (build/train_step_bench) beside the same step in
# PyTorch (bench/train_step_torch.py on the .venv's torch, the same libtorch we link), with
# glibc's allocator and with tcmalloc preloaded. Runs the sides in turn, ROUNDS times
# (interleaved: machine noise hits every side alike), and prints medians and the ratio of each
# round's pair as median (min-max) in a Markdown table (raw JSON lines in $OUT, default /tmp).
#   [REPS=3] bench/train_step_compare.sh [ROUNDS] [SHAPE...]   (default: 5 demo small qwen2.5-0.5b)
# Needs: scripts/setup.sh; cmake --build build --target train_step_bench.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
shift || true
SHAPES=("$@")
[[ ${#SHAPES[@]} -gt 0 ]] || SHAPES=(demo small qwen2.5-0.5b)
BENCH=${BUILD_DIR:-build}/train_step_bench
PY=${BRL_PYTHON:-.venv/bin/python}
TCMALLOC=$(ls /usr/lib/*-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null | head -1 || true)
[[ -x $BENCH ]] || { echo "no $BENCH: cmake --build build --target train_step_bench" >&2; exit 1; }
$PY -c 'import torch' 2>/dev/null || { echo "no PyTorch for $PY: scripts/setup.sh" >&2; exit 1; }
mkdir -p "${OUT:-/tmp}"
OUT=${OUT:-/tmp}/train_step_compare.jsonl
: > "$OUT"
for shape in "${SHAPES[@]}"; do
  reps=${REPS:-3}; [[ $shape == demo ]] && reps=${REPS:-7}
  for ((i = 1; i <= ROUNDS; i++)); do
    echo "[$shape round $i/$ROUNDS]" >&2
    "$BENCH" --shape "$shape" --repeats $reps --json 2>/dev/null >> "$OUT"
    $PY bench/train_step_torch.py --shape "$shape" --repeats $reps --json 2>/dev/null >> "$OUT"
    if [[ -n $TCMALLOC ]]; then
      LD_PRELOAD=$TCMALLOC $PY bench/train_step_torch.py --shape "$shape" --repeats $reps --json 2>/dev/null >> "$OUT"
    fi
  done
done
$PY - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
med = lambda xs: statistics.median(xs)
print("| shape | batch x tokens | bucketrl tok/s | % of GEMM ceiling | PyTorch tok/s (glibc) | ratio | PyTorch tok/s (tcmalloc) | ratio |")
print("|---|---|---|---|---|---|---|---|")
for shape in dict.fromkeys(r["shape"] for r in rows):
    ours = [r for r in rows if r["shape"] == shape and r["impl"] == "bucketrl"]
    pt = {a: [r["tokens_per_second"] for r in rows if r["shape"] == shape and r["impl"] == "pytorch" and r["allocator"] == a]
          for a in ("glibc", "tcmalloc")}
    ours_tps = [r["tokens_per_second"] for r in ours]
    o = med(ours_tps)
    frac = med([r["fraction_of_ceiling"] for r in ours])
    ceil = med([r["gemm_ceiling_gflops"] for r in ours])
    def cell(a):
        if not pt[a]: return "- | -"
        ratios = [x / y for x, y in zip(ours_tps, pt[a])]  # round i of each side: run back to back
        return f"{med(pt[a]):.0f} | {med(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)} rounds)"
    cells = [cell(a) for a in ("glibc", "tcmalloc")]
    r0 = ours[0]
    print(f"| {shape} | {r0['batch']} x {r0['prompt'] + r0['completion']} | {o:.0f} | {100 * frac:.0f} % of {ceil:.0f} GFLOP/s | {cells[0]} | {cells[1]} |")
PY
