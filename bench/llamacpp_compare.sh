#!/usr/bin/env bash
# Ours (bench/generate_bench) and llama.cpp (bench/llamacpp_bench.sh) side by side: ROUNDS
# rounds, each running both sides on every shape back to back (machine noise hits both
# alike); each side reports the median of REPS repeats per round. Prints tokens/s (median over
# rounds) and the ratio ours / llama.cpp as the median (min-max) of the rounds' ratios.
# Same threads; the same weight and KV-cache dtype on both sides (DTYPE).
#   bench/llamacpp_compare.sh BUILD_DIR [SHAPE...]   (default shapes: small qwen2.5-0.5b)
#   env: THREADS (2), REPS (5), ROUNDS (5), DTYPE (f32 | bf16: both sides)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?usage: bench/llamacpp_compare.sh BUILD_DIR [SHAPE...]}
shift
THREADS=${THREADS:-2} REPS=${REPS:-5} ROUNDS=${ROUNDS:-5} DTYPE=${DTYPE:-f32}
ours_bin=$(find "$BUILD" -name generate_bench -type f -perm -u+x | head -1)
[[ -n $ours_bin ]] || { echo "no generate_bench in $BUILD: cmake --build $BUILD --target generate_bench" >&2; exit 1; }
shapes=("$@")
[[ ${#shapes[@]} -gt 0 ]] || shapes=(small qwen2.5-0.5b)
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
for ((r = 1; r <= ROUNDS; ++r)); do
  for shape in "${shapes[@]}"; do
    echo "[round $r/$ROUNDS: $shape $DTYPE]" >&2
    l=$(THREADS=$THREADS REPS=$REPS OUTTYPE=$DTYPE bash bench/llamacpp_bench.sh "$shape")
    o=$("$ours_bin" --shape "$shape" --dtype "$DTYPE" --threads "$THREADS" --prompt 64 --new-tokens 32 --group 8 --repeats "$REPS")
    {
      awk -v s="$shape" -v r="$r" '$1=="prompt64"{print s, r, "prompt64", "llama", $2} $1=="decode1"{print s, r, "decode1", "llama", $2} $1=="decode8"{print s, r, "decode8", "llama", $2}' <<<"$l"
      awk -v s="$shape" -v r="$r" '/^prompt tok\/s/{print s, r, "prompt64", "ours", $3} /^decode 1 seq/{print s, r, "decode1", "ours", $5} /^decode [0-9]+ seqs tok\/s/{print s, r, "decode8", "ours", $5}' <<<"$o"
    } >>"$rows"
  done
done
python3 - "$rows" "$DTYPE" <<'PY'
import collections, statistics, sys
v = collections.defaultdict(dict)  # (shape, metric) -> {(side, round): tok/s}
for line in open(sys.argv[1]):
    shape, rnd, metric, side, x = line.split()
    v[(shape, metric)][(side, int(rnd))] = float(x)
print(f"{'shape':14} {'dtype':5} {'metric':9} {'ours tok/s':>10} {'llama tok/s':>11}  ours/llama median (min-max, rounds)")
for (shape, metric), d in v.items():
    rounds = sorted({r for _, r in d})
    ratios = [d[("ours", r)] / d[("llama", r)] for r in rounds if ("ours", r) in d and ("llama", r) in d and d[("llama", r)] > 0]
    if not ratios:
        sys.exit(f"bench: no pair of figures for {shape} {metric}: one side printed nothing")
    med = lambda side: statistics.median(d[(side, r)] for r in rounds if (side, r) in d)
    print(f"{shape:14} {sys.argv[2]:5} {metric:9} {med('ours'):>10.1f} {med('llama'):>11.1f}  "
          f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)})")
PY
