#!/usr/bin/env bash
# Held-out accuracy per update codec on the demo task (issues 6, 23): the demo recipe over a
# directory bucket with WORKERS workers for a fixed training time (no early stop), once per
# codec, REPS times, alternating codecs so machine noise hits all alike. Workers seed their
# sampling from the clock, so the reps are independent seeds. Reports the accuracy curve
# (the evaluator's latest held-out accuracy at fixed times, median and range over the reps),
# the final and best accuracy, and the mean bytes per update each codec put in the bucket.
#   bench/codec_reward.sh [REPS]        (default 1)
#   env: OUT (runs/codec-bench), WORKERS (2), SECONDS_PER_RUN (90),
#        CODECS ("fp32 bf16 int8 int4 topk_int2 topk_int4"),
#        LR (2e-4: five times below the demo's, whose rate reaches 0.9 in one version and
#        could not tell codecs apart), EXE (build/bucketrl), EXTRA (more demo arguments for
#        every run, e.g. "--set sync.topk_density=0.0625")
# The base model is made once (OUT/base, not timed) and shared by every run.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-1}
OUT=${OUT:-runs/codec-bench} WORKERS=${WORKERS:-2} SECS=${SECONDS_PER_RUN:-90} LR=${LR:-2e-4}
CODECS=${CODECS:-"fp32 bf16 int8 int4 topk_int2 topk_int4"} EXE=${EXE:-build/bucketrl}
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
      --set sync.codec="$codec" --set grpo.learning_rate="$LR" ${EXTRA:-}
    summary=$(demo_summary "$OUT")
    # Bytes per update from the workers' heartbeats; a run with no update is an error, not 0 bytes.
    bytes=$("$EXE" status --bucket "$OUT/run/bucket" --json |
      python3 -c 'import json,sys; w=json.load(sys.stdin)["workers"]; b=sum(x.get("bytes_uploaded",0) for x in w); u=sum(x.get("updates",0) for x in w); sys.exit("bench: no worker uploaded an update") if u == 0 else print(b/u)')
    # The accuracy curve: every held-out evaluation (evals/v*.json), seconds after version 0's.
    python3 - "$summary" "$r" "$codec" "$bytes" "$OUT/run/bucket/evals" >>"$results" <<'PY'
import glob, json, os, sys
j = json.load(open(sys.argv[1]))
evals = sorted((json.load(open(f)) for f in glob.glob(os.path.join(sys.argv[5], "v*.json"))), key=lambda e: e["time_ms"])
t0 = evals[0]["time_ms"]
j.update(rep=int(sys.argv[2]), codec=sys.argv[3], bytes_per_update=float(sys.argv[4]),
         curve=[[(e["time_ms"] - t0) / 1e3, e["accuracy"], e["version"]] for e in evals])
print(json.dumps(j))
PY
    tail -1 "$results"
  done
done
python3 - "$results" "$SECS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
secs = float(sys.argv[2])
marks = [t for t in (5, 10, 15, 20, 30, 45, 60, 90, 120, 180) if t <= secs]
def at(curve, t):  # the latest evaluation at or before t seconds
    seen = [a for s, a, _ in curve if s <= t]
    return seen[-1] if seen else float("nan")
print("held-out accuracy at t seconds after the start of training: median (min-max) over the reps")
print("| codec | " + " | ".join(f"{t} s" for t in marks) + " |")
print("|---|" + "---|" * len(marks))
for c in dict.fromkeys(r["codec"] for r in rows):
    cells = []
    for t in marks:
        v = [at(r["curve"], t) for r in rows if r["codec"] == c]
        cells.append(f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})")
    print(f"| {c} | " + " | ".join(cells) + " |")
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
