#!/usr/bin/env bash
# More threads must never be slower: pretraining (the demo's batch 256, and 64), the GRPO+LoRA
# training step (demo shape) and generation (small shape: prompt, decode of 1 and of a group
# of 8) at 1 and 2 threads, the two sides interleaved, ROUNDS times; medians, ranges and the
# speed-up of 2 threads over 1. Exit status 1 if 2 threads were slower anywhere (by more than
# 3 %, the noise of this machine's medians).
#   bench/threads.sh [ROUNDS]     (default 5; after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
B=${BUILD_DIR:-build}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
for x in bucketrl train_step_bench generate_bench; do
  [[ -x $B/$x ]] || { echo "no $B/$x: cmake --build $B --target $x" >&2; exit 1; }
done
# name, then a command printing one number (seconds, lower is better) for threads $T.
pretrain() {  # pretraining: wall seconds for a fixed number of steps (held-out checks included)
  local s=$EPOCHREALTIME
  "$B/bucketrl" pretrain --out "$W/base" --batch-size "$1" --max-steps "$2" --target-accuracy 2 --threads "$T" >/dev/null 2>&1
  awk -v a="$s" -v b="$EPOCHREALTIME" 'BEGIN {print b - a}'
}
step() { "$B/train_step_bench" --shape demo --repeats 5 --threads "$T" --json 2>/dev/null | sed 's/.*"step_seconds": \([0-9.e-]*\).*/\1/'; }
gen() {  # seconds per token from generate_bench's tokens/s line $1
  "$B/generate_bench" --shape small --repeats 3 --threads "$T" 2>/dev/null | awk -v k="$1" 'index($0, k) == 1 {print 1 / $NF}'
}
cases=("pretrain batch 256 (30 steps)|pretrain 256 30" "pretrain batch 64 (60 steps)|pretrain 64 60"
       "GRPO+LoRA step, demo shape|step" "prompt 64 tokens, small|gen 'prompt tok/s'"
       "decode 1 seq, small|gen 'decode 1 seq'" "decode 8 seqs, small|gen 'decode 8 seqs'")
for ((r = 1; r <= ROUNDS; r++)); do
  echo "[round $r/$ROUNDS]" >&2
  for c in "${cases[@]}"; do
    for T in 1 2; do
      v=$(eval "${c#*|}")
      echo "${c%%|*}|$T|$v" >>"$W/raw"
    done
  done
done
python3 - "$W/raw" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, t, v = line.rstrip("\n").split("|")
    rows.setdefault(name, {}).setdefault(int(t), []).append(float(v))
print("| what | 1 thread (s) | 2 threads (s) | 2 threads vs 1 |")
print("|---|---|---|---|")
bad = []
for name, d in rows.items():
    m1, m2 = statistics.median(d[1]), statistics.median(d[2])
    f = lambda v, m: f"{m:.4g} ({min(v):.4g}-{max(v):.4g})"
    print(f"| {name} | {f(d[1], m1)} | {f(d[2], m2)} | {m1 / m2:.2f}x |")
    if m2 > 1.03 * m1:
        bad.append(name)
print(f"\n{len(next(iter(rows.values()))[1])} rounds, medians (range); seconds per run, per step or per token")
if bad:
    print("SLOWER with 2 threads: " + ", ".join(bad))
    sys.exit(1)
PY
