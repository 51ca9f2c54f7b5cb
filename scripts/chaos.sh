#!/usr/bin/env bash
# Chaos soak: the proxy and three workers (the real bucketrl executable) train a tiny task
# while one of them is SIGKILLed every moment or so (at random, or right as it writes an update
# or a version) and restarted; at the end a clean stop and the run's invariants, checked from
# the bucket alone (tests/launch/chaos_slow_test.cpp, which this runs for as long as asked).
#   scripts/chaos.sh                          40 s on a temporary directory bucket (the CI size)
#   scripts/chaos.sh --seconds 3600           an hour
#   scripts/chaos.sh --bucket s3://B/chaos-1  on S3 (a fresh prefix; AWS_* variables as usual)
#   --seed N: another sequence of victims and delays;  --keep: keep the run's folder (logs)
#   --new-machines: every restarted worker comes back with an empty disk (a replaced spot machine)
# Prints the kills survived and the verification; exit status non-zero if an invariant fails.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_WANTED=40
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) SECONDS_WANTED=$2; shift 2 ;;
    --bucket) export BRL_CHAOS_BUCKET=$2; shift 2 ;;
    --seed) export BRL_CHAOS_SEED=$2; shift 2 ;;
    --keep) export BRL_KEEP_TMP=1; shift ;;
    --new-machines) export BRL_CHAOS_NEW_MACHINES=1; shift ;;
    -h|--help) sed -n "2,11p" "$0"; exit 0 ;;
    *) echo "chaos.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
export BRL_CHAOS_SECONDS=$SECONDS_WANTED
BUILD=${BUILD_DIR:-build}
[[ -f $BUILD/CMakeCache.txt ]] || cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j"${JOBS:-$(nproc)}" --target bucketrl chaos_slow_test >/dev/null
cd "$BUILD"  # where ctest runs it
exec ./tests/chaos_slow_test --gtest_filter='Chaos.KillNine*' --gtest_brief=0
