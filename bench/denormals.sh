#!/usr/bin/env bash
# Denormal floats: pretraining the skill demo's base shape (three-digit addition, batch 256,
# checks every 50 steps) for STEPS steps with denormals kept (BRL_KEEP_DENORMALS=1) and flushed
# to zero (the default, src/model/threads.h), interleaved, ROUNDS times. Prints seconds per 50
# steps over the first and the last 500 steps and in all: kept, the time per step grows as
# training makes denormals; flushed, it stays flat.
#   bench/denormals.sh [ROUNDS] [STEPS]     (default 1 round of 1500 steps; after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-1}
STEPS=${2:-1500}
B=${BUILD_DIR:-build}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
[[ -x $B/bucketrl ]] || { echo "no $B/bucketrl: cmake --build $B --target bucketrl" >&2; exit 1; }
echo "| round | denormals | s / 50 steps, first 500 | s / 50 steps, last 500 | seconds, $STEPS steps |"
echo "|---|---|---|---|---|"
for ((r = 1; r <= ROUNDS; r++)); do
  for mode in kept flushed; do
    keep=0
    [[ $mode == kept ]] && keep=1
    BRL_KEEP_DENORMALS=$keep "$B/bucketrl" pretrain --out "$W/base" --max-operand 999 --batch-size 256 \
      --max-steps "$STEPS" --target-accuracy 2 >"$W/log" 2>&1
    # "<time> info pretrain step S/N: ..." -> seconds since midnight per check.
    awk -v r="$r" -v m="$mode" -v n="$STEPS" '
      / pretrain step [0-9]+\// {
        split($1, d, "T"); split(d[2], t, ":"); s = t[1] * 3600 + t[2] * 60 + t[3]
        split($5, st, "/"); at[st[1]] = s
      }
      END {
        first = (at[500] - at[50]) / 9; last = (at[n] - at[n - 450]) / 9
        printf "| %d | %s | %.2f | %.2f | %.0f |\n", r, m, first, last, (at[n] - at[50]) * n / (n - 50)
      }' "$W/log"
  done
done
