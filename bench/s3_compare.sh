#!/usr/bin/env bash
# Object-store throughput on the local RGW (scripts/s3-server.sh): our client vs boto3 on the
# same server, 1 MiB and 64 MiB objects, plus our directory backend for reference.
#   bench/s3_compare.sh [BUILD_DIR]      (default build; needs target s3_compare_bench)
# Prints a Markdown table; ratios are ours / boto3 (higher is better for us).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
BIN=$(find "$BUILD" -name s3_compare_bench -type f -perm -u+x | head -1)
[[ -n $BIN ]] || { echo "build the s3_compare_bench target in $BUILD first" >&2; exit 1; }
command -v /usr/bin/python3 >/dev/null && /usr/bin/python3 -c "import boto3" 2>/dev/null ||
  { echo "needs Debian's python3-boto3 (apt-get install python3-boto3)" >&2; exit 1; }
scripts/s3-server.sh start
# shellcheck disable=SC1091
source .cache/s3/env.sh
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
RUN=bench-$$
declare -A ours boto local
for spec in "1 40" "64 4"; do
  set -- $spec
  ours[$1]=$("$BIN" "s3://$BRL_S3_TEST_BUCKET/$RUN" "$1" "$2" "$SCRATCH")
  boto[$1]=$(/usr/bin/python3 bench/s3_compare_boto3.py "$BRL_S3_TEST_BUCKET" "$RUN" "$1" "$2" "$SCRATCH")
  local[$1]=$("$BIN" "$SCRATCH/dirstore" "$1" "$2" "$SCRATCH")
done
field() { /usr/bin/python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
echo "| object | op | bucketrl S3 (MiB/s) | boto3 (MiB/s) | ratio | bucketrl dir store (MiB/s) |"
echo "|---|---|---|---|---|---|"
for s in 1 64; do
  for op in put get; do
    a=$(field "${ours[$s]}" ${op}_mib_s); b=$(field "${boto[$s]}" ${op}_mib_s); l=$(field "${local[$s]}" ${op}_mib_s)
    r=$(/usr/bin/python3 -c "print(f'{$a/$b:.2f}')")
    echo "| $s MiB | $op | $a | $b | $r | $l |"
  done
done
