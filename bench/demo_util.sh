# Sourced by the benchmark scripts that drive `bucketrl demo` (codec_reward.sh, sync_vs_async.sh).
# A run's exit status: 0 target reached, 2 not reached (both results), 3 `verify` failed, 1 an
# error. Anything but 0 or 2, or a summary that is missing or says verify failed, stops the
# benchmark with the log's tail: a broken run must not become a data point.

# demo_run LOG ARGS...: `$EXE demo ARGS...` with its output in LOG.
demo_run() {
  local log=$1 rc=0
  shift
  "$EXE" demo "$@" >"$log" 2>&1 || rc=$?
  if [[ $rc -ne 0 && $rc -ne 2 ]]; then
    tail -n 30 "$log" >&2
    echo "bench: \`$EXE demo $*\` failed (exit $rc; log $log)" >&2
    exit 1
  fi
}

# demo_base OUT: the demo's base model in OUT/base (made once, not timed; reused while the
# recipe and task are the same).
demo_base() {
  demo_run "$1/base.log" --out "$1" --time-limit 1 --http off
  [[ -f $1/base/model.safetensors ]] || { echo "bench: no base model in $1/base (log $1/base.log)" >&2; exit 1; }
}

# demo_summary OUT: OUT/run/summary.json of the last run, checked (present, verify OK).
demo_summary() {
  local f=$1/run/summary.json
  [[ -f $f ]] || { echo "bench: the run wrote no $f" >&2; exit 1; }
  python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1])).get("verify_ok") else 1)' "$f" ||
    { echo "bench: bucketrl verify failed on the run in $1/run (see $f)" >&2; exit 1; }
  echo "$f"
}
