#!/usr/bin/env bash
# Ours (bench/generate_bench) and llama.cpp (bench/llamacpp_bench.sh) side by side, one shape
# after the other in the same run, with ratios ours / llama.cpp. Medians; same threads.
#   bench/llamacpp_compare.sh BUILD_DIR [SHAPE...]   (default shapes: small qwen2.5-0.5b)
#   env: THREADS (2), REPS (5), DTYPE (f32 | bf16: both sides)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?usage: bench/llamacpp_compare.sh BUILD_DIR [SHAPE...]}
shift
THREADS=${THREADS:-2} REPS=${REPS:-5} DTYPE=${DTYPE:-f32}
ours_bin=$(find "$BUILD" -name generate_bench -type f -perm -u+x | head -1)
[[ -n $ours_bin ]] || { echo "no generate_bench in $BUILD: cmake --build $BUILD --target generate_bench" >&2; exit 1; }
shapes=("$@")
[[ ${#shapes[@]} -gt 0 ]] || shapes=(small qwen2.5-0.5b)
printf "%-14s %-5s | %-22s | %-22s | %-22s\n" shape dtype "prompt64 ours/lcpp" "decode1 ours/lcpp" "decode8 ours/lcpp"
for shape in "${shapes[@]}"; do
  l=$(THREADS=$THREADS REPS=$REPS OUTTYPE=$DTYPE bash bench/llamacpp_bench.sh "$shape")
  o=$("$ours_bin" --shape "$shape" --dtype "$DTYPE" --threads "$THREADS" --prompt 64 --new-tokens 32 --group 8 --repeats "$REPS" 2>/dev/null)
  lp=$(awk '$1=="prompt64"{print $2}' <<<"$l"); l1=$(awk '$1=="decode1"{print $2}' <<<"$l"); l8=$(awk '$1=="decode8"{print $2}' <<<"$l")
  op=$(awk '/^prompt tok\/s/{print $3}' <<<"$o"); o1=$(awk '/^decode 1 seq/{print $5}' <<<"$o"); o8=$(awk '/^decode [0-9]+ seqs tok\/s/{print $5}' <<<"$o")
  cell() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a == "" || b == "" || b == 0) print "n/a"; else printf "%.1f / %.1f = %.2f\n", a, b, a / b }'; }
  printf "%-14s %-5s | %-22s | %-22s | %-22s\n" "$shape" "$DTYPE" "$(cell "$op" "$lp")" "$(cell "$o1" "$l1")" "$(cell "$o8" "$l8")"
done
