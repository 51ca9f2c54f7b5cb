#!/usr/bin/env bash
# Asynchronous training vs the synchronous baseline (a barrier per round), issue 6's anchor,
# with the controls of issue 24: the demo recipe with 4 workers, both modes on the same
# trigger (an upload every K GRPO steps; the time trigger is pushed out of reach), proxy and
# barrier polling every POLL s in both, and two settings interleaved rep by rep: no straggler
# (every worker at full speed) and one worker made SLOW times slower (after each busy stretch,
# step plus upload, it idles SLOW - 1 times as long, so it uses no more CPU). Reports, per
# setting and mode, the median and range of the time to the held-out accuracy target (from
# the run's start to the publication of the first version evaluated at the target; the
# evaluator runs back to back, --eval-interval 0, and its lag is not counted), the
# versions, the straggler's measured slowdown (the others' median samples/s over its own, from
# the heartbeats; in sync mode ~1 by design: the barrier paces everyone at the straggler's
# rate), and async / sync of the medians.
#   bench/sync_vs_async.sh [REPS]     (default 5: REPS x 2 settings x 2 modes runs, interleaved)
#   env: OUT (runs/sync-bench), WORKERS (4), SLOW (4), STEPS (K = 4), TARGET (0.9), POLL (0.05),
#        LR (1e-4: ten times below the demo's, so that reaching the target takes many
#        rounds rather than one or two), LIMIT (900 s per run), EXE (build/bucketrl)
# Every run shares OUT/base (the cached demo base model; made first, not timed).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-5}
OUT=${OUT:-runs/sync-bench} WORKERS=${WORKERS:-4} SLOW=${SLOW:-4} STEPS=${STEPS:-4}
TARGET=${TARGET:-0.9} LR=${LR:-1e-4} LIMIT=${LIMIT:-900} POLL=${POLL:-0.05} EXE=${EXE:-build/bucketrl}
results=$OUT/results.jsonl
mkdir -p "$OUT"
: >"$results"
source bench/demo_util.sh
demo_base "$OUT"
for ((r = 1; r <= REPS; ++r)); do
  for straggler in 1 "$SLOW"; do
    slow=()
    for ((i = 1; i < WORKERS; ++i)); do slow+=(1); done
    slow+=("$straggler")
    for mode in async sync; do
      flag=()
      [[ $mode == sync ]] && flag=(--sync)
      log=$OUT/$mode-slow$straggler-$r.log
      echo "== rep $r: $mode, $WORKERS workers, slowdown ${slow[*]}, upload every $STEPS steps, polls every $POLL s"
      demo_run "$log" --out "$OUT" --workers "$WORKERS" --slowdown "${slow[@]}" "${flag[@]}" \
        --target-accuracy "$TARGET" --time-limit "$LIMIT" --http off --eval-interval 0 --set grpo.learning_rate="$LR" \
        --set sync.sync_steps="$STEPS" --set sync.sync_interval_s=1e9 --set proxy.poll_interval_s="$POLL"
      tail -3 "$log"
      summary=$(demo_summary "$OUT")
      # The straggler (the last worker) against the others, from the final heartbeats.
      ratio=$("$EXE" status --bucket "$OUT/run/bucket" --json | python3 -c '
import json, statistics, sys
w = {x["worker"]: x["samples_per_s"] for x in json.load(sys.stdin)["workers"]}
last = "w%d" % (len(w) - 1)
others = [v for k, v in w.items() if k != last]
sys.exit("bench: no heartbeat rates") if not others or w.get(last, 0) <= 0 else print(statistics.median(others) / w[last])')
      python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j.update(rep=int(sys.argv[2]), straggler=float(sys.argv[3]), measured_slowdown=float(sys.argv[4])); print(json.dumps(j))' \
        "$summary" "$r" "$straggler" "$ratio" >>"$results"
    done
  done
done
python3 - "$results" "$TARGET" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
inf = float("inf")
def t(r): return r["version_seconds_to_target"] if r["version_seconds_to_target"] >= 0 else inf
print(f"\n{'straggler':>9} {'mode':6} {'runs':>4} {'reached':>7} {'s to target: median (range)':>28} {'versions':>8} {'its slowdown':>12}")
med = {}
for s in sorted({r["straggler"] for r in rows}):
    for m in ("async", "sync"):
        rs = [r for r in rows if r["mode"] == m and r["straggler"] == s]
        if not rs: continue
        ts = [t(r) for r in rs]
        med[(s, m)] = statistics.median(ts)
        hit = sum(x < inf for x in ts)
        print(f"{s:>9g} {m:6} {len(rs):>4} {hit:>4}/{len(rs)} {med[(s, m)]:>12.1f} ({min(ts):.1f}-{max(ts):.1f}) "
              f"{statistics.median(r['versions'] for r in rs):>8.0f} {statistics.median(r['measured_slowdown'] for r in rs):>11.2f}x")
for s in sorted({k[0] for k in med}):
    if (s, "async") in med and (s, "sync") in med:
        print(f"straggler {s:g}x: async / sync time to held-out accuracy {sys.argv[2]}: {med[(s, 'async')] / med[(s, 'sync')]:.2f}")
PY
