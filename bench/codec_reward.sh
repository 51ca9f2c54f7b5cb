#!/usr/bin/env bash
# Final held-out accuracy per update codec on the demo task (issue 6): the demo recipe over a
# directory bucket with WORKERS workers for a fixed training time (no early stop), once per
# codec, REPS times, alternating codecs so machine noise hits all alike. Also reports the
# mean bytes per update each codec put in the bucket.
#   bench/codec_reward.sh [REPS]        (default 1)
#   env: OUT (runs/codec-bench), WORKERS (2), SECONDS_PER_RUN (90), CODECS ("fp32 bf16 int8 int4"),
#        LR (2e-4: five times below the demo's, whose rate reaches 0.9 in one version and
#        could not tell codecs apart), EXE (build/bucketrl)
# The base model is made once (OUT/base, not timed) and shared by every run.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-1}
OUT=${OUT:-runs/codec-bench} WORKERS=${WORKERS:-2} SECS=${SECONDS_PER_RUN:-90} LR=${LR:-2e-4}
CODECS=${CODECS:-"fp32 bf16 int8 int4"} EXE=${EXE:-build/bucketrl}
results=$OUT/results.jsonl
mkdir -p "$OUT"
: >"$results"
source bench/demo_util.sh
# The base model first, so that every codec gets the same training time.
demo_base "$OUT"
for ((r = 1; r <= REPS; ++r)); do
  for codec in $CODECS; do
    echo "== rep $r: codec $codec, $WORKERS workers, ${SECS} s"
    demo_run "$OUT/$codec-$r.log" --out "$OUT" --workers "$WORKERS" --time-limit "$SECS" --target-accuracy 2 --http off \
      --set sync.codec="$codec" --set grpo.learning_rate="$LR"
    summary=$(demo_summary "$OUT")
    # Bytes per update from the workers' heartbeats; a run with no update is an error, not 0 bytes.
    bytes=$("$EXE" status --bucket "$OUT/run/bucket" --json |
      python3 -c 'import json,sys; w=json.load(sys.stdin)["workers"]; b=sum(x.get("bytes_uploaded",0) for x in w); u=sum(x.get("updates",0) for x in w); sys.exit("bench: no worker uploaded an update") if u == 0 else print(b/u)')
    python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j.update(rep=int(sys.argv[2]), codec=sys.argv[3], bytes_per_update=float(sys.argv[4])); print(json.dumps(j))' \
      "$summary" "$r" "$codec" "$bytes" >>"$results"
    tail -1 "$results"
  done
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
base = None
print(f"\n{'codec':6} {'runs':>4} {'final acc (median)':>18} {'best acc':>8} {'versions':>8} {'bytes/update':>12} {'% of fp32':>9}")
for c in dict.fromkeys(r["codec"] for r in rows):
    rs = [r for r in rows if r["codec"] == c]
    b = statistics.median(r["bytes_per_update"] for r in rs)
    base = base or b
    print(f"{c:6} {len(rs):>4} {statistics.median(r['final_accuracy'] for r in rs):>18.3f} "
          f"{statistics.median(r['best_accuracy'] for r in rs):>8.3f} {statistics.median(r['versions'] for r in rs):>8.0f} "
          f"{b:>12.0f} {100 * b / base:>8.1f}%")
PY
