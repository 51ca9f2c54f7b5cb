#!/usr/bin/env bash
# Asynchronous training vs the synchronous baseline (a barrier per round), issue 6's anchor:
# the demo recipe with 4 workers, one of them made SLOW times slower (it sleeps (SLOW-1) x
# its step time after each step, so it uses no more CPU), both modes uploading every K GRPO
# steps. Reports the time to the held-out accuracy target of each mode and async / sync.
#   bench/sync_vs_async.sh [REPS]     (default 1; medians over REPS pairs, run alternately)
#   env: OUT (runs/sync-bench), WORKERS (4), SLOW (4), STEPS (K = 4), TARGET (0.9),
#        LR (1e-4: ten times below the demo's, so that reaching the target takes many
#        rounds rather than one or two), LIMIT (900 s per run), EXE (build/bucketrl)
# Both modes share OUT/base (the cached demo base model; made first, not timed).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-1}
OUT=${OUT:-runs/sync-bench} WORKERS=${WORKERS:-4} SLOW=${SLOW:-4} STEPS=${STEPS:-4}
TARGET=${TARGET:-0.9} LR=${LR:-1e-4} LIMIT=${LIMIT:-900} EXE=${EXE:-build/bucketrl}
slow=()
for ((i = 1; i < WORKERS; ++i)); do slow+=(1); done
slow+=("$SLOW")
results=$OUT/results.jsonl
mkdir -p "$OUT"
: >"$results"
source bench/demo_util.sh
demo_base "$OUT"
for ((r = 1; r <= REPS; ++r)); do
  for mode in async sync; do
    flag=()
    [[ $mode == sync ]] && flag=(--sync)
    echo "== rep $r: $mode, $WORKERS workers, slowdown ${slow[*]}, sync every $STEPS steps"
    demo_run "$OUT/$mode-$r.log" --out "$OUT" --workers "$WORKERS" --slowdown "${slow[@]}" "${flag[@]}" \
      --target-accuracy "$TARGET" --time-limit "$LIMIT" --set sync.sync_steps="$STEPS" --set grpo.learning_rate="$LR" --http off
    tail -6 "$OUT/$mode-$r.log"
    summary=$(demo_summary "$OUT")
    python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["rep"]=int(sys.argv[2]); print(json.dumps(j))' \
      "$summary" "$r" >>"$results"
  done
done
python3 - "$results" "$TARGET" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(mode, key):
    v = [r[key] for r in rows if r["mode"] == mode]
    return statistics.median(v) if v else float("nan")
print(f"\n{'mode':6} {'runs':>4} {'s to target (median)':>21} {'reached':>8} {'final acc':>9} {'versions':>8}")
for m in ("async", "sync"):
    rs = [r for r in rows if r["mode"] == m]
    hit = sum(r["seconds_to_target"] >= 0 for r in rs)
    t = [r["seconds_to_target"] if r["seconds_to_target"] >= 0 else float("inf") for r in rs]
    print(f"{m:6} {len(rs):>4} {statistics.median(t):>21.1f} {hit:>5}/{len(rs)} {med(m,'final_accuracy'):>9.3f} {med(m,'versions'):>8.0f}")
ta = statistics.median([r["seconds_to_target"] if r["seconds_to_target"] >= 0 else float("inf") for r in rows if r["mode"] == "async"])
ts = statistics.median([r["seconds_to_target"] if r["seconds_to_target"] >= 0 else float("inf") for r in rows if r["mode"] == "sync"])
print(f"\nasync / sync time to held-out accuracy {sys.argv[2]}: {ta / ts:.2f}  (goal <= 0.6)")
PY
