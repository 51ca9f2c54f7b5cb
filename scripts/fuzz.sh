#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*_fuzz.cpp, ASan + UBSan, build-san/) and runs each for
# a while on its seed corpus fuzz/corpus/<target>/. New inputs go to build-san/fuzz-corpus/,
# crashes to build-san/fuzz-artifacts/ (reproduce: build-san/fuzz/<target>_fuzz FILE).
#   scripts/fuzz.sh                        every target, 20 s each (.ci/run: --time 15)
#   scripts/fuzz.sh --time 3600 codec      one target for an hour
#   scripts/fuzz.sh --make-corpus          rewrite the seeds with the project's writers
# Exit status: non-zero as soon as a target finds a crash, leak, timeout or UB.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/san_build.sh

TIME=20
MAKE_CORPUS=0
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --time) TIME=$2; shift 2 ;;
    --make-corpus) MAKE_CORPUS=1; shift ;;
    -h|--help) sed -n "2,8p" "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=()
for f in fuzz/*_fuzz.cpp; do all+=("$(basename "$f" _fuzz.cpp)"); done
[[ ${#targets[@]} -eq 0 ]] && targets=("${all[@]}")

if [[ $MAKE_CORPUS == 1 ]]; then
  san_build make_corpus
  "$SAN_BUILD_DIR/fuzz/make_corpus" fuzz/corpus
  mkdir -p fuzz/corpus/tokenizer_json
  cp tests/tokenizer/data/tiny_*.json fuzz/corpus/tokenizer_json/
  echo "fuzz: seeds written to fuzz/corpus/ (byte_level.json: the demo's tokenizer, kept as is)"
  exit 0
fi

san_build "${targets[@]/%/_fuzz}"
for t in "${targets[@]}"; do
  work="$SAN_BUILD_DIR/fuzz-corpus/$t" art="$SAN_BUILD_DIR/fuzz-artifacts"
  mkdir -p "$work" "$art"
  echo "fuzz: $t for ${TIME}s"
  log="$art/$t.log"
  # -rss_limit_mb/-malloc_limit_mb: a hostile size must be refused, not allocated.
  status=0
  "$SAN_BUILD_DIR/fuzz/${t}_fuzz" "$work" "fuzz/corpus/$t" -max_total_time="$TIME" \
    -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=65536 \
    -artifact_prefix="$art/$t-" -print_final_stats=1 >"$log" 2>&1 || status=$?
  if [[ $status -ne 0 ]]; then
    tail -n 60 "$log"
    echo "fuzz: $t FAILED (exit $status; log $log, input in $art/)"
    exit 1
  fi
  # The final coverage line and the speed: "#N DONE cov: C ft: F corp: ..." and stat::*.
  grep -E 'DONE|stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log" | sed "s/^/  /"
done
echo "fuzz: ${#targets[@]} targets clean"
